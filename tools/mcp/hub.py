"""The MCP servers of one session (SPEC §12): started in parallel on one event-loop thread,
their tools offered as ``mcp__SERVER__TOOL``, called from the runtime's own threads.

A call waits for its result at most the server's ``tool_timeout_sec`` and is cancelled
then (or by ``cancel_calls``: Ctrl-C, an abort); the model gets an error result and the
run goes on. A server found dead at a call is restarted once per session.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import hashlib
import logging
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Generator, Iterable

from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from agent_loop import tool_output as outside_text
from tools.spec import schema_tokens

from .config import ServerConfig
from .connection import Connection, ServerGone, describe
from .loop import LoopThread
from .results import tool_output
from .spawn import log_file

log = logging.getLogger("ga.mcp")

PREFIX = "mcp__"
NAME_MAX = 64  # the providers' limit on a tool name
HASH_CHARS = 8  # a cut or clashing name ends in this many hex digits of the full one
DESCRIPTION_MAX = 1000
UNSAFE = re.compile(r"[^A-Za-z0-9_-]")  # characters the providers refuse in a tool name
START_MARGIN_SECONDS = 5.0  # past startup_timeout_sec: a start stuck beyond its own timeout
CLOSE_SECONDS = 5.0  # how long closing waits for the servers to end
OUTPUT_CHARS = 10_000  # a result's budget (ga mcp call's), shared by the calls of one reply
RUNTIME_ARGS = ("_index", "_tool_num")  # dispatch's own arguments: never sent to a server


@dataclass(frozen=True)
class McpTool:
    """A server's tool as offered to the model."""

    name: str  # mcp__SERVER__TOOL, as the model calls it
    server: str
    tool: str  # the server's own name for it
    schema: dict
    tokens: int


def tool_name(server: str, tool: str, taken: set[str]) -> str:
    """``mcp__SERVER__TOOL`` with characters a provider refuses replaced, cut to 64 and
    made unique with a short hash of the full name when needed."""
    name = UNSAFE.sub("_", f"{PREFIX}{server}__{tool}")
    if len(name) <= NAME_MAX and name not in taken:
        return name
    digest = hashlib.sha1(f"{server}\0{tool}".encode()).hexdigest()[:HASH_CHARS]
    return f"{name[:NAME_MAX - HASH_CHARS - 1]}_{digest}"


def tool_schema(name: str, tool: Any, redact: Callable[[str], str] = str) -> dict:
    """The tool list entry: the server's input schema and its description (capped), outside
    text reaching the model like a tool result: every string in them (property names
    included) masked, then neutralised (a ``[MASTER]`` in a description has no power)."""
    text = outside_text((tool.description or tool.title or tool.name).strip(), redact)
    if len(text) > DESCRIPTION_MAX:
        text = text[:DESCRIPTION_MAX - 1] + "…"
    parameters = outside_text(tool.input_schema, redact)
    return {"type": "function", "function": {"name": name, "description": text,
                                             "parameters": parameters}}


def error(msg: str) -> tuple[dict, list]:
    return {"status": "error", "msg": msg}, []


class McpHub:
    """The servers of a session, their tools and calls; ``redact`` masks what the servers
    say (tool texts, results) before it is shortened."""

    def __init__(self, servers: Iterable[ServerConfig], cwd: Path, log_dir: Path | None,
                 redact: Callable[[str], str] = str) -> None:
        self.servers = {s.name: s for s in servers}
        self.redact = redact
        self.cwd = Path(cwd)
        self.log_dir = log_dir
        self.loop = LoopThread()
        self.connections: dict[str, Connection] = {}
        self.failed: dict[str, str] = {}  # server -> why it did not start or is gone
        self.restarted: set[str] = set()
        self._tools: dict[str, McpTool] = {}
        self._lock = threading.RLock()
        self.changed = threading.Condition(self._lock)  # notified when the tool list changes
        self._calls: set[concurrent.futures.Future] = set()
        self._calls_lock = threading.Lock()  # a cancel and a call's start, one at a time
        self._cancelled = False  # by cancel_calls, until the next task (allow_calls)
        atexit.register(self.close)  # the servers end with ga even when no one closes it

    # ---- starting and stopping ---------------------------------------------------------
    def start(self, names: Iterable[str] | None = None,
              spawned: dict[str, Any] | None = None) -> dict[str, str]:
        """Start the enabled servers (or those ``names``) in parallel, each within its
        ``startup_timeout_sec``; returns ``{name: why}`` for those that did not start.
        ``spawned``: stdio processes already started (or the error starting one raised)."""
        chosen = [s for s in self.servers.values()
                  if s.enabled and (names is None or s.name in names)]
        spawned = spawned or {}
        waits = {s.name: self.loop.submit(self._open(s, spawned.get(s.name))) for s in chosen}
        for name, future in waits.items():
            try:
                self.loop.wait(future, self.servers[name].startup_timeout_sec
                               + START_MARGIN_SECONDS)
            except Exception as e:  # a server's own failure, whatever it is: reported
                self.failed[name] = self.redact(describe(e))  # its stderr may say anything
        self._rebuild()
        return {name: self.failed[name] for name in waits if name in self.failed}

    async def _open(self, cfg: ServerConfig, process: Any = None) -> None:
        if isinstance(process, Exception):
            raise process
        conn = Connection(cfg, self.cwd, self.log_path(cfg.name), self._rebuild, process,
                          self.redact)
        self.connections[cfg.name] = conn
        self.failed.pop(cfg.name, None)
        await conn.open()

    def log_path(self, name: str) -> Path | None:
        return log_file(self.log_dir, name)

    def close(self) -> None:
        """End every server (stdin closed, then its process group), then the loop."""
        atexit.unregister(self.close)
        if self.loop.loop.is_closed():
            return
        for conn in list(self.connections.values()):
            self.loop.call_soon(conn.stop)
        waits = [self.loop.submit(conn.closed()) for conn in list(self.connections.values())]
        done, _ = concurrent.futures.wait(waits, CLOSE_SECONDS)
        if len(done) < len(waits):
            log.warning("an MCP server did not stop in %.0f s; it ends with ga", CLOSE_SECONDS)
        self.loop.close()

    # ---- tools -------------------------------------------------------------------------
    def _rebuild(self) -> None:
        """The offered tools from every live server's list, in config order; an unchanged
        tool keeps its schema object (the tool list's JSON is built once per list)."""
        with self._lock:
            old, table = self._tools, {}
            for server in self.servers:
                conn = self.connections.get(server)
                for tool in conn.tools if conn is not None and server not in self.failed else ():
                    name = tool_name(server, tool.name, set(table))
                    schema = tool_schema(name, tool, self.redact)
                    kept = old.get(name)
                    if kept is not None and kept.schema == schema:
                        schema = kept.schema
                    table[name] = McpTool(name, server, tool.name, schema, schema_tokens(schema))
            self._tools = table
            self.changed.notify_all()

    def tools(self) -> list[McpTool]:
        with self._lock:
            return list(self._tools.values())

    def schemas(self) -> list[dict]:
        return [t.schema for t in self.tools()]

    def tool(self, name: str) -> McpTool | None:
        with self._lock:
            return self._tools.get(name)

    def state(self, name: str) -> str:
        """``ready``, ``disabled``, ``failed: why``, ``stopped: why`` or ``not started``."""
        cfg, conn = self.servers[name], self.connections.get(name)
        if not cfg.enabled:
            return "disabled"
        if name in self.failed:
            return f"failed: {self.failed[name]}"
        if conn is None:
            return "not started"
        return "ready" if conn.alive() else f"stopped: {conn.gone or 'its process has exited'}"

    # ---- calls -------------------------------------------------------------------------
    def run(self, name: str, args: dict,
            vision: bool = True) -> Generator[str, None, tuple[Any, list[dict]]]:
        """``name`` called as one of the model's tools: a progress line, then (data, image
        blocks), the calls of one reply sharing the budget."""
        arguments = {k: v for k, v in args.items() if k not in RUNTIME_ARGS}
        yield f"[Action] Calling MCP tool {name}\n"
        return self.call(name, arguments, vision,
                         OUTPUT_CHARS // max(args.get("_tool_num", 1), 1))

    def call(self, name: str, arguments: dict, vision: bool = True,
             budget: int = OUTPUT_CHARS) -> tuple[Any, list[dict]]:
        """Call the offered tool ``name``: (data, image blocks) for the model; any failure
        is an error result, never an exception."""
        tool = self.tool(name)
        if tool is None:
            return error(f"[Error] {name} is no longer offered by its MCP server")
        cfg = self.servers[tool.server]
        try:
            conn = self._live(tool.server)
        except ServerGone as e:
            return error(f"[Error] MCP server {tool.server} is not running: {e}")
        with self._calls_lock:
            if self._cancelled:  # aborted before the call began: it is not made
                return error(f"[Error] {name} was cancelled")
            future = self.loop.submit(conn.call(tool.tool, arguments))
            self._calls.add(future)
        try:
            result = self.loop.wait(future, cfg.tool_timeout_sec)
        except TimeoutError:
            return error(f"[Error] {name} did not answer within {cfg.tool_timeout_sec:g} s "
                         "(tool_timeout_sec); the call was cancelled")
        except concurrent.futures.CancelledError:
            return error(f"[Error] {name} was cancelled")
        except ServerGone as e:
            return error(f"[Error] MCP server {tool.server} stopped during the call ({e}); "
                         + self._next_call_note(tool.server))
        except MCPError as e:
            return error(f"[Error] {name}: the server answered error {e.code}: {e.message}")
        except ValidationError as e:
            return error(f"[Error] {name}: the server's result is not valid MCP: "
                         f"{describe(e)}")
        except Exception as e:  # the SDK refused the result (its outputSchema broken), or worse
            log.debug("MCP call %s failed", name, exc_info=True)
            return error(f"[Error] {name} failed: {describe(e)}")
        finally:
            with self._calls_lock:
                self._calls.discard(future)
        return tool_output(result, name, vision, budget, self.redact)

    def _next_call_note(self, server: str) -> str:
        if server in self.restarted:
            return "it was restarted once already, so its tools stay unavailable"
        return "it is restarted at its next call"

    def _live(self, server: str) -> Connection:
        """The server's connection, restarted once per session when it has died."""
        conn = self.connections.get(server)
        if conn is not None and conn.alive():
            return conn
        if server in self.restarted:
            raise ServerGone("it stopped again after its restart; restart ga to use it")
        self.restarted.add(server)
        why = conn.gone if conn is not None else "not started"
        log.warning("MCP server %s stopped (%s); restarting it", server, why)
        if conn is not None:
            self.loop.call_soon(conn.stop)
            try:
                self.loop.run(conn.closed(), CLOSE_SECONDS)
            except TimeoutError:
                log.warning("MCP server %s did not stop in %.0f s", server, CLOSE_SECONDS)
        failed = self.start([server])
        if failed:
            raise ServerGone(f"its restart failed: {failed[server]}")
        return self.connections[server]

    def cancel_calls(self) -> None:
        """Cancel every call in flight (Ctrl-C, an abort): each returns an error result, as
        does every call begun after it until ``allow_calls``."""
        with self._calls_lock:
            self._cancelled = True
            calls = list(self._calls)
        for future in calls:
            future.cancel()

    def allow_calls(self) -> None:
        """A new task begins: its calls are made again."""
        with self._calls_lock:
            self._cancelled = False
