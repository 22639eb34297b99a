"""One writer per session: a lock beside the journal, held while a process writes it.

A second ``ga --resume ID`` of a session another process has open is refused with
``SessionBusy`` naming that process, instead of two processes appending to one journal.
A lock whose holder died (SIGKILL: it could not remove its file) is free: it is taken when
its session is resumed, and ``sweep_stale_locks`` removes it when a run starts.
"""

from __future__ import annotations

import os
from pathlib import Path

from llmcore.base import ConfigError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory lock
    fcntl = None  # type: ignore[assignment]

LOCK_SUFFIX = ".lock"
PID_CHARS = 32


class SessionBusy(ConfigError):
    """The session is open in another process."""

    def __init__(self, session_id: str, pid: str) -> None:
        super().__init__(None, None, f"session {session_id} is open in process {pid}; wait for "
                                     "it to end (or stop it), or start a new session")


class SessionLock:
    """An exclusive claim on one session's journal, held while this process writes it.

    ``flock`` on ``<id>.lock`` (released by the system if the process dies), holding our pid
    so a refused second process can name the first. No lock where ``fcntl`` is missing.
    """

    def __init__(self, journal_path: Path) -> None:
        self.path = journal_path.with_suffix(LOCK_SUFFIX)
        self.session_id = journal_path.stem
        self._fd: int | None = None

    def acquire(self) -> SessionLock:
        """Take the lock or raise ``SessionBusy``; OSError when the home cannot be written."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if fcntl is None:
            return self
        while self._fd is None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pid = os.pread(fd, PID_CHARS, 0).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise SessionBusy(self.session_id, pid) from None
            if _same_file(fd, self.path):  # else a releasing process removed it: try again
                self._fd = fd
            else:
                os.close(fd)
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)
            self._fd = None


def sweep_stale_locks(folder: Path) -> None:
    """Remove the session locks in ``folder`` that no live process holds: each is taken and
    released as its holder would have done, so a process taking it meanwhile is never
    robbed of it."""
    if fcntl is None:
        return
    for path in folder.glob(f"*{LOCK_SUFFIX}"):
        lock = SessionLock(path)  # path.with_suffix(LOCK_SUFFIX) is path itself
        try:
            lock.acquire()
        except (SessionBusy, OSError):
            continue  # held by a live process, or not ours to remove
        lock.release()


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    here = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (here.st_dev, here.st_ino)
