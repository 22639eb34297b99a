"""A small Chrome DevTools Protocol client: one websocket, calls, events, per-tab sessions.

``Connection`` owns the websocket (``websocket-client``) and a reader thread that matches
replies to calls and hands events to listeners. ``Session`` is the same connection bound
to one attached target (``Target.attachToTarget`` with ``flatten``). Listeners run on the
reader thread: they must not wait for a reply (use ``send``, which does not wait).
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
from typing import Any, Callable

log = logging.getLogger("ga.web")

CALL_TIMEOUT = 30.0  # seconds a CDP call may take unless the caller says otherwise
CONNECT_TIMEOUT = 10.0
CLOSE_TIMEOUT = 1.0  # seconds for the websocket's closing handshake
READER_JOIN = 2.0  # seconds for the reader thread to end after the close
EXTRA_HINT = ("the browser extra (websocket-client) is not installed: pip install -e "
              "\".[browser]\" in a checkout, or pip install \"genericagent[browser]\"")

Listener = Callable[[str, dict, "str | None"], None]


class CDPError(Exception):
    """A CDP call failed: the browser answered with an error, or the connection is gone."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class ConnectionLost(CDPError):
    """The websocket to the browser closed (the browser exited, crashed or was detached)."""


def websocket_module() -> Any:
    """``websocket-client`` (the ``browser`` extra), imported on first use: ``None`` when
    it is not installed."""
    try:
        import websocket
    except ImportError:
        return None
    return websocket


class _Pending:
    __slots__ = ("done", "reply")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.reply: dict | None = None


class Connection:
    """One websocket to a browser (or a page) speaking CDP."""

    def __init__(self, ws_url: str, timeout: float = CONNECT_TIMEOUT) -> None:
        self.url = ws_url
        websocket = websocket_module()
        if websocket is None:
            raise ConnectionLost(EXTRA_HINT)
        self._errors = (OSError, websocket.WebSocketException)
        try:
            self._ws = websocket.create_connection(
                ws_url, timeout=timeout, suppress_origin=True, skip_utf8_validation=True,
                enable_multithread=True)
        except self._errors as e:
            raise ConnectionLost(f"cannot connect to {ws_url}: {e}") from None
        self._ws.settimeout(None)
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()
        self.closed = threading.Event()
        self.close_reason = ""
        self._reader = threading.Thread(target=self._read, name="ga-cdp-reader", daemon=True)
        self._reader.start()

    # ---- calls -----------------------------------------------------------------------
    def send(self, method: str, params: dict | None = None, session_id: str | None = None
             ) -> _Pending:
        """Send a call without waiting; the returned handle's ``done`` is set on reply."""
        msg_id = next(self._ids)
        pending = _Pending()
        message: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if session_id:
            message["sessionId"] = session_id
        with self._lock:
            if self.closed.is_set():
                raise ConnectionLost(self.close_reason or "browser connection closed")
            self._pending[msg_id] = pending
        try:
            self._ws.send(json.dumps(message))
        except self._errors as e:
            self._shutdown(f"browser connection lost: {e}")
            raise ConnectionLost(self.close_reason) from None
        return pending

    def call(self, method: str, params: dict | None = None, session_id: str | None = None,
             timeout: float | None = CALL_TIMEOUT) -> dict:
        """Call ``method`` and return its result; raise CDPError on an error or timeout."""
        pending = self.send(method, params, session_id)
        if not pending.done.wait(timeout):
            raise CDPError(f"{method}: no answer from the browser in {timeout:g} s")
        return self.result(method, pending)

    def result(self, method: str, pending: _Pending) -> dict:
        reply = pending.reply
        if reply is None:
            raise ConnectionLost(self.close_reason or "browser connection closed")
        if "error" in reply:
            err = reply["error"]
            raise CDPError(f"{method}: {err.get('message', err)}", err.get("code"))
        return reply.get("result", {})

    def forget(self, pending: _Pending) -> None:
        """Stop tracking a call whose answer is no longer wanted."""
        with self._lock:
            for key, value in list(self._pending.items()):
                if value is pending:
                    del self._pending[key]

    # ---- events ----------------------------------------------------------------------
    def on(self, listener: Listener) -> None:
        """Call ``listener(method, params, session_id)`` for every event."""
        self._listeners.append(listener)

    def _read(self) -> None:
        while True:
            try:
                raw = self._ws.recv()
            except (*self._errors, ValueError) as e:
                self._shutdown(f"browser connection closed ({type(e).__name__})")
                return
            if not raw:
                self._shutdown("browser connection closed")
                return
            self._dispatch(json.loads(raw))

    def _dispatch(self, message: dict) -> None:
        if "id" in message:
            with self._lock:
                pending = self._pending.pop(message["id"], None)
            if pending is not None:
                pending.reply = message
                pending.done.set()
            return
        method, params = message.get("method", ""), message.get("params", {})
        for listener in list(self._listeners):
            try:
                listener(method, params, message.get("sessionId"))
            except Exception as e:  # a listener bug must not stop the reader
                log.warning("CDP event %s: listener failed: %s: %s", method, type(e).__name__, e)

    # ---- closing ---------------------------------------------------------------------
    def _shutdown(self, reason: str) -> None:
        with self._lock:
            if self.closed.is_set():
                return
            self.close_reason = reason
            self.closed.set()
            pending, self._pending = list(self._pending.values()), {}
        for p in pending:
            p.done.set()  # reply stays None: the caller raises ConnectionLost
        for listener in list(self._listeners):
            try:
                listener("ga.connectionClosed", {"reason": reason}, None)
            except Exception as e:  # same edge as _dispatch
                log.warning("CDP close listener failed: %s: %s", type(e).__name__, e)

    def close(self) -> None:
        self._shutdown("closed by the runtime")
        try:
            self._ws.close(timeout=CLOSE_TIMEOUT)
        except self._errors as e:
            log.debug("closing the CDP websocket: %s", e)
        self._reader.join(timeout=READER_JOIN)


class Session:
    """The connection bound to one attached target."""

    def __init__(self, conn: Connection, session_id: str) -> None:
        self.conn = conn
        self.id = session_id

    def call(self, method: str, params: dict | None = None,
             timeout: float | None = CALL_TIMEOUT) -> dict:
        return self.conn.call(method, params, self.id, timeout)

    def send(self, method: str, params: dict | None = None) -> _Pending:
        return self.conn.send(method, params, self.id)
