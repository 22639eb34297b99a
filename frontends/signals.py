"""How ``ga`` ends on a signal (SPEC §7).

SIGINT raises ``KeyboardInterrupt``, SIGTERM and SIGHUP raise ``Terminated`` in the main
thread (inside a ``held()`` block, at its end). Either way the front end aborts the running
task (its code is killed), waits briefly for it to end so the journal records it, and
exits 130, 143 or 129. All three are unblocked at start, so a mask inherited from a
supervisor (Ray workers block SIGINT) cannot make ``ga`` uninterruptible. A signal that was
ignored when ``ga`` started (``nohup`` ignores SIGHUP) stays ignored. Processes ``ga``
started end with it even on SIGKILL: see ``tools.procs``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import threading
from collections.abc import Iterator

INTERRUPTED_EXIT = 130  # 128 + SIGINT
REASONS = {"SIGTERM": "terminated", "SIGHUP": "hung up"}


class Terminated(BaseException):
    """``ga`` was asked to stop by SIGTERM or SIGHUP: it ends like Ctrl-C, exit 128 + N."""

    def __init__(self, signum: int) -> None:
        name = signal.Signals(signum).name
        super().__init__(f"{REASONS[name]} ({name})")
        self.exit_code = 128 + signum


STOPS = (KeyboardInterrupt, Terminated)  # what ends a task from the outside


def exit_code(stop: BaseException) -> int:
    return stop.exit_code if isinstance(stop, Terminated) else INTERRUPTED_EXIT


def describe(stop: BaseException) -> str:
    return str(stop) if isinstance(stop, Terminated) else "interrupted"


class _Hold:
    """The process's one signal hold: how deep in ``held()`` blocks the main thread is, and
    the first signal that arrived meanwhile."""

    depth = 0
    pending: int | None = None


def _stop_for(signum: int) -> BaseException:
    if signum == signal.SIGINT:
        return KeyboardInterrupt()
    _drop_hung_up_terminal()
    on_main = threading.current_thread() is threading.main_thread()
    if signum == signal.SIGHUP and on_main and signal.getsignal(signum) is _on_signal:
        signal.signal(signum, signal.SIG_IGN)  # hung up once; handled() restores it
    return Terminated(signum)


def write_failed(error: OSError) -> BaseException:
    """What a failed write to the console means. EIO: the terminal hung up — the kernel
    makes its writes fail before it sends SIGHUP, so end as that SIGHUP would. Any other
    error stays itself."""
    return _stop_for(signal.SIGHUP) if error.errno == errno.EIO else error


def _on_signal(signum: int, frame: object) -> None:
    if _Hold.depth:
        _Hold.pending = _Hold.pending or signum
        return
    raise _stop_for(signum)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Keep Ctrl-C/SIGTERM/SIGHUP out of a short block (a display starting or stopping must
    not be cut half-way); one that arrived meanwhile is raised when the block ends. Only
    for blocks that cannot wait on anything: the signal waits for them."""
    if threading.current_thread() is not threading.main_thread():
        yield  # handlers run in the main thread only: nothing to hold here
        return
    _Hold.depth += 1
    try:
        yield
    finally:
        _Hold.depth -= 1
        signum, _Hold.pending = _Hold.pending, None
        if signum is not None and not _Hold.depth:
            raise _stop_for(signum)


def _drop_hung_up_terminal() -> None:
    """After a hangup, writing to the terminal fails (EIO): send stdout/stderr nowhere, so
    the clean exit is not cut short by its own goodbye line."""
    for fd in (1, 2):
        try:
            os.write(fd, b"")
        except OSError:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, fd)
            os.close(null)


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """Within the block: SIGTERM/SIGHUP raise ``Terminated``; SIGINT, SIGTERM and SIGHUP
    are unblocked. Restores the previous handlers and mask after (in-process callers)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers; the embedding program owns signals
        return
    names = ("SIGINT", *REASONS)
    wanted = {getattr(signal, n) for n in names if hasattr(signal, n)}
    mask = None
    if hasattr(signal, "pthread_sigmask"):
        mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, wanted)
    saved = {s: signal.getsignal(s) for s in wanted}
    for sig, old in saved.items():
        if old in (signal.SIG_DFL, signal.default_int_handler):  # not ignored, not custom
            signal.signal(sig, _on_signal)
    try:
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
