"""One MCP server: its client lives in one long-lived task on the event loop, which enters
the client's context, lists the tools, follows ``tools/list_changed`` and leaves the context
when asked to stop (entering and leaving in one task, as the SDK's cancel scopes require).
Calls run as their own tasks on the same loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
from pathlib import Path
from typing import Any, Callable

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared.exceptions import MCPError

from llmcore.base import ConfigError

from .config import ServerConfig
from .spawn import LOG_START, spawn
from .stdio import tied_stdio

log = logging.getLogger("ga.mcp")

LIST_PAGES_MAX = 100  # tools/list pages read at most (a server that never ends its list)
HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)  # the SDK's own defaults for MCP over HTTP
CLIENT_NAME = "genericagent"
LOG_TAIL_BYTES = 4096  # of a server's log read for its last words
LAST_WORDS_CHARS = 200


class ServerGone(Exception):
    """The server's process or connection ended; it may be restarted."""


class Connection:
    """One server of a session: started by ``open``, ended by ``stop``."""

    def __init__(self, cfg: ServerConfig, cwd: Path, log_path: Path | None,
                 on_change: Callable[[], None], process: Any = None,
                 redact: Callable[[str], str] = str) -> None:
        self.cfg = cfg
        self.redact = redact  # masks what the server said before it is cut
        self.cwd = cwd
        self.log_path = log_path
        self.on_change = on_change  # called (on the loop) after the tool list changed
        self.tools: list[types.Tool] = []
        self.client: Client | None = None
        self.gone: str | None = None  # why the server ended, once it has
        self.closed_by_server = False  # a stdio server ended its output: the connection is over
        self._procs: list = [process] if process is not None else []  # the stdio process
        self._life: asyncio.Task | None = None
        self._scope: anyio.CancelScope | None = None  # the whole life: cancelled to give up
        self._wake: anyio.Event | None = None
        self._stopping = False
        self._refresh_wanted = False

    # ---- life --------------------------------------------------------------------------
    async def open(self) -> None:
        """Start the server and list its tools; raises why it could not start."""
        ready = asyncio.get_running_loop().create_future()
        self._life = asyncio.get_running_loop().create_task(self._run(ready))
        await ready

    async def _run(self, ready: asyncio.Future) -> None:
        deadline = anyio.current_time() + self.cfg.startup_timeout_sec
        try:
            with anyio.CancelScope(deadline=deadline) as scope:
                self._scope = scope
                async with self._client() as client:
                    self.client = client
                    await self.refresh()
                    scope.deadline = math.inf
                    ready.set_result(None)
                    await self._serve(client)
            if scope.cancelled_caught and not ready.done():
                raise TimeoutError(self._late())
        except Exception as e:  # a server's failure, whatever the SDK raised: reported
            late = not ready.done() and anyio.current_time() >= deadline
            self._ended(ready, TimeoutError(self._late()) if late else e)
        finally:
            self.client = None
            if not ready.done():
                ready.set_exception(ServerGone("it ended during start-up"))

    def _late(self) -> str:
        return f"it did not start within {self.cfg.startup_timeout_sec:g} s"

    def _ended(self, ready: asyncio.Future, error: Exception) -> None:
        why = describe(error, self.closed_by_server) + self._own_words()
        if not ready.done():
            ready.set_exception(ServerGone(why))
            return
        self.gone = why
        log.info("MCP server %s ended: %s", self.cfg.name, why)

    def _own_words(self) -> str:
        """What a stdio server that ended by itself said: its exit code and the last line
        it wrote to stderr since it was started."""
        proc = self.process
        code = proc.returncode if proc is not None else None
        if code is None or code < 0:  # running, or ended by a signal (ours, at the end)
            return ""
        said = last_words(self.log_path, self.redact)
        return f" (exit code {code}" + (f"; it said: {said}" if said else "") + ")"

    def _client(self) -> Client:
        handler = self._on_message
        info = types.Implementation(name=CLIENT_NAME, version=client_version())
        if self.cfg.command:
            return Client(self._stdio(), message_handler=handler, client_info=info)
        return Client(self._http(), message_handler=handler, client_info=info)

    def _stdio(self) -> Any:
        """The transport over the process started before the ``mcp`` package was loaded,
        else (a restart) over a new one."""
        if not self._procs:
            self._procs.append(spawn(self.cfg, self.cwd, self.log_path))
        return tied_stdio(self._procs[-1], self._server_closed)

    def _server_closed(self) -> None:
        self.closed_by_server = True

    @contextlib.asynccontextmanager
    async def _http(self) -> Any:
        from mcp.client.streamable_http import streamable_http_client

        headers = self.cfg.headers()
        async with httpx2.AsyncClient(headers=headers, timeout=HTTP_TIMEOUT) as http:
            async with streamable_http_client(self.cfg.url, http_client=http) as streams:
                yield streams

    async def _serve(self, client: Client) -> None:
        """Until ``stop``: refresh the tool list whenever the server says it changed."""
        async with anyio.create_task_group() as tasks:
            caps = client.server_capabilities.tools
            if caps is not None and caps.list_changed:
                tasks.start_soon(self._listen, client)
            while not self._stopping:
                self._wake = anyio.Event()
                if self._refresh_wanted:
                    self._refresh_wanted = False
                    await self.refresh()
                    continue
                await self._wake.wait()
            tasks.cancel_scope.cancel()

    async def _listen(self, client: Client) -> None:
        """A 2026-era server tells of changes on a ``subscriptions/listen`` stream."""
        try:
            async with client.listen(tools_list_changed=True) as changes:
                async for _ in changes:
                    self.want_refresh()
        except ListenNotSupportedError:
            return  # an older server sends notifications instead (_on_message)
        except (MCPError, SubscriptionLost, TimeoutError) as e:
            log.info("MCP server %s: tool list changes not followed: %s", self.cfg.name, e)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.want_refresh()

    def want_refresh(self) -> None:
        self._refresh_wanted = True
        if self._wake is not None:
            self._wake.set()

    def stop(self) -> None:
        """Ask the server to end (on the loop's thread); ``closed`` waits for it."""
        self._stopping = True
        if self._wake is not None:
            self._wake.set()
        elif self._scope is not None:
            self._scope.cancel()  # still starting

    async def closed(self) -> None:
        if self._life is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(self._life)

    # ---- tools -------------------------------------------------------------------------
    async def refresh(self) -> None:
        """Read the server's tools (every page, until a cursor comes again), keep the ones
        the config lets through; of two tools with one name, the first."""
        found: dict[str, types.Tool] = {}
        cursor, cursors = None, set()
        for _ in range(LIST_PAGES_MAX):
            page = await self.client.list_tools(cursor=cursor, cache_mode="refresh")
            for tool in page.tools:
                found.setdefault(tool.name, tool)
            cursor = page.next_cursor
            if not cursor or cursor in cursors:
                break
            cursors.add(cursor)
        self.tools = [t for t in found.values() if self.cfg.offers(t.name)]
        self.on_change()

    @property
    def process(self) -> Any:
        """The stdio server's process (``subprocess.Popen``), None for an http server."""
        return self._procs[-1] if self._procs else None

    def alive(self) -> bool:
        if self.client is None or self.gone:
            return False
        return all(proc.poll() is None for proc in self._procs)

    async def call(self, tool: str, arguments: dict) -> types.CallToolResult:
        client = self.client
        if client is None or not self.alive():
            raise ServerGone(self.gone or "its process has exited")
        try:
            return await client.call_tool(tool, arguments)
        except MCPError as e:  # the SDK's closed connection, or the server's own answer
            if e.code == types.CONNECTION_CLOSED and (self.closed_by_server or not self.alive()):
                self.gone = "its connection closed"
                raise ServerGone(self.gone) from None
            raise
        except (httpx2.TransportError, anyio.BrokenResourceError, anyio.ClosedResourceError,
                OSError) as e:
            self.gone = describe(e)
            raise ServerGone(self.gone) from None


def last_words(log_path: Path | None, redact: Callable[[str], str] = str) -> str:
    """The last line a server wrote to its log since its latest start, masked, then cut
    short."""
    try:
        with open(log_path, "rb") as f:
            f.seek(max(f.seek(0, os.SEEK_END) - LOG_TAIL_BYTES, 0))
            tail = f.read().decode("utf-8", errors="replace")
    except (OSError, TypeError):  # no log (None), or it cannot be read
        return ""
    lines = [line.strip() for line in tail.splitlines()]
    starts = [i for i, line in enumerate(lines) if line.startswith(LOG_START)]
    said = next((line for line in reversed(lines[starts[-1] + 1 if starts else 0:]) if line), "")
    said = redact(said)
    return said[:LAST_WORDS_CHARS] + ("…" if len(said) > LAST_WORDS_CHARS else "")


def client_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(CLIENT_NAME)
    except PackageNotFoundError:
        return "unknown"


def describe(error: BaseException, closed: bool = False) -> str:
    """A failure in one line: the first real error inside task-group wrappers. ``closed``:
    the connection really ended, so the SDK's -32000 means that, not the server's answer."""
    while isinstance(getattr(error, "exceptions", None), tuple) and error.exceptions:
        error = error.exceptions[0]  # an exception group (from a task group)
    if isinstance(error, ConfigError):
        return str(error)
    if isinstance(error, FileNotFoundError) and error.filename:
        return f"command not found: {error.filename}"
    if isinstance(error, MCPError) and closed and error.code == types.CONNECTION_CLOSED:
        return "the server closed the connection"
    if isinstance(error, MCPError):
        return f"the server answered error {error.code}: {error.message}"
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if isinstance(error, (TimeoutError, ServerGone)) and text:
        return text
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
