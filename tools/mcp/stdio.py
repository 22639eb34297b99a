"""The stdio transport over a server process the runtime started itself.

The SDK's own stdio client starts the process itself, out of reach of ``tools.procs``;
here ``spawn`` starts it with ``popen_tied`` like every child of the runtime, so it ends
with the runtime however that ends (SIGKILL included). Messages are JSON-RPC, one per line,
bridged to the SDK session's streams. Shutdown follows the MCP lifecycle: stdin closed, a
grace to exit, then its whole session is signalled.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
from contextlib import asynccontextmanager
from typing import AsyncIterator, Callable

import anyio
import mcp_types as types
from mcp.shared.message import SessionMessage

from .spawn import stop

log = logging.getLogger("ga.mcp")

MESSAGE_LIMIT = 64 * 2**20  # bytes of one message from a server (a result holding images)
EXIT_GRACE_SECONDS = 0.5  # after its stdin closes, a server has this long to exit by itself
EXIT_POLL_SECONDS = 0.02


@asynccontextmanager
async def tied_stdio(proc: subprocess.Popen,
                     on_end: Callable[[], None] = lambda: None) -> AsyncIterator[tuple]:
    """The SDK's (read stream, write stream) over the pipes of the server ``proc``
    (started by ``spawn.spawn``); leaving ends the process and its whole session.
    ``on_end`` is called when the server ends its output, before the session sees it end."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MESSAGE_LIMIT)
    try:
        reading, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), proc.stdout)
        writing, _ = await loop.connect_write_pipe(asyncio.Protocol, proc.stdin)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(stop, proc)
        raise
    to_session, from_server = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    to_server, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_relay_out, reader, to_session, on_end)
            tasks.start_soon(_relay_in, from_session, writing)
            try:
                yield from_server, to_server
            finally:
                tasks.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            writing.close()  # the server reads EOF: the lifecycle's polite stop
            await _exited(proc, EXIT_GRACE_SECONDS)
            await anyio.to_thread.run_sync(stop, proc)
            reading.close()


async def _relay_out(reader: asyncio.StreamReader, to_session,
                     on_end: Callable[[], None]) -> None:
    """Server stdout → session, a message a line, until the server closes it."""
    async with to_session:
        try:
            while line := await reader.readline():
                if line.strip():
                    await to_session.send(_parse(line))
        except ValueError as e:  # a line over MESSAGE_LIMIT: the stream cannot be resynced
            log.warning("an MCP server sent a message over %d bytes: %s", MESSAGE_LIMIT, e)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return  # the session is gone
        on_end()


async def _relay_in(from_session, writing: asyncio.WriteTransport) -> None:
    """Session → server stdin."""
    async with from_session:
        async for message in from_session:
            if writing.is_closing():
                return
            data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
            writing.write(data.encode("utf-8") + b"\n")


def _parse(line: bytes) -> SessionMessage | Exception:
    """One line as a JSON-RPC message, or the parse error (the session reports it)."""
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as e:
        return e


async def _exited(proc: subprocess.Popen, seconds: float) -> bool:
    deadline = anyio.current_time() + seconds
    while proc.poll() is None:
        if anyio.current_time() >= deadline:
            return False
        await anyio.sleep(EXIT_POLL_SECONDS)
    return True
