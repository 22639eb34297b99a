"""The wire under ``ga acp`` (SPEC §13): JSON-RPC 2.0, one object per line, on the
process's own stdin and stdout.

``Wire`` writes the replies, the notifications and ga's own requests to the editor (an
approval question), and hands each of the editor's responses to whoever waits for it.
``protocol_streams`` keeps the protocol's copies of fd 0 and fd 1 and points those fds
elsewhere, so prints, logging, rich and child processes can neither read the requests nor
write into the replies.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import sys
import threading
from typing import IO, Any, Callable, Iterator

from agent_loop import json_default

log = logging.getLogger("ga.acp")

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
TASK_FAILED = -32000  # the task failed: the model unreachable after its retries, a crash
PROMPT_RUNNING = -32001  # a second prompt while the session's first is unanswered


class RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class Wire:
    """The protocol's stdout: one JSON-RPC object per line, one writer at a time. A client
    that has gone away makes later writes no-ops."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.lock = threading.Lock()
        self.closed = False
        self.ids = itertools.count(1)
        self.waiting: dict[int, Callable[[dict], None]] = {}  # ga's request id -> its reader

    def send(self, message: dict) -> None:
        text = json.dumps({"jsonrpc": "2.0", **message}, ensure_ascii=False,
                          default=json_default)
        data = text.encode("utf-8", "replace") + b"\n"
        with self.lock:
            if self.closed:
                return
            try:
                self.out.write(data)
                self.out.flush()
            except (OSError, ValueError) as e:  # ValueError: the stream was closed
                self.closed = True
                log.info("the editor's end of stdout is gone (%s)", e)

    def notify(self, method: str, params: dict) -> None:
        self.send({"method": method, "params": params})

    def answer(self, request_id: Any, result: Any) -> None:
        self.send({"id": request_id, "result": result})

    def fail(self, request_id: Any, code: int, message: str) -> None:
        self.send({"id": request_id, "error": {"code": code, "message": message}})

    def request(self, method: str, params: dict, on_response: Callable[[dict], None]) -> int:
        """Ask the editor; ``on_response`` gets its response (``result`` or ``error``) on the
        thread that reads the requests. Returns the request's id."""
        with self.lock:
            request_id = next(self.ids)
            self.waiting[request_id] = on_response
        self.send({"id": request_id, "method": method, "params": params})
        return request_id

    def response(self, message: dict) -> None:
        """A response from the editor: to the one waiting for it (an unknown id is logged)."""
        request_id, on_response = message.get("id"), None
        if isinstance(request_id, int):
            with self.lock:
                on_response = self.waiting.pop(request_id, None)
        if on_response is None:
            log.info("a response to no request of ga's (id %r) was ignored", request_id)
            return
        on_response(message)


@contextlib.contextmanager
def protocol_streams() -> Iterator[tuple[IO[bytes], IO[bytes]]]:
    """(requests, replies): the process's stdin and stdout for the protocol alone; fd 0
    reads /dev/null and fd 1 writes to stderr meanwhile (restored after)."""
    sys.stdout.flush()
    saved = (os.dup(0), os.dup(1))
    requests, replies = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    try:
        yield requests, replies
    finally:
        sys.stdout.flush()
        for fd, copy in zip((0, 1), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)
        requests.close()
        with contextlib.suppress(OSError):  # what the gone client did not read is lost
            replies.close()
