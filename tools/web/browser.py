"""The browser session behind the web tools: started or attached on first use, closed
with the agent; tabs with short ids ("1", "2", … in first-seen order); per tab a CDP
session that tracks navigation, requests and dialogs (accepted at once, never blocking).
Every page target is attached before it runs (auto-attach), so a dialog in any tab, a
popup's included, is accepted too: one open dialog would block its whole renderer.
A tab whose renderer crashed is reloaded (or replaced) before it is used again; a tab whose
page stopped answering (``Tab.busy``) and still does not is replaced by a blank one.
A web call runs inside ``limits.running``: its waits end at its deadline or on its abort.
"""

from __future__ import annotations

import atexit
import logging
import threading
from typing import Any, Callable

from llmcore.secrets import EnvPolicy, Redactor

from .cdp import CDPError, Connection, ConnectionLost, Session
from .launch import DEFAULT_CDP_URL, BrowserConfig, BrowserUnavailable, attach_url, launch
from .limits import CallLimits
from .tab import QUICK_TIMEOUT, Tab, TabBusy, WebError

log = logging.getLogger("ga.web")

HIDDEN_URLS = ("devtools://", "chrome-extension://")
TITLE_CHARS = 100  # of a tab's title in tab lists
CRASH_NOTE = ("the page in tab {tab} had crashed ({status}); it was loaded again ({how}): "
              "what earlier scripts did to it is gone")
REPLACED_NOTE = ("the page in tab {old} ({url}) did not answer, so a blank tab {new} was opened "
                 "in its place and is active ({closed}): load the page again to go on")


def clip_title(title: str) -> str:
    """A page title as tab lists show it: at most TITLE_CHARS."""
    title = " ".join(str(title or "").split())
    return title if len(title) <= TITLE_CHARS else title[:TITLE_CHARS - 1] + "…"


def error_text(browser: Browser, error: Exception) -> str:
    """What the model is told about a failed web call."""
    if isinstance(error, ConnectionLost):
        then = "reconnects" if browser.cfg.attach else "starts the browser again"
        return f"{error}; the next web call {then}"
    return str(error)


class Browser:
    """The one browser of an agent: launched or attached on first use."""

    def __init__(self, cfg: BrowserConfig | None = None,
                 env_policy: EnvPolicy | None = None, redact: Redactor | None = None) -> None:
        self.cfg = cfg or BrowserConfig()
        self.env_policy = env_policy or EnvPolicy()  # a launched browser's environment
        self.redact = redact or Redactor()  # page texts masked before they are shortened
        self.conn: Connection | None = None
        self.launched = None
        self.targets: dict[str, dict] = {}  # page targets by target id
        self.short: dict[str, str] = {}  # target id -> "1", "2", …
        self.tabs: dict[str, Tab] = {}  # attached tabs by target id
        self.sessions: dict[str, Tab] = {}  # our tabs by session id
        self.pages: dict[str, str] = {}  # every attached page session -> its target id
        self.created: list[str] = []  # page targets created since start, in order
        self.active: str | None = None
        self.crashed: dict[str, str] = {}  # crashed page targets -> exit status
        self._lock = threading.RLock()
        self._state = threading.Condition()  # guards the registries; notified on changes
        self._last_error = ""
        self.notice = ""  # told to the model once by the next tool result
        self.limits = CallLimits()  # of the web call running: every wait on a page keeps to it

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
            self.launched = launch(self.cfg, self.env_policy)
            atexit.register(self.close)
            ws_url = self.launched.ws_url
        self.conn = Connection(ws_url)
        self.conn.on(self._on_event)
        # the browser is not sandboxed: what the model browses is never saved to disk
        self.conn.call("Browser.setDownloadBehavior", {"behavior": "deny", "eventsEnabled": True})
        self.conn.call("Target.setDiscoverTargets", {"discover": True})
        self.conn.call("Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": True,
                                                "flatten": True, "filter": [{"type": "page"}]})
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
                self.pages.clear()
                self.crashed.clear()
                self.active = None

    def _disconnect(self, conn: Connection, launched: Any) -> None:
        try:
            if launched is None:  # attached: leave the user's browser and tabs as they were
                conn.call("Browser.setDownloadBehavior", {"behavior": "default"},
                          timeout=QUICK_TIMEOUT)
                for tab in list(self.sessions.values()):
                    tab.leave()
                for session_id in set(self.pages) | set(self.sessions):
                    conn.call("Target.detachFromTarget", {"sessionId": session_id},
                              timeout=QUICK_TIMEOUT)
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
            elif method == "Page.javascriptDialogOpening":  # a page we do not use (yet)
                self.conn.send("Page.handleJavaScriptDialog", {
                    "accept": True, "promptText": params.get("defaultPrompt", "")}, session_id)
            return
        if method == "Target.attachedToTarget":
            self._page_attached(params)
        elif method in ("Target.targetCreated", "Target.targetInfoChanged"):
            self._seen(params["targetInfo"], created=method == "Target.targetCreated")
        elif method == "Target.targetDestroyed":
            self._gone(params["targetId"])
        elif method == "Target.targetCrashed":
            with self._state:
                self.crashed[params["targetId"]] = params.get("status", "")
                tab = self.tabs.get(params["targetId"])
                self._state.notify_all()
            if tab is not None:
                tab.mark_crashed(params.get("status", ""))
        elif method == "Target.detachedFromTarget":
            self.pages.pop(params.get("sessionId", ""), None)
            tab = self.sessions.pop(params.get("sessionId", ""), None)
            if tab is not None:
                tab.mark_closed()
        elif method == "ga.connectionClosed":
            for tab in list(self.tabs.values()):
                tab.mark_closed()

    def _page_attached(self, params: dict) -> None:
        """A page session (ours or auto-attached, the page maybe paused before it runs): its
        dialogs are reported to us from now on, then the page may run."""
        info, session_id = params["targetInfo"], params["sessionId"]
        if info.get("type") != "page":
            return
        self.pages[session_id] = info["targetId"]
        self.conn.send("Page.enable", None, session_id)
        if params.get("waitingForDebugger"):
            self.conn.send("Runtime.runIfWaitingForDebugger", None, session_id)

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
            self.crashed.pop(target, None)
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
        return {"id": self.short[info["targetId"]], "url": self.redact(url),
                "title": clip_title(self.redact(title))}

    def title_of(self, target: str) -> str:
        """A page's title as the browser last heard it (the page is not asked)."""
        with self._state:
            info = self.targets.get(target)
        return self._entry(info)["title"] if info else ""

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
                self.active = target
                tab = self._usable(self._attached(target))
                self.conn.call("Target.activateTarget", {"targetId": tab.target_id})
                tab.session.call("Page.bringToFront")
                return tab
            if self.active not in self.targets:
                self.active = self._first_tab()
            return self._usable(self._attached(self.active))

    def _usable(self, tab: Tab) -> Tab:
        """``tab``, loaded again first if its renderer crashed, replaced if its page stopped
        answering (the model was told so; the page may answer now and then, which is no
        sign that it will answer the next call)."""
        status = self.crashed.get(tab.target_id) or tab.crashed
        if status:
            tab, how = self.recover(tab)
            self.notice = CRASH_NOTE.format(tab=tab.id, status=status, how=how)
        elif tab.busy:
            tab = self.replace(tab)
        return tab

    def replace(self, tab: Tab) -> Tab:
        """Open a blank tab in place of ``tab``, whose page does not answer; a launched
        browser's is closed (an attached one's is left to the user)."""
        url = tab.target_url() or tab.url
        fresh = self._open_instead(tab.target_id, "about:blank", close=not self.cfg.attach)
        closed = "the old one was left open" if self.cfg.attach else "the old one was closed"
        log.info("tab %s (%s): %s; replaced by tab %s", tab.id, url, tab.busy, fresh.id)
        self.notice = REPLACED_NOTE.format(old=tab.id, url=url, new=fresh.id, closed=closed)
        return fresh

    def _open_instead(self, target: str, url: str, close: bool = True) -> Tab:
        """A new tab at ``url``, active, in place of the page target ``target`` (closed)."""
        fresh = self.conn.call("Target.createTarget", {"url": url})["targetId"]
        self._seen({"type": "page", "targetId": fresh, "url": url}, created=False)
        if close:
            self.conn.send("Target.closeTarget", {"targetId": target})
        self.active = fresh
        return self._attached(fresh)

    def recover(self, tab: Tab) -> tuple[Tab, str]:
        """Reload a crashed tab; when that fails, open its page in a new tab instead.
        Returns the tab to use and how it was recovered."""
        self.crashed.pop(tab.target_id, None)
        try:
            tab.reload()
            return tab, "reloaded"
        except (CDPError, WebError) as e:
            log.info("reloading crashed tab %s failed (%s): opening a new one", tab.id, e)
        url = tab.url or tab.target_url() or "about:blank"
        fresh = self._open_instead(tab.target_id, url)
        return fresh, f"in a new tab {fresh.id}"

    def crash_report(self, tab: Tab, error: WebError) -> str:
        """Recover a tab whose renderer crashed during a call: what the model is told."""
        _, how = self.recover(tab)
        return f"{error} during the call; it was loaded again ({how}): scan it before going on"

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
            visible = next((target_of[s] for s in targets if self._visible(target_of[s])), None)
            if visible:
                return visible
        return target_of[targets[0]]

    def _visible(self, target: str) -> bool:
        """Whether the user sees this tab."""
        try:
            reply = self._session(target).call("Runtime.evaluate", {
                "expression": "document.visibilityState", "returnByValue": True},
                timeout=QUICK_TIMEOUT)
        except CDPError:
            return False
        return reply.get("result", {}).get("value") == "visible"

    def _session(self, target: str) -> Session:
        """A session of the page target: the auto-attached one, else a new one."""
        session_id = next((s for s, t in list(self.pages.items()) if t == target), None)
        if session_id is None:
            session_id = self.conn.call("Target.attachToTarget",
                                        {"targetId": target, "flatten": True})["sessionId"]
        return Session(self.conn, session_id)

    @staticmethod
    def _set_up(tab: Tab) -> None:
        """Set the tab up; once more when its page was busy and its script was ended."""
        try:
            tab.setup()
        except TabBusy:
            if tab.busy:
                raise
            tab.setup()

    def _attached(self, target: str) -> Tab:
        """Our tab of the page target, set up on first use (again when that failed)."""
        tab = self.tabs.get(target)
        if tab is not None and not tab.closed:
            return tab
        tab = Tab(self, target, self._session(target))
        self.sessions[tab.session.id] = tab  # its events from now on
        try:
            status = self.crashed.get(target)
            if status:  # a crashed page answers nothing until it is loaded again
                tab.reload()
                self.crashed.pop(target, None)
                self.notice = CRASH_NOTE.format(tab=tab.id, status=status, how="reloaded")
            self._set_up(tab)
        except TabBusy:  # a page busy from before we came that stays so: a blank tab instead
            self.sessions.pop(tab.session.id, None)
            return self.replace(tab)
        except (CDPError, WebError):
            self.sessions.pop(tab.session.id, None)
            raise
        with self._state:
            self.tabs[target] = tab
        return tab
