"""One page target: its CDP session and what happened in it (navigation, requests,
dialogs, accepted at once so a page never blocks; a crash of its renderer), and running
code in it with a timeout that terminates a runaway script.

Everything the page's renderer must answer goes through ``Tab.request``: bounded by the
web call's time (``Browser.limits``), ended at once by its abort, and on a timeout the
page's running script is terminated — a page busy from its first script (a loop, an alert
loop) is freed that way. A page that still does not answer (a huge document being laid
out) is marked ``busy``: the next web call replaces the tab (``Browser``).

Our own page-side code (``extract.js``) runs in an isolated world (``WORLD``): it shares
the page's DOM but not its JavaScript globals, so a page cannot see it or break it by
replacing builtins. Only the model's scripts run in the page's main world.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .cdp import CDPError, Session

log = logging.getLogger("ga.web")

if TYPE_CHECKING:
    from .browser import Browser

EXTRACT_JS = "extract.js"  # our page-side code, in the isolated world
TRACKED_REQUESTS = frozenset({"Document", "Script", "Stylesheet", "XHR", "Fetch"})
REQUEST_STALE = 2.0  # seconds after which a request (long poll, stream) no longer holds a scan
TERMINATE_WAIT = 2.0  # seconds to wait for a terminated script's answer
TICK = 0.1  # seconds between abort checks while waiting on the page
DIALOG_TEXT_CHARS = 300
QUICK_TIMEOUT = 2.0  # seconds for a small read (a title, a state) before giving up on it
TERMINATE_POLL = 0.01  # seconds between looks at a terminated script and the probe after it
STALE_WORLD = ("Cannot find context", "No frame")  # a world or frame id of an older document
WORLD = "ga"  # the isolated world of extract.js
RELOAD_WAIT = 10.0  # seconds a crashed tab's reload is waited for
STALLS_BUSY = 2  # a document whose own script had to be terminated this often counts as busy
PAGE_STOPPED = ("the page in tab {tab} did not answer in {s} s (busy running a script): the "
                "script was terminated, so the page may be incomplete; the tab is usable")
BUSY_PAGE = ("the page in tab {tab} did not answer in {s} s, nor after its script was "
             "terminated (a script that keeps running, or a very large page)")
BUSY_SCRIPT = ("the script ran past its {s} s timeout and was terminated, but the page in tab "
               "{tab} still does not answer (a script that keeps running, or a very large page)")
REPLACE_NEXT = "; the next web call opens a new tab in its place"


class WebError(Exception):
    """A web tool problem the model can act on."""

    for_model = True


class ScriptTimeout(WebError):
    pass


class Aborted(WebError):
    """The web call was aborted (Ctrl-C, a signal, the task stopped)."""


class TabBusy(WebError):
    """The page did not answer in time (its own script, or a huge document, kept it busy)."""


class JSError(WebError):
    """The page's script threw; the message is the exception's first line."""


class TabCrashed(WebError):
    """The tab's renderer crashed (or was killed) while we waited on it."""


class TabClosed(WebError):
    """The tab closed while we waited on it (the page may have closed itself)."""


class Tab:
    """One page target: its CDP session and what happened in it."""

    def __init__(self, browser: Browser, target_id: str, session: Session) -> None:
        self.browser = browser
        self.target_id = target_id
        self.session = session
        self.cond = threading.Condition()
        self.main_frame = ""
        self.url = ""
        self.navigations = 0  # main-frame navigations committed (same-document ones too)
        self.nav_requests = 0  # main-frame navigations asked for (the page's own at once)
        self.starts = 0  # main-frame loads started
        self.loads = 0  # main-frame loads finished
        self.loading = False  # the main frame's document is loading now
        self.dialogs: list[dict] = []
        self.requests: dict[str, float] = {}
        self.last_request = 0.0
        self.closed = False
        self.script_id = ""  # of extract.js, added to every new document
        self.crashed = ""  # the renderer's exit status once it crashed, until a reload
        self.documents = 0  # main-frame documents committed: our world is per document
        self._world: tuple[int, int] | None = None  # (documents, execution context id)
        self.busy = ""  # why the page stopped answering: the next web call replaces the tab
        self.stalls = 0  # times the current document's own script had to be terminated

    def setup(self) -> None:
        tree = self.request("Page.getFrameTree")["frameTree"]["frame"]
        self.main_frame, self.url = tree["id"], tree.get("url", "")
        self.request("Page.enable")
        self.request("Network.enable")
        self.script_id = self.request("Page.addScriptToEvaluateOnNewDocument", {
            "source": page_js(EXTRACT_JS), "worldName": WORLD})["identifier"]

    def leave(self) -> None:
        """Take our page-side code out of this tab (an attached browser's): new documents
        no longer get it and the current one stops it."""
        try:
            self.session.call("Page.removeScriptToEvaluateOnNewDocument",
                              {"identifier": self.script_id}, timeout=QUICK_TIMEOUT)
            if not self.crashed:
                self.page_value("window.__ga && window.__ga.stop()", timeout=QUICK_TIMEOUT)
        except (CDPError, WebError) as e:
            log.debug("leaving tab %s: %s", self.id, e)

    def target_url(self) -> str:
        """The URL the browser shows for this tab (a pending or failed one included)."""
        return self.browser.targets.get(self.target_id, {}).get("url", "")

    @property
    def id(self) -> str:
        return self.browser.short_id(self.target_id)

    # ---- events (reader thread: never wait here) -----------------------------------------
    def on_event(self, method: str, params: dict) -> None:
        with self.cond:
            self._update(method, params)
            self.cond.notify_all()

    def _update(self, method: str, p: dict) -> None:
        main = p.get("frameId") == self.main_frame
        if method == "Page.javascriptDialogOpening":
            self.dialogs.append({"type": p.get("type", ""),
                                 "message": self.browser.redact(p.get("message", ""))
                                 [:DIALOG_TEXT_CHARS]})
            self.session.send("Page.handleJavaScriptDialog",
                              {"accept": True, "promptText": p.get("defaultPrompt", "")})
        elif method == "Network.requestWillBeSent" and p.get("type") in TRACKED_REQUESTS:
            self.requests.setdefault(p["requestId"], time.monotonic())
        elif method in ("Network.loadingFinished", "Network.loadingFailed"):
            if self.requests.pop(p.get("requestId"), None) is not None:
                self.last_request = time.monotonic()
        elif method == "Page.frameNavigated" and not p["frame"].get("parentId"):
            self.main_frame, self.url = p["frame"]["id"], p["frame"].get("url", "")
            self.navigations += 1
            self.documents += 1
            self.stalls = 0
        elif method == "Page.navigatedWithinDocument" and main:
            self.url = p.get("url", self.url)
            self.navigations += 1
        elif method == "Page.frameRequestedNavigation" and main and p.get(
                "disposition", "currentTab") == "currentTab":
            self.nav_requests += 1
        elif method == "Page.frameStartedLoading" and main:
            self.nav_requests += 1
            self.starts += 1
            self.loading = True
        elif method in ("Page.loadEventFired", "Page.frameStoppedLoading") and (
                main or method == "Page.loadEventFired"):
            self.loads += 1
            self.loading = False

    def mark_closed(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def mark_crashed(self, status: str) -> None:
        with self.cond:
            self.crashed = status or "crashed"
            self.cond.notify_all()

    def wait(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait (on events) until ``predicate()`` or the tab closes or crashes; False on
        timeout. Aborted when the web call is aborted."""
        end = time.monotonic() + timeout
        with self.cond:
            while not (self.closed or self.crashed or predicate()):
                self.browser.limits.check()
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(min(left, TICK))
        return True

    def reload(self) -> None:
        """Load the page again (after a crash of its renderer) and wait for it (bounded)."""
        loads = self.loads
        with self.cond:
            self.crashed = ""
        self._world = None
        self.session.call("Page.reload", timeout=QUICK_TIMEOUT)
        self.wait(lambda: self.loads > loads, RELOAD_WAIT)

    def network_idle(self, quiet: float, timeout: float) -> None:
        """Wait until no page request is in flight and none ended in the last ``quiet`` s."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while not (self.closed or self.crashed):
                self.browser.limits.check()
                now = time.monotonic()
                busy = [t for t in self.requests.values() if now - t < REQUEST_STALE]
                left = deadline - now
                if left <= 0:
                    return
                if busy:
                    self.cond.wait(min(left, TICK))
                    continue
                rest = quiet - (now - self.last_request)
                if rest <= 0:
                    return
                self.cond.wait(min(rest, left, TICK))

    def dom_quiet(self, quiet: float, limit: float, since: float | None = None,
                  after_load: float = 0.0, stop: Callable[[], bool] = lambda: False) -> None:
        """Wait until the DOM has not changed for ``quiet`` s (nor since the monotonic time
        ``since``) and the page finished loading ``after_load`` s ago (content a timer draws
        just after the load), at most ``limit`` s; page timers of a background tab are
        throttled, so the waiting happens here."""
        start = time.monotonic()
        while True:
            changed, loaded = self.page_value("window.__ga.idle()") or (0, 0)
            now = time.monotonic()
            age = changed / 1000 if since is None else min(changed / 1000, now - since)
            rest = max(quiet - age, after_load - loaded / 1000)
            left = limit - (now - start)
            if rest <= 0 or left <= 0 or stop():
                return
            self.wait(stop, min(rest, left))

    # ---- running code in the page ----------------------------------------------------------
    def request(self, method: str, params: dict | None = None, timeout: float | None = None,
                script: bool = False) -> dict:
        """Call a method the page's renderer answers, within ``timeout`` (default: what is
        left of the web call). On a timeout or an abort the page's running script is
        terminated; ``script``: it is the model's own (ScriptTimeout), else the page's
        (TabBusy)."""
        limit = self.browser.limits.time_left() if timeout is None else timeout
        pending = self.session.send(method, params)
        deadline = time.monotonic() + limit
        while not pending.done.wait(min(TICK, max(deadline - time.monotonic(), 0))):
            self._check_alive(pending)
            if self.browser.limits.aborted():
                if script:
                    self._terminate(pending)
                self.session.conn.forget(pending)
                raise Aborted("the web call was aborted" + (
                    "; the script was terminated" if script else ""))
            if time.monotonic() >= deadline:
                self._timed_out(pending, limit, script)
        return self.session.conn.result(method, pending)

    def _timed_out(self, pending: Any, limit: float, script: bool) -> None:
        """Terminate what keeps the page busy and raise what the model is told. The page's
        own script stopped, the page is usable when it answers and finishes loading (a
        huge document answers now and then while it is being read, and loads on)."""
        freed = self._terminate(pending)
        if script:
            limit = self.browser.limits.timeout or limit
        if script and freed:
            raise ScriptTimeout(f"the script ran past its {limit:g} s timeout and was "
                                f"terminated; the tab is usable")
        if not script:
            self.stalls += 1
            freed = freed and self.wait(lambda: not self.loading, QUICK_TIMEOUT)
        if freed and self.stalls < STALLS_BUSY:
            raise TabBusy(PAGE_STOPPED.format(tab=self.id, s=f"{limit:g}"))
        self.busy = (BUSY_SCRIPT if script else BUSY_PAGE).format(tab=self.id, s=f"{limit:g}")
        raise TabBusy(self.busy + REPLACE_NEXT)

    def evaluate(self, expression: str, timeout: float | None = None, script: bool = False,
                 **options: Any) -> dict:
        """``Runtime.evaluate`` through ``request``; its promise is awaited."""
        params = {"expression": expression, "awaitPromise": True, "returnByValue": True,
                  **options}
        return self.request("Runtime.evaluate", params, timeout, script)

    def _check_alive(self, pending: Any) -> None:
        if self.crashed:
            self.session.conn.forget(pending)
            raise TabCrashed(f"the page crashed ({self.crashed})")
        if self.closed:
            self.session.conn.forget(pending)
            raise TabClosed("the tab was closed; web_scan shows the open tabs")

    def _terminate(self, pending: Any) -> bool:
        """End the page's running script; whether the page answers again. One that only
        awaits a promise that never settles has nothing to end: a probe answered by the
        page says its thread is free again."""
        self.session.send("Runtime.terminateExecution")
        probe = self.session.send("Runtime.evaluate", {"expression": "0"})
        end = time.monotonic() + TERMINATE_WAIT
        while not (pending.done.is_set() or probe.done.is_set()) and time.monotonic() < end:
            pending.done.wait(TERMINATE_POLL)
        self.session.conn.forget(pending)
        self.session.conn.forget(probe)
        return pending.done.is_set() or probe.done.is_set()

    def world(self) -> int:
        """The execution context of our isolated world in the current document."""
        documents = self.documents
        if self._world is not None and self._world[0] == documents:
            return self._world[1]
        reply = self.request("Page.createIsolatedWorld", {
            "frameId": self.main_frame, "worldName": WORLD})
        self._world = (documents, reply["executionContextId"])
        return self._world[1]

    def page_value(self, expression: str, timeout: float | None = None) -> Any:
        """The JSON value of ``expression`` in our isolated world (within ``timeout``, by
        default what is left of the web call); a thrown exception becomes JSError."""
        try:
            reply = self.evaluate(expression, timeout, contextId=self.world())
        except CDPError as e:  # a new document under a context we had: ask again
            if not any(stale in str(e) for stale in STALE_WORLD):
                raise
            self._world = None
            self.main_frame = self.request("Page.getFrameTree")["frameTree"]["frame"]["id"]
            reply = self.evaluate(expression, timeout, contextId=self.world())
        if "exceptionDetails" in reply:
            raise JSError(exception_text(reply["exceptionDetails"]))
        return reply.get("result", {}).get("value")

    def ensure_page_js(self) -> bool:
        """Load the extractor into this document unless it is there. False while the page
        is still loading (or a new tab shows about:blank before its first page)."""
        state, href, loaded = self.page_value(
            "[document.readyState, location.href, !!window.__ga]")
        if not loaded:
            self.page_value(page_js(EXTRACT_JS) + "\n0")
        first_page = href == "about:blank" and self.target_url() not in ("", "about:blank")
        return state == "complete" and not first_page


@functools.cache
def page_js(name: str) -> str:
    """A JavaScript file shipped beside this module."""
    return Path(__file__).with_name(name).read_text(encoding="utf-8")


def exception_text(details: dict) -> str:
    exc = details.get("exception") or {}
    text = exc.get("description") or exc.get("value") or details.get("text") or "error"
    return str(text).splitlines()[0]
