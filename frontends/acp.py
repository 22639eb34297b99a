"""``ga acp``: the Agent Client Protocol, version 1, on stdin/stdout (SPEC §13).

An editor starts ``ga acp`` and speaks JSON-RPC 2.0 to it, one object per line. Each
``session/new`` or ``session/load`` opens a ``Session`` (its journal's id is the session id);
a ``session/prompt`` runs a task there, whose events go back as ``session/update``
notifications (``acp_map``) until the prompt is answered with its stop reason. The main
thread reads the requests; each prompt is drained on a thread of its own, and each session is
opened on one (its MCP servers may take seconds to start), so a ``session/cancel`` and the
other sessions are served meanwhile.

An approval question of a session's task (SPEC §11) is asked as a
``session/request_permission`` request; the editor's response, read on the main thread like
the requests, answers the waiting task. Only protocol messages reach stdout (``acp_wire``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

from llmcore.base import ConfigError
from tools.approval import ApprovalRequest

from . import version
from .acp_input import mcp_servers, read_prompt
from .acp_map import Updates, failure_line, permission_answer, permission_options, stop_reason
from .acp_wire import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    PROMPT_RUNNING,
    TASK_FAILED,
    RpcError,
    Wire,
    protocol_streams,
)
from .journal import SessionState, claim_session, read_events, sessions_dir
from .runner import Session
from .signals import STOPS, describe

log = logging.getLogger("ga.acp")

PROTOCOL_VERSION = 1
CANCEL_ANSWER_SECONDS = 0.8  # after session/cancel, the prompt answers `cancelled` by then
SHUTDOWN_SECONDS = 10.0  # stdin closed or a signal: how long running tasks get to stop
CANCELLED = "cancelled by the editor"
CLOSED = "the editor closed the connection"
METHODS = {"initialize": "initialize", "session/new": "new_session",
           "session/load": "load_session", "session/list": "list_sessions",
           "session/prompt": "prompt", "session/cancel": "cancel"}
OPENING = ("session/new", "session/load")  # they start MCP servers: answered off the reader
PENDING = object()  # what a request handler returns when its answer comes later
Opener = Callable[..., Session]  # (args, home, state, mcp_servers=, can_ask=) -> Session


def serve(args: argparse.Namespace, home: Path, opener: Opener) -> int:
    """``ga acp``: answer an editor until it closes stdin (exit 0) or a signal stops ga;
    either way running tasks are stopped (their processes killed) and journals closed."""
    with protocol_streams() as (requests, replies):
        server = Server(Wire(replies), args, home, opener)
        try:
            server.serve(requests)
        except STOPS as stop:
            server.close(describe(stop))
            raise
        server.close(CLOSED)
    return 0


class Server:
    """The methods of the protocol, over the sessions this process has open."""

    def __init__(self, wire: Wire, args: argparse.Namespace, home: Path,
                 opener: Opener) -> None:
        self.wire = wire
        self.args = args
        self.home = home
        self.opener = opener
        self.sessions: dict[str, EditorSession] = {}
        self.openers: list[threading.Thread] = []  # sessions being opened

    def serve(self, lines: Iterable[bytes]) -> None:
        for line in lines:
            if line.strip():
                self.handle_line(line)

    def handle_line(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:  # not JSON, or not UTF-8
            self.wire.fail(None, PARSE_ERROR, "not JSON: send one JSON-RPC object per line")
            return
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            request_id = message.get("id") if isinstance(message, dict) else None
            self.wire.fail(request_id, INVALID_REQUEST, "expected a JSON-RPC 2.0 object")
            return
        self.handle(message)

    def handle(self, message: dict) -> None:
        method = message.get("method")
        if not isinstance(method, str):  # the editor's response to a request of ga's
            self.wire.response(message)
            return
        if "id" not in message and METHODS.get(method) not in (None, "cancel"):
            log.warning("%s without an id is not run: send it as a request", method)
            return
        if method in OPENING:  # the session's MCP servers start meanwhile
            opener = threading.Thread(target=self.answer, args=(message,), daemon=True,
                                      name=f"acp-{method}")
            self.openers = [t for t in self.openers if t.is_alive()] + [opener]
            opener.start()
            return
        self.answer(message)

    def answer(self, message: dict) -> None:
        """Run the method of one request and answer it (a notification gets no answer)."""
        method, request_id = message["method"], message.get("id")
        name = METHODS.get(method)
        params = message.get("params") or {}
        try:
            if name is None:
                raise RpcError(METHOD_NOT_FOUND, f"method not found: {method}")
            if not isinstance(params, dict):
                raise RpcError(INVALID_PARAMS, "params must be an object")
            result = getattr(self, name)(params, request_id)
        except RpcError as e:
            error = (e.code, str(e))
        except ConfigError as e:  # a bad folder, session id, prompt block or image
            error = (INVALID_PARAMS, str(e))
        except Exception as e:  # the server's edge: one failed request must not end the rest
            log.error("%s failed: %s: %s", method, type(e).__name__, e, exc_info=True)
            error = (INTERNAL_ERROR, f"{type(e).__name__}: {e}")
        else:
            if "id" in message and result is not PENDING:
                self.wire.answer(request_id, result)
            return
        if "id" in message:  # a notification gets no answer, not even an error
            self.wire.fail(request_id, *error)

    # ---- methods ---------------------------------------------------------------------
    def initialize(self, params: dict, request_id: Any) -> dict:
        return {"protocolVersion": PROTOCOL_VERSION,
                "agentCapabilities": {
                    "loadSession": True,
                    "promptCapabilities": {"image": self.model_vision(), "embeddedContext": True},
                    "mcpCapabilities": {"http": True},
                    "sessionCapabilities": {"list": {}}},
                "agentInfo": {"name": "genericagent", "title": "GenericAgent",
                              "version": version()},
                "authMethods": []}

    def model_vision(self) -> bool:
        """Whether the model of ``-m`` (or the config's default) sees images; a config that
        names no usable model says so on stderr, and session/new will say it again."""
        from llmcore import make_client

        try:
            client = make_client(self.args.model, config_path=self.args.config, home=self.home)
        except ConfigError as e:
            print(f"ga: {e}", file=sys.stderr)
            return False
        return bool(getattr(client, "vision", True))

    def new_session(self, params: dict, request_id: Any) -> dict:
        return {"sessionId": self.open(*self.session_args(params, "session/new")).session.id}

    def load_session(self, params: dict, request_id: Any) -> dict:
        session_id = params.get("sessionId")
        if not isinstance(session_id, str) or not session_id:
            raise RpcError(INVALID_PARAMS, "sessionId: expected a session id")
        args, servers = self.session_args(params, "session/load")
        editor = self.sessions.get(session_id)
        if editor is None:
            state = claim_session(self.journal_path(session_id))
            try:
                editor = self.open(args, servers, state)
            except BaseException:
                if state.lock is not None:
                    state.lock.release()
                raise
        journal = editor.session.journal.path
        if journal.exists():  # through the session's own updates: call ids stay unique
            for update in editor.updates.replay(read_events(journal)):
                editor.notify(update)
        return {}

    def journal_path(self, session_id: str) -> Path:
        """The journal of exactly ``session_id`` (no prefix, no path)."""
        path = sessions_dir(self.home) / f"{session_id}.jsonl"
        if Path(session_id).name != session_id or not path.is_file():
            raise ConfigError(None, "sessionId", f"no saved session {session_id!r} "
                              "(session/list lists them)")
        return path

    def list_sessions(self, params: dict, request_id: Any) -> dict:
        from .journal import list_sessions

        cwd = params.get("cwd")
        want = str(Path(cwd).resolve()) if isinstance(cwd, str) and cwd else None
        found = [session_info(s) for s in list_sessions(self.home) if want in (None, s.cwd)]
        return {"sessions": [info for info in found if info]}

    def prompt(self, params: dict, request_id: Any) -> object:
        editor = self.session_of(params)
        task, images = read_prompt(params.get("prompt"))
        editor.start(request_id, task, images)
        return PENDING

    def cancel(self, params: dict, request_id: Any) -> None:
        editor = self.sessions.get(str(params.get("sessionId")))
        if editor is not None and editor.prompt is not None:
            editor.prompt.cancel()

    # ---- sessions --------------------------------------------------------------------
    def session_args(self, params: dict, method: str) -> tuple[argparse.Namespace, list]:
        """This process's options with the session's folder (``cwd``), and the MCP servers
        sent (``tools.mcp.ServerConfig``s, added to the config's)."""
        cwd = params.get("cwd")
        if not isinstance(cwd, str) or not cwd:
            raise RpcError(INVALID_PARAMS, "cwd: expected the session's folder (an absolute "
                           "path)")
        if not Path(cwd).expanduser().is_dir():
            raise ConfigError(None, "cwd", f"not a folder: {cwd}")
        servers = mcp_servers(params.get("mcpServers"), method)
        return argparse.Namespace(**{**vars(self.args), "cwd": cwd}), servers

    def open(self, args: argparse.Namespace, servers: list,
             state: SessionState | None = None) -> EditorSession:
        """Open a session; its approval questions go to the editor (a person answers)."""
        session = self.opener(args, self.home, state, mcp_servers=servers, can_ask=True)
        editor = self.sessions[session.id] = EditorSession(self.wire, session)
        return editor

    def session_of(self, params: dict) -> EditorSession:
        editor = self.sessions.get(str(params.get("sessionId")))
        if editor is None:
            raise RpcError(INVALID_PARAMS, f"unknown sessionId {params.get('sessionId')!r}; "
                           "open it with session/new or session/load first")
        return editor

    def close(self, reason: str) -> None:
        """Stop every running task (its processes killed), wait a bounded time for their
        ends to be journaled and answered, close the journals."""
        deadline = time.monotonic() + SHUTDOWN_SECONDS
        for opener in self.openers:  # a session still opening is closed with the others
            opener.join(max(0.0, deadline - time.monotonic()))
        editors = list(self.sessions.values())
        for editor in editors:
            editor.stop(reason)
        for editor in editors:
            for thread in editor.threads:
                thread.join(max(0.0, deadline - time.monotonic()))
        for editor in editors:
            editor.session.close()


def session_info(state: SessionState) -> dict | None:
    """A saved session as ``session/list`` shows it; None when its journal is gone."""
    try:
        updated = datetime.fromtimestamp(state.path.stat().st_mtime, timezone.utc)
    except OSError:
        return None
    info = {"sessionId": state.id, "cwd": state.cwd, "updatedAt": updated.isoformat()}
    if state.summary:
        info["title"] = state.summary
    return info


class EditorSession:
    """A ``Session`` an editor works with: its updates, its prompt, the threads of its
    prompts."""

    def __init__(self, wire: Wire, session: Session) -> None:
        self.wire = wire
        self.session = session
        self.updates = Updates(session.agent)
        session.agent.listeners.append(self.updates.watch)
        self.prompt: Prompt | None = None
        self.threads: list[threading.Thread] = []

    def notify(self, update: dict) -> None:
        self.wire.notify("session/update", {"sessionId": self.session.id, "update": update})

    def start(self, request_id: Any, task: str, images: list[bytes]) -> None:
        """Run a prompt's task; one at a time (its images checked first)."""
        if self.prompt is not None and not self.prompt.answered:
            raise RpcError(PROMPT_RUNNING, "a prompt is already running in this session; wait "
                           "for its answer or send session/cancel")
        self.session.attach(images)
        self.prompt = Prompt(self, request_id)
        previous = self.threads[-1] if self.threads else None
        thread = threading.Thread(target=self.prompt.run, args=(task, previous), daemon=True,
                                  name=f"acp-prompt-{self.session.id}")
        self.threads = [t for t in self.threads if t.is_alive()] + [thread]
        thread.start()

    def stop(self, reason: str) -> None:
        if any(thread.is_alive() for thread in self.threads):
            self.session.abort(reason)


class Prompt:
    """One ``session/prompt``: its task's updates, then one answer (the task's stop reason,
    ``cancelled`` after a cancel, or an error for a failure)."""

    def __init__(self, editor: EditorSession, request_id: Any) -> None:
        self.editor = editor
        self.id = request_id
        self.lock = threading.Lock()
        self.answered = False
        self.cancelled = False

    def run(self, task: str, previous: threading.Thread | None) -> None:
        session = self.editor.session
        try:
            if previous is not None:  # a cancelled task still stopping: its events first
                previous.join()
            end = session.drain(session.submit(task), self.render)
        except Exception as e:  # the thread's edge: the editor must get its answer
            log.error("the prompt failed: %s: %s", type(e).__name__, e, exc_info=True)
            self.answer({"error": {"code": INTERNAL_ERROR, "message": f"{type(e).__name__}: {e}"}})
            return
        self.answer(self.outcome(end))

    def render(self, event: dict) -> None:
        if event.get("type") == "task_start" and self.cancelled:
            self.editor.session.abort(CANCELLED)  # cancelled before its task began
        for update in self.editor.updates.live(event):
            with self.lock:
                if not self.answered:  # nothing follows the answer
                    self.editor.notify(update)
        if event.get("type") == "approval_request":
            self.ask(event["request"])

    def ask(self, request: ApprovalRequest) -> None:
        """Ask the editor's person; the task waits until the response answers ``request``
        (or a cancel ends the wait)."""
        if self.cancelled:  # the abort ends the task's wait: nobody is asked
            return
        params = {"sessionId": self.editor.session.id,
                  "toolCall": self.editor.updates.permission(request),
                  "options": permission_options(request)}
        self.editor.wire.request("session/request_permission", params,
                                 lambda response: self.decide(request, response))

    def decide(self, request: ApprovalRequest, response: dict) -> None:
        answer = permission_answer(response)
        if answer is None:  # the editor cancelled the question: the prompt is cancelled
            if not request.answered:
                self.cancel()
            return
        if answer[1]:
            log.warning("approval of %s: %s", request.tool, answer[1])
        request.answer(*answer)

    def outcome(self, end: dict) -> dict:
        reason = "cancelled" if self.cancelled else stop_reason(end)
        if reason is None:
            return {"error": {"code": TASK_FAILED, "message": failure_line(end)}}
        return {"result": {"stopReason": reason}}

    def answer(self, message: dict) -> None:
        with self.lock:
            if self.answered:
                return
            self.answered = True
            self.editor.wire.send({"id": self.id, **message})

    def cancel(self) -> None:
        """Abort the task (its code killed); the answer is ``cancelled``, at the latest
        ``CANCEL_ANSWER_SECONDS`` from now."""
        if self.answered:
            return
        self.cancelled = True
        self.editor.session.abort(CANCELLED)
        timer = threading.Timer(CANCEL_ANSWER_SECONDS, self.answer,
                                ({"result": {"stopReason": "cancelled"}},))
        timer.daemon = True
        timer.start()
