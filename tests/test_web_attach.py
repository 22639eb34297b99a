"""Attaching to the user's own browser (--remote-debugging-port): the visible tab is used,
the browser keeps running, and the user's pages are left as they were (SPEC §9)."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from web_site import need_browser, short_temp, wait_exit, web_site

from tools.procs import end_group, popen_tied, release
from tools.web import BrowserConfig
from tools.web.browser import Browser
from tools.web.cdp import Connection, ConnectionLost
from tools.web.execute import web_execute_js
from tools.web.launch import DEBIAN_CHROMIUM, attach_url
from tools.web.scan import web_scan
from tools.web.tab import WORLD

__all__ = ["short_temp", "web_site"]


USER_FLAGS = ("--headless", "--disable-gpu", "--no-first-run", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--no-sandbox",
              "--remote-debugging-port=0")
PORT_WAIT = 20.0


@contextlib.contextmanager
def user_chromium(profile: Path, url: str):
    """A Chromium as a user starts it, with --remote-debugging-port: yields (process, its
    http://127.0.0.1:port). Tied to this test run and ended on the way out, whatever
    happened in between."""
    argv = [os.environ.get("GA_CHROMIUM") or DEBIAN_CHROMIUM, *USER_FLAGS,
            f"--user-data-dir={profile}", url]
    proc = popen_tied(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                      env={**os.environ, "TMPDIR": str(profile)})
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + PORT_WAIT
        while len(port_file.exists() and port_file.read_text().split() or []) != 2:
            assert proc.poll() is None and time.monotonic() < deadline, "no DevTools port"
            time.sleep(0.02)  # the browser writes this file once it listens
        yield proc, f"http://127.0.0.1:{port_file.read_text().split()[0]}"
    finally:
        end_group(proc)
        proc.wait()
        release(proc)


@pytest.fixture
def users_browser(short_temp, web_site):
    """A Chromium the user started with --remote-debugging-port, with two tabs."""
    need_browser()
    with user_chromium(short_temp, web_site("/nav1.html")) as (proc, url):
        user = Connection(attach_url(url))
        try:
            user.call("Target.createTarget", {"url": web_site("/nav2.html")})  # in front
            loaded(user, 2)
            yield proc, url, user
        finally:
            user.close()


LOADED = ("new Promise(r => document.readyState === 'complete' ? r(location.href)"
          " : addEventListener('load', () => r(location.href)))")


def loaded(user: Connection, pages: int) -> None:
    """Wait until the browser shows ``pages`` pages of the test site, loaded."""
    deadline = time.monotonic() + PORT_WAIT
    while len([u for _, u in page_targets(user) if u.startswith("http")]) < pages:
        assert time.monotonic() < deadline, "the pages did not open"
        time.sleep(0.02)  # the user's connection is not told of targets: look again
    for target, _ in page_targets(user):
        session = user.call("Target.attachToTarget", {"targetId": target, "flatten": True})
        user.call("Runtime.evaluate", {"expression": LOADED, "awaitPromise": True},
                  session["sessionId"])
        user.call("Target.detachFromTarget", {"sessionId": session["sessionId"]})


def test_the_users_browser_of_a_test_ends_even_when_its_setup_fails(short_temp):
    need_browser()
    with pytest.raises(ConnectionLost):
        with user_chromium(short_temp, "about:blank") as (proc, url):
            Connection(url.replace("http://", "ws://") + "/no-such-socket")
    assert wait_exit(proc.pid) and proc.returncode is not None


def page_targets(conn: Connection) -> list[tuple[str, str]]:
    infos = conn.call("Target.getTargets")["targetInfos"]
    return sorted((i["targetId"], i["url"]) for i in infos if i["type"] == "page")


VISIBLE = ("new Promise(r => document.visibilityState === 'visible' ? r()"
           " : addEventListener('visibilitychange', r, {once: true}))")


def bring_to_front(user: Connection, target: str) -> None:
    """Show the tab as the user would, and wait until its page knows it is seen."""
    user.call("Target.activateTarget", {"targetId": target})
    session = user.call("Target.attachToTarget", {"targetId": target, "flatten": True})
    user.call("Runtime.evaluate", {"expression": VISIBLE, "awaitPromise": True},
              session["sessionId"])
    user.call("Target.detachFromTarget", {"sessionId": session["sessionId"]})


def test_attach_scans_the_visible_tab_and_leaves_the_browser_running(users_browser):
    proc, url, user = users_browser
    before = page_targets(user)
    assert len(before) == 2
    for target, page in before:  # each in front once: one of them is not listed first
        bring_to_front(user, target)
        browser = Browser(BrowserConfig(cdp_url=url))
        out = web_scan(browser)
        body = "PAGE-ONE-BODY" if page.endswith("/nav1.html") else "PAGE-TWO-BODY"
        assert body in out and browser.launched is None
        browser.close()
        assert proc.poll() is None
        assert page_targets(user) == before
        infos = user.call("Target.getTargets")["targetInfos"]
        assert not any(i["attached"] for i in infos if i["type"] == "page")  # nothing left on


# globals a script made (not the browser's own interfaces and namespaces, some of which it
# installs lazily): a non-native function, a plain object or array, a writable value
OWN_GLOBALS = """Object.getOwnPropertyNames(window).filter((n) => {
  let v;
  try { v = window[n]; } catch (e) { return false; }
  const tag = Object.prototype.toString.call(v);
  if (typeof v === 'function') {
    return !/\\[native code\\] *}$/.test(Function.prototype.toString.call(v));
  }
  const plain = tag === '[object Object]' || tag === '[object Array]';
  if (v !== null && typeof v === 'object') return plain;
  return Object.getOwnPropertyDescriptor(window, n).writable === true;
}).sort()"""


def window_names(user: Connection, target: str) -> list[str]:
    """The globals of a tab's window that are not the browser's own (the browser may add
    interfaces of its own at any time), as the page itself sees them."""
    session = user.call("Target.attachToTarget", {"targetId": target, "flatten": True})
    try:
        reply = user.call("Runtime.evaluate", {"expression": OWN_GLOBALS, "returnByValue": True},
                          session["sessionId"])
    finally:
        user.call("Target.detachFromTarget", {"sessionId": session["sessionId"]})
    return reply["result"]["value"]


def test_attach_leaves_no_trace_in_the_users_pages(users_browser, web_site):
    proc, url, user = users_browser
    targets = [t for t, _ in page_targets(user)]
    before = {t: window_names(user, t) for t in targets}
    browser = Browser(BrowserConfig(cdp_url=url))
    web_scan(browser)  # the visible tab, then the other one
    first = next(t for t, u in page_targets(user) if u.endswith("/nav1.html"))
    text = web_scan(browser, switch_tab_id=browser.short_id(first))
    n = re.search(r'\[(\d+)\]link "Go to page two"', text).group(1)
    assert web_execute_js(browser, f"ga({n}).tagName")["js_return"] == "A"
    browser.close()
    after = {t: window_names(user, t) for t in targets}
    assert after == before and not any("__ga" in names for names in after.values())
    assert not any(left_running(user, t) for t in targets)


def left_running(user: Connection, target: str) -> bool:
    """Whether our page-side code still runs in the tab (in its isolated world)."""
    session = user.call("Target.attachToTarget", {"targetId": target, "flatten": True})
    sid = session["sessionId"]
    try:
        frame = user.call("Page.getFrameTree", {}, sid)["frameTree"]["frame"]["id"]
        world = user.call("Page.createIsolatedWorld", {"frameId": frame, "worldName": WORLD}, sid)
        reply = user.call("Runtime.evaluate", {"expression": "!!window.__ga", "returnByValue": True,
                                               "contextId": world["executionContextId"]}, sid)
    finally:
        user.call("Target.detachFromTarget", {"sessionId": sid})
    return reply["result"]["value"]
