"""Pages for the web tool tests, served on 127.0.0.1 by a real HTTP server, and a browser.

``web_site`` serves ``PAGES`` (plus ``/slow-data``, answered after ``LATE_DELAY`` s,
``/items.html?n=N`` and the pages a test puts in ``site.pages``); ``web_browser`` is one
real Chromium for a whole test module.
Without a browser on the machine the tests that need one are skipped, saying why.
``running_with``, ``wait_exit`` and ``short_temp`` look after the processes and folders.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator
from urllib.parse import parse_qs, urlparse

import pytest

from tools.web import BrowserConfig, unavailable_reason
from tools.web.browser import Browser
from tools.web.execute import web_execute_js

DOWNLOAD_NAME = "ga-download-test.bin"  # what /download.bin asks the browser to save
LATE_DELAY = 0.5  # seconds /slow-data takes: the late page renders after it
SHUTDOWN_POLL_SECONDS = 0.01
SECRET_PASSWORD = "hunter2-secret"
PARAGRAPHS = 150
COLOUR = (200, 30, 40)  # the background of /colour.html, seen in its screenshots
LONG_TITLE = 200_000  # chars of /long-title.html's title
EXIT_WAIT = 10.0  # seconds a process is given to end
BUSY_MS = 4000  # how long /busy.html's spin() keeps its page's thread busy
JSON_CHARS = 80_000  # /data.json: one line of JSON this long
LONG_WORDS = 8_000  # /long-paragraph.html: one <p> of this many words
INLINE_LINKS = 3_000  # /inline-links.html: one <div> of this many links
HUGE_NODES = 1_000_000  # /huge.html: a document of this many elements


def _page(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head>"
            f"<body>{body}</body></html>")


def _article() -> str:
    words = "the quick brown fox jumps over the lazy dog while the cat sleeps " * 6
    paras = "".join(f"<p>Paragraph {i}: {words}</p>" for i in range(1, PARAGRAPHS))
    return _page("Long article", f"<article><h1>A long article</h1>{paras}"
                 f"<p>Paragraph {PARAGRAPHS}: END-OF-ARTICLE</p></article>")


def _div_prose() -> str:
    sentence = "The quick brown fox jumps over the lazy dog while the cat sleeps."
    paras = "".join(f'<div class="para">Para {i}: {sentence}</div>' for i in range(1, 61))
    cards = "".join(f'<div class="card"><a href="/p{i}">Product {i}</a> $9</div>'
                    for i in range(1, 61))
    return _page("Div prose", f"<article>{paras}</article><section>{cards}</section>")


def _json() -> str:
    """One line of JSON, as an API answers, ending in a marker."""
    rows, size = [], 0
    while size < JSON_CHARS:
        rows.append({"id": len(rows), "name": f"row-{len(rows)}", "tags": ["alpha", "beta"]})
        size += 60
    return json.dumps({"rows": rows, "end": "JSON-END"}, separators=(",", ":"))


def _long_paragraph() -> str:
    words = " ".join(f"word{i}" for i in range(LONG_WORDS))
    return _page("Long paragraph", f"<h1>One paragraph</h1><p>PARAGRAPH-START {words} "
                 "PARAGRAPH-END</p>")


def _inline_links() -> str:
    links = " · ".join(f'<a href="/l{i}">Link {i}</a>' for i in range(INLINE_LINKS))
    return _page("Inline links", f"<div>{links}</div>")


BUSY_PAGES = {  # pages busy from their first script, and one too big to read quickly
    "/spin.html": _page("Spin", "<p>SPIN-BEFORE</p><script>while (true) {}</script>"
                        "<p>SPIN-AFTER</p>"),
    "/spin-inner.html": _page("Spin inner", "<script>while (true) {}</script>"),
    "/spin-frame.html": _page("Spin frame", "<p>FRAME-OUTER</p>"
                              "<iframe src='/spin-inner.html'></iframe><p>FRAME-AFTER</p>"),
    "/alert-loop.html": _page("Alert loop", "<script>while (true) { alert('x') }</script>"),
    "/huge.html": _page("Huge", "<div>x</div>" * HUGE_NODES),
}


FORM = f"""
<h1>Sign in</h1>
<form>
 <label for="email">Email address</label> <input id="email" type="email" value="ann@example.com">
 <label>Password <input type="password" value="{SECRET_PASSWORD}"></label>
 <label><input type="checkbox" checked> Remember me</label>
 <label><input type="checkbox"> Send newsletter</label>
 <label>Colour <select><option>Red</option><option selected>Green</option>
   <option>Blue</option></select></label>
 <label>Notes <textarea>first line</textarea></label>
 <input type="text" aria-label="Coupon" disabled>
 <button type="submit" disabled>Pay now</button>
 <button type="button">Cancel</button>
</form>"""

HIDDEN = """
<p>VISIBLE-OK</p>
<div style="display:none">HIDDEN-DISPLAY</div>
<div style="visibility:hidden">HIDDEN-VISIBILITY</div>
<div hidden>HIDDEN-ATTRIBUTE</div>
<div aria-hidden="true">HIDDEN-ARIA</div>
<div style="width:0;height:0;overflow:hidden">HIDDEN-ZERO-SIZE</div>
<div style="position:absolute;left:-10000px;top:0">HIDDEN-OFFSCREEN</div>
<span style="position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0)">
  HIDDEN-SR-ONLY</span>
<details><summary>Summary shown</summary>HIDDEN-DETAILS</details>
<template><p>HIDDEN-TEMPLATE</p></template>
<dialog>HIDDEN-DIALOG</dialog>
<script>var x = "HIDDEN-SCRIPT";</script>
<noscript>HIDDEN-NOSCRIPT</noscript>
<button style="display:none">HIDDEN-BUTTON</button>
<dialog open>OPEN-DIALOG-TEXT</dialog>"""

LATE = """
<p id="status">Loading…</p>
<script>
fetch('/slow-data').then(r => r.json()).then(d => {
  document.getElementById('status').textContent = d.text;
});
</script>"""

SHADOW = """
<p>LIGHT-TEXT</p>
<fancy-card><span>SLOTTED-TEXT</span></fancy-card>
<script>
customElements.define('fancy-card', class extends HTMLElement {
  constructor() {
    super();
    this.attachShadow({mode: 'open'}).innerHTML =
      '<h2>SHADOW-HEADING</h2><slot></slot><button>Shadow button</button>';
  }
});
</script>"""

TAMPERED = """
<p>TAMPERED-TEXT</p><button>Tampered button</button>
<script>
window.getComputedStyle = () => { throw new Error('gcs'); };
Array.prototype.map = function () { return []; };
Array.prototype.filter = function () { return []; };
Array.from = () => [];
Object.keys = () => [];
Object.assign = () => ({});
JSON.stringify = () => '"tampered"';
Element.prototype.getBoundingClientRect = () => { throw new Error('rect'); };
window.Set = function () { throw new Error('set'); };
</script>"""

UNSEEN = """
<style>body { background: #fff; color: #222 } .fade { opacity: 0; transition: opacity 1s }</style>
<p>SEEN-TEXT</p>
<p style="opacity:0">UNSEEN-OPACITY</p>
<div style="opacity:0"><span>UNSEEN-OPACITY-CHILD</span></div>
<p style="font-size:0">UNSEEN-FONT-SIZE</p>
<p style="color:#fff">UNSEEN-WHITE-ON-WHITE</p>
<p style="color:#fbfbfb">UNSEEN-ALMOST-WHITE</p>
<div style="background:#123"><p style="color:#123">UNSEEN-NAVY-ON-NAVY</p></div>
<p style="color:transparent">UNSEEN-TRANSPARENT</p>
<a href="/x" style="color:#fff">UNSEEN-LINK-TEXT</a>
<a href="/y">SEEN-LINK <span style="color:#fff">UNSEEN-IN-LINK</span></a>
<pre style="color:#fff">UNSEEN-PRE</pre>
<div style="background:#000"><p style="color:#fff">SEEN-WHITE-ON-BLACK</p></div>
<div style="position:relative"><div style="position:absolute;color:#fff">SEEN-OVER-IMAGE</div></div>
<p class="fade">SEEN-FADING-IN</p>
<label><input type="checkbox" checked style="opacity:0"> SEEN-STYLED-BOX</label>
<p style="color:#f0f0f0">SEEN-LIGHT-GREY</p>
<p style="transform:scale(0)">UNSEEN-SCALED-AWAY</p>
<div style="content-visibility:hidden">UNSEEN-CONTENT-VISIBILITY <b>UNSEEN-SKIPPED</b></div>"""

TIMER = """
<p id="status">Waiting</p>
<script>
addEventListener('load', () => setTimeout(() => {
  document.getElementById('status').textContent = 'TIMER-CONTENT-DRAWN';
}, 300));
</script>"""

PAGES = {
    "/article.html": _article(),
    "/div-prose.html": _div_prose(),
    "/busy.html": _page("Busy", "<p>BUSY-PAGE</p><script>function spin() { const t = Date.now();"
                        f" while (Date.now() - t < {BUSY_MS}) {{}} document.title = 'SPUN' }}"
                        "</script>"),
    "/form.html": _page("Form", FORM),
    "/hidden.html": _page("Hidden", HIDDEN),
    "/late.html": _page("Late", LATE),
    "/nav1.html": _page("Page one", '<p>PAGE-ONE-BODY</p><a href="/nav2.html">Go to page two</a>'
                        '<button onclick="window.open(\'/nav2.html\')">Open popup</button>'),
    "/nav2.html": _page("Page two", "<h1>Second</h1><p>PAGE-TWO-BODY</p>"),
    "/iframe.html": _page("Frames", '<p>OUTER-TEXT</p><iframe src="/frame-inner.html"></iframe>'),
    "/frame-inner.html": _page("Inner", '<p>INSIDE-FRAME</p><button onclick="this.textContent='
                               "'Clicked inside'\">Frame button</button>"),
    "/shadow.html": _page("Shadow", SHADOW),
    "/blank.html": _page("Blank", "<p>BLANK-PAGE</p>"),
    "/colour.html": _page("Colour", f"<style>html {{ background: rgb{COLOUR} }}</style>"
                          "<h1>COLOUR-PAGE</h1>"),
    "/tampered.html": _page("Tampered", TAMPERED),
    "/unseen.html": _page("Unseen", UNSEEN),
    "/timer.html": _page("Timer", TIMER),
    "/long-title.html": _page("T" * LONG_TITLE + "-END", "<p>LONG-TITLE-BODY</p>"),
    "/dialog-popup.html": _page("Dialog popup", "<script>alert('popup says hi');"
                                "confirm('popup asks')</script><p>POPUP-DIALOG-BODY</p>"),
    "/long-paragraph.html": _long_paragraph(),
    "/inline-links.html": _inline_links(),
}


def items_page(n: int) -> str:
    items = "".join(f"<li>Item number {i}</li>" for i in range(1, n + 1))
    return _page("Items", f"<h1>Items</h1><ul>{items}</ul><p>AFTER-LIST</p>")


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        url = urlparse(self.path)
        hook = self.server.hooks.get(url.path)
        if hook is not None:
            hook()
            self._send("{}", "application/json")
        elif url.path == "/slow-data":
            time.sleep(LATE_DELAY)
            self._send(json.dumps({"text": "LATE-CONTENT-ARRIVED"}), "application/json")
        elif url.path == "/data.json":
            self._send(_json(), "application/json")
        elif url.path in BUSY_PAGES:
            self._send(BUSY_PAGES[url.path])
        elif url.path == "/download.bin":
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Disposition", f"attachment; filename={DOWNLOAD_NAME}")
            self.send_header("Content-Length", "4")
            self.end_headers()
            self.wfile.write(b"DATA")
        elif url.path == "/items.html":
            self._send(items_page(int(parse_qs(url.query).get("n", ["3000"])[0])))
        elif url.path in PAGES:
            self._send(PAGES[url.path])
        elif url.path in self.server.pages:
            self._send(self.server.pages[url.path])
        else:
            self.send_error(404)

    def _send(self, body: str, kind: str = "text/html; charset=utf-8") -> None:
        data = body.encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            return  # the browser left (a tab closed, a browser ended): no one to answer

    def log_message(self, *args) -> None:
        return None


class Site:
    def __init__(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.server.hooks = {}  # path -> function called when a page requests it
        self.server.pages = self.pages = {}  # path -> HTML a test serves
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       args=(SHUTDOWN_POLL_SECONDS,), daemon=True)

    def __call__(self, path: str) -> str:
        return self.url + path


@pytest.fixture(scope="module")
def web_site() -> Iterator[Site]:
    site = Site()
    site.thread.start()
    yield site
    site.server.shutdown()
    site.server.server_close()


def need_browser() -> None:
    """Skip (fail in CI, where $GA_REALBROWSER=require) without a browser to test with."""
    reason = unavailable_reason(BrowserConfig())
    if reason and os.environ.get("GA_REALBROWSER") == "require":
        pytest.fail(f"GA_REALBROWSER=require but there is no browser: {reason}")
    if reason:
        pytest.skip(f"no browser to test with: {reason}")


@pytest.fixture(scope="module")
def web_browser() -> Iterator[Browser]:
    need_browser()
    browser = Browser(BrowserConfig(headless=True))
    yield browser
    browser.close()


def goto(browser: Browser, url: str) -> dict:
    """Navigate the active tab to ``url`` through the tool itself (no DOM monitor: the
    navigation is reported without it)."""
    result = web_execute_js(browser, f"location.href = {json.dumps(url)}", no_monitor=True)
    assert result["status"] == "success", result
    assert result["navigated"]["to"] == url, result
    return result


def close_tabs(browser: Browser, *targets: str) -> None:
    """Close these tabs and wait until the browser says they are gone, so the next web call
    (of this test or the next one) never meets a tab half-closed."""
    for target in targets:
        browser.conn.call("Target.closeTarget", {"targetId": target})
    assert browser.wait_targets(lambda: not set(targets) & set(browser.targets), EXIT_WAIT)


def running_with(marker: str) -> list[int]:
    """Live (not zombie) processes whose command line mentions ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != b"Z":
            found.append(int(entry))
    return found


def wait_exit(pid: int, timeout: float = EXIT_WAIT) -> bool:
    """Wait for any process to end, on its pidfd (no polling)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


@pytest.fixture
def short_temp():
    """A temp dir with a short path (Chromium's socket paths must stay under 108 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="ga-test-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
