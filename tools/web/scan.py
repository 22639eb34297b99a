"""``web_scan``: the tab list and the visible page as text, and on request a screenshot of
the tab's viewport (SPEC §9, §10). A failed scan is the envelope alone, as a dict, so that
it reads as an error wherever results are shown."""

from __future__ import annotations

import base64
import json
import threading
import time

from llmcore.images import Picture, load_image

from .browser import Browser, error_text
from .cdp import CDPError
from .cuts import page_call
from .launch import BrowserUnavailable
from .tab import Tab, TabCrashed, WebError

SCAN_TIMEOUT = 20.0  # seconds a scan may wait on the page (its extractor included)
LOAD_WAIT = 5.0  # seconds a scan waits for a loading page
SETTLE_MAX = 3.0  # seconds a scan waits for requests and DOM changes to calm down
QUIET = 0.15  # seconds without requests / DOM changes that count as settled
LOAD_QUIET = 0.5  # seconds after the load before a page counts as drawn (timers draw late)
URL_CHARS = 50
SIMILAR_MIN = 50  # a run of more similar siblings than this is cut …
SIMILAR_SHOW = 10  # … to its first items and a count
SHOT_TIMEOUT = 20.0  # seconds the browser may take to render a screenshot
SHOT_NAME = "screenshot.png"


def web_scan(browser: Browser, tabs_only: bool = False, switch_tab_id: str | None = None,
             text_only: bool = False, viewport: bool = False, budget: int = 35_000,
             abort: threading.Event | None = None) -> str | dict:
    """A JSON envelope (status, tabs) and, unless ``tabs_only``, the page as a text block;
    on error the envelope as a dict."""
    return scan_page(browser, tabs_only, switch_tab_id, text_only, viewport, budget,
                     abort=abort)[0]


def scan_page(browser: Browser, tabs_only: bool = False, switch_tab_id: str | None = None,
              text_only: bool = False, viewport: bool = False, budget: int = 35_000,
              screenshot: bool = False, abort: threading.Event | None = None
              ) -> tuple[str | dict, Picture | None]:
    """``web_scan``'s text (a dict on error) and, with ``screenshot``, the tab's viewport as
    a send-ready picture (None when not asked for or when the scan failed). Its waits end
    within ``SCAN_TIMEOUT`` and at once when ``abort`` is set."""
    tab = None
    try:
        with browser.limits.running(abort, SCAN_TIMEOUT):
            tab = browser.tab(switch_tab_id)
            page = None if tabs_only else read_page(tab, budget, text_only, viewport)
            shot = capture(tab) if screenshot else None
    except TabCrashed as e:
        error = browser.crash_report(tab, e) if tab is not None else str(e)
        return error_envelope(browser, error), None
    except (WebError, BrowserUnavailable, CDPError) as e:
        return error_envelope(browser, error_text(browser, e)), None
    if page is None:
        return envelope(browser, tab), shot
    return envelope(browser, tab, page["title"]) + "\n```text\n" + page["text"] + "\n```", shot


def capture(tab: Tab) -> Picture:
    """A PNG of what the tab's viewport shows, downscaled and size-capped for a model."""
    reply = tab.request("Page.captureScreenshot", {"format": "png"}, SHOT_TIMEOUT)
    return load_image(base64.b64decode(reply["data"]), name=SHOT_NAME)


def read_page(tab: Tab, budget: int, text_only: bool = False, viewport: bool = False) -> dict:
    """Wait for the page to settle, then run the extractor: {title, url, text, …}."""
    settle(tab)
    opts = {"budget": budget, "textOnly": text_only, "viewport": viewport,
            "similarMin": SIMILAR_MIN, "similarShow": SIMILAR_SHOW}
    return page_call(tab, "scan", opts)


def settle(tab: Tab) -> None:
    """Wait (bounded) for the load, then for in-flight requests and redrawing to end: at
    most ``SETTLE_MAX`` for both together."""
    loads = tab.loads
    if not tab.ensure_page_js():
        tab.wait(lambda: tab.loads > loads, LOAD_WAIT)
        tab.ensure_page_js()
    deadline = time.monotonic() + SETTLE_MAX
    tab.network_idle(QUIET, SETTLE_MAX)
    tab.dom_quiet(QUIET, max(deadline - time.monotonic(), 0), after_load=LOAD_QUIET)


def tabs_metadata(browser: Browser, active: Tab | None, title: str | None = None) -> dict:
    """The tab list: titles as the browser reports them (no tab is asked, a busy one would
    hold the scan up), the scanned tab's as its page said."""
    tabs = browser.tab_list() if browser.running else []
    for t in tabs:
        if active is not None and title and t["id"] == active.id:
            t["title"] = title
        if len(t["url"]) > URL_CHARS:
            t["url"] = t["url"][:URL_CHARS] + "..."
    meta = {"tabs_count": len(tabs), "tabs": tabs}
    if active is not None:
        meta["active_tab"] = active.id
    return meta


def envelope(browser: Browser, tab: Tab, title: str | None = None) -> str:
    head = {"status": "success", "metadata": tabs_metadata(browser, tab, title)}
    notice = browser.take_notice()
    if notice:
        head["note"] = notice
    return json.dumps(head, ensure_ascii=False)


def error_envelope(browser: Browser, msg: str) -> dict:
    return {"status": "error", "msg": msg, "metadata": tabs_metadata(browser, None)}
