"""The browser session behind the web tools: started or attached on first use, closed
with the agent; tabs with short ids ("1", "2", … in first-seen order); per tab a CDP
session that tracks navigation, requests and dialogs (accepted at once, never blocking).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable

from .cdp import CDPError, Connection, ConnectionLost, Session
from .launch import DEFAULT_CDP_URL, BrowserConfig, BrowserUnavailable, attach_url, launch

log = logging.getLogger("ga.web")

EXTRACT_JS = Path(__file__).with_name("extract.js")
TRACKED_REQUESTS = frozenset({"Document", "Script", "Stylesheet", "XHR", "Fetch"})
REQUEST_STALE = 2.0  # seconds after which a request (long poll, stream) no longer holds a scan
TERMINATE_WAIT = 2.0  # seconds to wait for a terminated script's answer
TICK = 0.1  # seconds between abort checks while a script runs
HIDDEN_URLS = ("devtools://", "chrome-extension://")
DIALOG_TEXT_CHARS = 300
TITLE_TIMEOUT = 2.0


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
        self.nav_requests = 0  # main-frame navigations started
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
        elif method in ("Page.frameRequestedNavigation", "Page.frameStartedLoading") and main:
            self.nav_requests += 1
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

    def page_value(self, expression: str, timeout: float = 20.0) -> Any:
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
        target_url = self.browser.targets.get(self.target_id, {}).get("url", "")
        first_page = href == "about:blank" and target_url not in ("", "about:blank")
        return state == "complete" and not first_page


def error_text(browser: Browser, error: Exception) -> str:
    """What the model is told about a failed web call."""
    if isinstance(error, ConnectionLost):
        then = "reconnects" if browser.cfg.attach else "starts the browser again"
        return f"{error}; the next web call {then}"
    return str(error)


def exception_text(details: dict) -> str:
    exc = details.get("exception") or {}
    text = exc.get("description") or exc.get("value") or details.get("text") or "error"
    return str(text).splitlines()[0]


class Browser:
    """The one browser of an agent: launched or attached on first use."""

    def __init__(self, cfg: BrowserConfig | None = None) -> None:
        self.cfg = cfg or BrowserConfig()
        self.conn: Connection | None = None
        self.launched = None
        self.targets: dict[str, dict] = {}  # page targets by target id
        self.short: dict[str, str] = {}  # target id -> "1", "2", …
        self.tabs: dict[str, Tab] = {}  # attached tabs by target id
        self.sessions: dict[str, Tab] = {}
        self.created: list[str] = []  # page targets created since start, in order
        self.active: str | None = None
        self._lock = threading.RLock()
        self._state = threading.Condition()  # guards the registries; notified on changes
        self._last_error = ""
        self.notice = ""  # told to the model once by the next tool result

    # ---- lifecycle -------------------------------------------------------------------------
    def ensure(self) -> None:
        """Start or attach if not connected (again after a crash); BrowserUnavailable if not."""
        with self._lock:
            if self.conn is not None and not self.conn.closed.is_set() and (
                    self.launched is None or self.launched.alive()):
                return
            if self.conn is not None:
                reason = self.conn.close_reason or "its process ended"
                log.warning("the browser went away (%s); starting again", reason)
                self.notice = (f"the browser had gone away ({reason}); a new one was started: "
                               f"earlier tabs and page state are gone")
                self.close()
            try:
                self._start()
            except (BrowserUnavailable, ConnectionLost) as e:
                self.close()
                if str(e) != self._last_error:
                    log.warning("web tools: %s", e)
                self._last_error = str(e)
                raise BrowserUnavailable(str(e)) from None

    def _start(self) -> None:
        if self.cfg.attach:
            ws_url = attach_url(self.cfg.cdp_url or DEFAULT_CDP_URL)
        else:
            self.launched = launch(self.cfg)
            atexit.register(self.close)
            ws_url = self.launched.ws_url
        self.conn = Connection(ws_url)
        self.conn.on(self._on_event)
        self.conn.call("Target.setDiscoverTargets", {"discover": True})
        for info in self.conn.call("Target.getTargets")["targetInfos"]:
            self._seen(info, created=False)

    def close(self) -> None:
        """Disconnect; a launched browser is ended and its run folder removed."""
        with self._lock:
            atexit.unregister(self.close)
            conn, launched = self.conn, self.launched
            self.conn = self.launched = None
            if conn is not None:
                self._disconnect(conn, launched)
            if launched is not None:
                launched.stop(graceful=not launched.temp_profile)
            with self._state:
                for tab in self.tabs.values():
                    tab.mark_closed()
                self.targets.clear()
                self.tabs.clear()
                self.sessions.clear()
                self.active = None

    def _disconnect(self, conn: Connection, launched: Any) -> None:
        try:
            if launched is None:  # attached: leave the user's browser and tabs as they were
                for session_id in list(self.sessions):
                    conn.call("Target.detachFromTarget", {"sessionId": session_id}, timeout=2)
            elif not launched.temp_profile:  # the user's profile: let it close cleanly
                conn.send("Browser.close")
        except CDPError as e:
            log.debug("browser disconnect: %s", e)
        conn.close()

    def take_notice(self) -> str:
        notice, self.notice = self.notice, ""
        return notice

    @property
    def running(self) -> bool:
        return self.conn is not None and not self.conn.closed.is_set()

    # ---- targets ---------------------------------------------------------------------------
    def _on_event(self, method: str, params: dict, session_id: str | None) -> None:
        if session_id:
            tab = self.sessions.get(session_id)
            if tab is not None:
                tab.on_event(method, params)
            return
        if method in ("Target.targetCreated", "Target.targetInfoChanged"):
            self._seen(params["targetInfo"], created=method == "Target.targetCreated")
        elif method == "Target.targetDestroyed":
            self._gone(params["targetId"])
        elif method == "Target.detachedFromTarget":
            tab = self.sessions.pop(params.get("sessionId", ""), None)
            if tab is not None:
                tab.mark_closed()
        elif method == "ga.connectionClosed":
            for tab in list(self.tabs.values()):
                tab.mark_closed()

    def _seen(self, info: dict, created: bool) -> None:
        if info.get("type") != "page" or info.get("url", "").startswith(HIDDEN_URLS):
            return
        target = info["targetId"]
        with self._state:
            if target not in self.short:
                self.short[target] = str(len(self.short) + 1)
                if created:
                    self.created.append(target)
            self.targets[target] = info
            self._state.notify_all()

    def _gone(self, target: str) -> None:
        with self._state:
            self.targets.pop(target, None)
            tab = self.tabs.pop(target, None)
            self._state.notify_all()
        if tab is not None:
            self.sessions.pop(tab.session.id, None)
            tab.mark_closed()
        if self.active == target:
            self.active = None

    def wait_targets(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait for target events until ``predicate()`` holds (False on timeout)."""
        with self._state:
            return self._state.wait_for(predicate, timeout)

    def short_id(self, target: str) -> str:
        return self.short.get(target, "?")

    def tab_list(self) -> list[dict]:
        with self._state:
            infos = sorted(self.targets.values(), key=lambda i: int(self.short[i["targetId"]]))
        return [self._entry(i) for i in infos]

    def _entry(self, info: dict) -> dict:
        url, title = info.get("url", ""), info.get("title", "")
        if title in (url, url.split("://", 1)[-1]):  # CDP's stand-in until the page says
            title = ""
        return {"id": self.short[info["targetId"]], "url": url, "title": title}

    def title(self, short: str, fallback: str) -> str:
        """``document.title`` of an attached tab (CDP's title is the URL right after a
        load); ``fallback`` for the others."""
        tab = next((t for t in self.tabs.values() if t.id == short and not t.closed), None)
        if tab is None:
            return fallback
        try:
            return tab.page_value("document.title", timeout=TITLE_TIMEOUT) or fallback
        except (WebError, CDPError):
            return fallback

    def new_tabs(self, since: int) -> list[dict]:
        """Page targets created after ``len(self.created)`` was ``since`` and still open."""
        with self._state:
            fresh = [self.targets[t] for t in self.created[since:] if t in self.targets]
        return [self._entry(i) for i in fresh]

    # ---- tabs ------------------------------------------------------------------------------
    def tab(self, switch_to: str | None = None) -> Tab:
        """The active tab (switching to ``switch_to`` first); opens one when there is none."""
        self.ensure()
        with self._lock:
            self._sync_targets()
            if switch_to:
                target = next((t for t, s in self.short.items()
                               if s == str(switch_to).strip() and t in self.targets), None)
                if target is None:
                    listing = ", ".join(f'{t["id"]} {t["url"][:60]}' for t in self.tab_list())
                    raise WebError(f"no tab {switch_to!r}; open tabs: {listing or 'none'}")
                tab = self._attached(target)
                self.conn.call("Target.activateTarget", {"targetId": target})
                tab.session.call("Page.bringToFront")
                self.active = target
                return tab
            if self.active not in self.targets:
                self.active = self._first_tab()
            return self._attached(self.active)

    def _sync_targets(self) -> None:
        """Bring the tab registry up to date now (events may still be on their way)."""
        infos = self.conn.call("Target.getTargets")["targetInfos"]
        for info in infos:
            self._seen(info, created=False)
        alive = {i["targetId"] for i in infos}
        for target in [t for t in self.targets if t not in alive]:
            self._gone(target)

    def _first_tab(self) -> str:
        targets = [t["id"] for t in self.tab_list()]
        target_of = {s: t for t, s in self.short.items()}
        if not targets:
            target = self.conn.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            self._seen({"type": "page", "targetId": target, "url": "about:blank"}, created=False)
            return target
        if self.cfg.attach:  # the user's browser: start where the user is looking
            for short in targets:
                tab = self._attached(target_of[short])
                if tab.page_value("document.visibilityState", timeout=5) == "visible":
                    return tab.target_id
        return target_of[targets[0]]

    def _attached(self, target: str) -> Tab:
        tab = self.tabs.get(target)
        if tab is not None and not tab.closed:
            return tab
        reply = self.conn.call("Target.attachToTarget", {"targetId": target, "flatten": True})
        tab = Tab(self, target, Session(self.conn, reply["sessionId"]))
        self.sessions[tab.session.id] = tab
        with self._state:
            self.tabs[target] = tab
        tab.setup()
        return tab
