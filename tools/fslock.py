"""The lock a read-modify-write of a file holds (the file tools, the memory store): an
exclusive ``flock`` on the folder that holds the file's real target.

    with file_lock(path, check) as at:   # at: the fsutil.Target to read and write
        atomic_write(path, data, at=at)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from tools.fsutil import Target, open_target

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory lock, writes stay atomic
    fcntl = None  # type: ignore[assignment]


@contextlib.contextmanager
def file_lock(path: str | Path, check: Callable[[Path], None] | None = None
              ) -> Iterator[Target]:
    """Hold an exclusive lock for a read-modify-write of ``path``, across threads and
    processes; yields the ``Target`` to read and write (``atomic_write(path, …, at=it)``).

    The lock (``flock``) is taken on the folder that holds the real target of ``path``: a
    folder's inode stays the same while the files in it are replaced by rename, every name
    of one file (symlinks included) meets at the same folder, a file that does not exist
    yet is covered, and no lock file is left in anyone's folder. Writers in one folder take
    turns; each holds the lock for the milliseconds of one write. Not reentrant. Once it is
    held, ``check`` is given the target's real path.
    """
    target = open_target(path, check)
    try:
        if fcntl is not None and target.fd is not None:
            fcntl.flock(target.fd, fcntl.LOCK_EX)
        if check is not None:
            check(target.real())
        yield target
    finally:
        target.close()  # closing releases the lock
