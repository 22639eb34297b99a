"""Python evaluated inside the runtime (``code_run`` with ``inline_eval``), with the names it
is given (``handler``, ``agent``) in scope.

It runs in a thread of its own: what it prints is captured, since ``sys.stdout`` and
``sys.stderr`` are routed by thread while it runs, and goes back in the result, never to
the runtime's own streams. Past its timeout, or on abort, it is left behind in its thread
(a thread cannot be killed) and the result says so.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import threading
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

from llmcore.secrets import Redactor
from tools.code_run import (
    ABORT_WATCH_SECONDS,
    MAX_OUTPUT_CHARS,
    MIN_OUTPUT_CHARS,
    Output,
    coerce_timeout,
    workdir,
)


def run_inline(code: str, namespace: dict, cwd: str | Path | None = None, timeout: int = 60,
                abort: threading.Event | None = None,
                max_output: int = MAX_OUTPUT_CHARS, redact: Redactor | None = None) -> dict:
    """Evaluate python ``code`` in this process with ``namespace`` as its globals: the value
    of an expression, else of ``_r`` (``'OK'`` when unset), and what it printed (``stdout``,
    stderr merged). Every exception the code raises, ``SystemExit`` and ``GeneratorExit``
    included, is status ``error``; past ``timeout`` or on ``abort`` the status says so and
    the code is left running in its thread. ``redact`` masks secrets in what it printed
    before that is shortened."""
    limit = coerce_timeout(timeout)
    folder = workdir(cwd)
    capture = _Capture(max(MIN_OUTPUT_CHARS, int(max_output)), redact)
    outcome: dict = {}
    done = threading.Event()
    old = os.getcwd()
    os.chdir(folder)
    try:
        threading.Thread(target=_evaluate, args=(code, namespace, capture, outcome, done),
                         name="ga-inline-eval", daemon=True).start()
        status = _await(done, limit, abort)
    finally:
        os.chdir(old)
    result: dict = {"status": status or ("error" if "error" in outcome else "success")}
    if status == "timeout":
        result["timeout"] = limit
    elif "error" in outcome:
        result["msg"] = outcome["error"]
    elif "result" in outcome:
        result["result"] = outcome["result"]
    if printed := capture.close():
        result["stdout"] = printed
    return result


def _evaluate(code: str, namespace: dict, capture: _Capture, outcome: dict,
              done: threading.Event) -> None:
    try:
        with _routed(capture):
            try:
                compiled, expression = compile(code, "<inline_eval>", "eval"), True
            except SyntaxError:
                compiled, expression = compile(code, "<inline_eval>", "exec"), False
            value = eval(compiled, namespace)
            outcome["result"] = repr(value if expression else namespace.get("_r", "OK"))
    except BaseException as e:  # the model's own code: every way out is an error result
        outcome["error"] = f"{type(e).__name__}: {e}"
    finally:
        done.set()


def _await(done: threading.Event, limit: float, abort: threading.Event | None) -> str | None:
    """Wait for ``done``; return ``timeout`` or ``aborted`` when the wait ends without it."""
    deadline = time.monotonic() + limit
    while not done.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return "timeout"
        if abort is not None and abort.is_set():
            return "aborted"
        done.wait(min(left, ABORT_WATCH_SECONDS) if abort is not None else left)
    return None


class _Capture:
    """What inline code prints, head and tail within a budget; closed, it takes no more."""

    def __init__(self, max_chars: int, redact: Redactor | None = None) -> None:
        self.out = Output(max_chars, 0, redact)
        self.lock = threading.Lock()
        self.closed = False

    def __call__(self, text: str) -> None:
        with self.lock:
            if not self.closed:
                self.out.add(text)

    def close(self) -> str:
        with self.lock:
            self.closed = True
            self.out.add("", final=True)
            return self.out.render()


class _Routed:
    """``sys.stdout`` or ``sys.stderr`` while inline code runs: a thread with a sink writes
    there, every other thread to the stream this one replaced."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.sinks: dict[int, Callable[[str], None]] = {}

    def write(self, text: str) -> int:
        sink = self.sinks.get(threading.get_ident())
        if sink is None:
            return self.real.write(text)
        sink(text)
        return len(text)

    def writelines(self, lines: list[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if threading.get_ident() not in self.sinks:
            self.real.flush()

    def close(self) -> None:
        """Inline code closing its ``sys.stdout`` or ``sys.stderr`` closes nothing: the
        stream behind the router is the runtime's own."""

    def detach(self) -> None:
        raise io.UnsupportedOperation("the runtime's stream cannot be detached")

    def __getattr__(self, name: str) -> Any:  # encoding, isatty, fileno ... of the real one
        return getattr(self.real, name)


_ROUTING = threading.Lock()  # guards swapping sys.stdout / sys.stderr


@contextlib.contextmanager
def _routed(sink: Callable[[str], None]) -> Generator[None, None, None]:
    """Send this thread's writes to ``sys.stdout`` and ``sys.stderr`` to ``sink``."""
    ident = threading.get_ident()
    with _ROUTING:
        routers = []
        for name in ("stdout", "stderr"):
            router = getattr(sys, name)
            if not isinstance(router, _Routed):
                router = _Routed(router)
                setattr(sys, name, router)
            router.sinks[ident] = sink
            routers.append((name, router))
    try:
        yield
    finally:
        with _ROUTING:
            for name, router in routers:
                router.sinks.pop(ident, None)
                if not router.sinks and getattr(sys, name) is router:
                    setattr(sys, name, router.real)
