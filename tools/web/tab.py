"""One page target: its CDP session and what happened in it (navigation, requests,
dialogs, accepted at once so a page never blocks), and running code in it with a timeout
that terminates a runaway script.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .cdp import Session

if TYPE_CHECKING:
    from .browser import Browser

EXTRACT_JS = Path(__file__).with_name("extract.js")
TRACKED_REQUESTS = frozenset({"Document", "Script", "Stylesheet", "XHR", "Fetch"})
REQUEST_STALE = 2.0  # seconds after which a request (long poll, stream) no longer holds a scan
TERMINATE_WAIT = 2.0  # seconds to wait for a terminated script's answer
TICK = 0.1  # seconds between abort checks while a script runs
DIALOG_TEXT_CHARS = 300
PAGE_TIMEOUT = 20.0  # seconds our own page-side helpers may take
QUICK_TIMEOUT = 2.0  # seconds for a small read (a title, a state) before giving up on it


class WebError(Exception):
    """A web tool problem the model can act on."""

    for_model = True


class ScriptTimeout(WebError):
    pass


class JSError(WebError):
    """The page's script threw; the message is the exception's first line."""


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
        self.dialogs: list[dict] = []
        self.requests: dict[str, float] = {}
        self.last_request = 0.0
        self.closed = False

    def setup(self) -> None:
        tree = self.session.call("Page.getFrameTree")["frameTree"]["frame"]
        self.main_frame, self.url = tree["id"], tree.get("url", "")
        self.session.call("Page.enable")
        self.session.call("Network.enable")
        self.session.call("Page.addScriptToEvaluateOnNewDocument",
                          {"source": EXTRACT_JS.read_text(encoding="utf-8")})

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
                                 "message": p.get("message", "")[:DIALOG_TEXT_CHARS]})
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
        elif method == "Page.navigatedWithinDocument" and main:
            self.url = p.get("url", self.url)
            self.navigations += 1
        elif method == "Page.frameRequestedNavigation" and main and p.get(
                "disposition", "currentTab") == "currentTab":
            self.nav_requests += 1
        elif method == "Page.frameStartedLoading" and main:
            self.nav_requests += 1
            self.starts += 1
        elif method in ("Page.loadEventFired", "Page.frameStoppedLoading") and (
                main or method == "Page.loadEventFired"):
            self.loads += 1

    def mark_closed(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def wait(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait (on events, not a poll) until ``predicate()`` or the tab closes."""
        with self.cond:
            return self.cond.wait_for(lambda: self.closed or predicate(), timeout)

    def network_idle(self, quiet: float, timeout: float) -> None:
        """Wait until no page request is in flight and none ended in the last ``quiet`` s."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while not self.closed:
                now = time.monotonic()
                busy = [t for t in self.requests.values() if now - t < REQUEST_STALE]
                left = deadline - now
                if left <= 0:
                    return
                if busy:
                    self.cond.wait(min(left, REQUEST_STALE))
                    continue
                rest = quiet - (now - self.last_request)
                if rest <= 0:
                    return
                self.cond.wait(min(rest, left))

    def dom_quiet(self, quiet: float, limit: float, since: float | None = None,
                  stop: Callable[[], bool] = lambda: False) -> None:
        """Wait until the DOM has not changed for ``quiet`` s (nor since the monotonic time
        ``since``), at most ``limit`` s; page timers of a background tab are throttled, so
        the waiting happens here."""
        start = time.monotonic()
        while True:
            age = (self.page_value("window.__ga.idle()") or 0) / 1000
            now = time.monotonic()
            if since is not None:
                age = min(age, now - since)
            left = limit - (now - start)
            if age >= quiet or left <= 0 or stop():
                return
            self.wait(stop, min(quiet - age, left))

    # ---- running code in the page ----------------------------------------------------------
    def evaluate(self, expression: str, timeout: float, abort: threading.Event | None = None,
                 **options: Any) -> dict:
        """``Runtime.evaluate``; a script past ``timeout`` (or aborted) is terminated."""
        params = {"expression": expression, "awaitPromise": True, "returnByValue": True,
                  **options}
        pending = self.session.send("Runtime.evaluate", params)
        deadline = time.monotonic() + timeout
        while not pending.done.wait(min(TICK, max(deadline - time.monotonic(), 0))):
            if self.closed:
                self.session.conn.forget(pending)
                raise WebError("the tab was closed; web_scan shows the open tabs")
            stop = "was aborted" if abort is not None and abort.is_set() else None
            if time.monotonic() >= deadline:
                stop = f"ran past its {timeout:g} s timeout"
            if stop:
                self.session.send("Runtime.terminateExecution")
                if not pending.done.wait(TERMINATE_WAIT):
                    self.session.conn.forget(pending)
                raise ScriptTimeout(f"the script {stop} and was terminated; the tab is usable")
        return self.session.conn.result("Runtime.evaluate", pending)

    def page_value(self, expression: str, timeout: float = PAGE_TIMEOUT) -> Any:
        """The JSON value of ``expression``; a thrown exception becomes JSError."""
        reply = self.evaluate(expression, timeout)
        if "exceptionDetails" in reply:
            raise JSError(exception_text(reply["exceptionDetails"]))
        return reply.get("result", {}).get("value")

    def ensure_page_js(self) -> bool:
        """Load the extractor into this document unless it is there. False while the page
        is still loading (or a new tab shows about:blank before its first page)."""
        state, href, loaded = self.page_value(
            "[document.readyState, location.href, !!window.__ga]")
        if not loaded:
            self.page_value(EXTRACT_JS.read_text(encoding="utf-8") + "\n0")
        first_page = href == "about:blank" and self.target_url() not in ("", "about:blank")
        return state == "complete" and not first_page


def exception_text(details: dict) -> str:
    exc = details.get("exception") or {}
    text = exc.get("description") or exc.get("value") or details.get("text") or "error"
    return str(text).splitlines()[0]
