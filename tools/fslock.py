"""The lock a read-modify-write of a file holds (``file_tools``, the memory store): an
exclusive ``flock`` on the folder that holds the file's real target, waited for with a
deadline, so a process that keeps it (a background code_run) cannot hang the runtime.

    with file_lock(path, check, abort) as at:   # at: the fsutil.Target to read and write
        atomic_write(path, data, at=at)
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from tools import ToolError
from tools.fsutil import Target, open_target

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory lock, writes stay atomic
    fcntl = None  # type: ignore[assignment]

LOCK_WAIT_SECONDS = 5  # a writer waits this long for its folder's lock, then says who holds it
LOCK_RETRY_FIRST_SECONDS = 0.001  # the first pause between two tries for a held lock, doubled
LOCK_RETRY_MAX_SECONDS = 0.05  # up to this


@contextlib.contextmanager
def file_lock(path: str | Path, check: Callable[[Path], None] | None = None,
              abort: threading.Event | None = None) -> Iterator[Target]:
    """Hold an exclusive lock for a read-modify-write of ``path``, across threads and
    processes; yields the ``Target`` to read and write (``atomic_write(path, …, at=it)``).

    The lock (``flock``) is taken on the folder that holds the real target of ``path``: a
    folder's inode stays the same while the files in it are replaced by rename, every name
    of one file (symlinks included) meets at the same folder, a file that does not exist
    yet is covered, and no lock file is left in anyone's folder. Writers in one folder take
    turns; each holds the lock for the milliseconds of one write. Not reentrant. A lock
    held longer than ``LOCK_WAIT_SECONDS`` (or ``abort`` set meanwhile) is a ToolError
    naming who holds it. Once it is held, ``check`` is given the target's real path.
    """
    target = open_target(path, check)
    try:
        if fcntl is not None and target.fd is not None:
            _wait_for_lock(target, abort)
        if check is not None:
            check(target.real())
        yield target
    finally:
        target.close()  # closing releases the lock


def _wait_for_lock(at: Target, abort: threading.Event | None) -> None:
    """Take the flock on the open folder, trying again with growing pauses until the
    deadline; an abort ends the wait at once."""
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    pause = LOCK_RETRY_FIRST_SECONDS
    wait = abort.wait if abort is not None else time.sleep
    while True:
        try:
            fcntl.flock(at.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            left = deadline - time.monotonic()
        if left <= 0:
            raise ToolError(
                f"{at.folder} is locked by {lock_holder(at.fd)} and was not released within "
                f"{LOCK_WAIT_SECONDS} s; nothing was written to {at.path}. If a process you "
                "started holds it (a background code_run), end it or let it finish, then try "
                "again.")
        if wait(min(pause, left)):
            raise ToolError(f"stopped while waiting for the lock on {at.folder}; nothing was "
                            f"written to {at.path}")
        pause = min(pause * 2, LOCK_RETRY_MAX_SECONDS)


def lock_holder(fd: int) -> str:
    """Who holds the flock on the file open as ``fd``: ``process 123 (python3)`` as
    ``/proc/locks`` says (Linux), else ``another process``."""
    st = os.fstat(fd)
    wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            held = [line.split() for line in f if "->" not in line]  # "->": a waiter
    except OSError:
        return "another process"
    for fields in held:
        if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == wanted:
            return f"process {fields[4]} ({_process_name(fields[4])})"
    return "another process"


def _process_name(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip() or "?"
    except OSError:
        return "?"
