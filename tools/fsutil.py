"""File helpers every layer shares: safe opens, atomic writes, consumed control files, locks.

Every writer of the runtime goes through ``atomic_write``, so the rules hold everywhere:
a symlink is written through (its target changes, the link stays a link), but a dangling
one never creates the folders its target lacks; an existing file
keeps its permission bits (and, for root, its owner); a new file gets ``0o666`` minus the
umask, like any file ``open()`` creates; a read-only file, a FIFO, a device or a socket is
refused with a clear error. A file with several hard links is replaced under the name
written only: its other names keep the old content, as with ``sed -i``, ``git`` and
``rsync``. Package managers (uv, pnpm, conda) hard-link one shared store into every
environment, and an edit meant for one project must not reach all of them.
A file that is a mount point of its own (Docker's ``-v file:file``) cannot be replaced by
rename: it is rewritten in place instead (callers hold ``file_lock`` for read-modify-write).
Errors name the path written, never the temp file beside it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from tools import ToolError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory lock, writes stay atomic
    fcntl = None  # type: ignore[assignment]

NEW_FILE_MODE = 0o666  # before the umask, as open(2) creates files
TEMP_SUFFIX = ".tmp"
TEMP_NAME_CHARS = 200  # a temp name keeps this much of the target's name (NAME_MAX is 255)
TEMP_NAME_TRIES = 100
TEMP_NAME_RE = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")  # ``.NAME.RANDOM.tmp``, atomic_write's
WRITE_BITS = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
# os.replace onto a bind-mounted single file: the mount point is busy, or another device
IN_PLACE_ERRNOS = (errno.EBUSY, errno.EXDEV)
COPY_CHUNK_BYTES = 1 << 20  # an append or prepend copies the old content this much at a time
_KINDS = (
    (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class NotRegularFileError(ToolError, OSError):
    """The path is there but is not a regular file: a FIFO, a device, a socket."""


class ReadOnlyFileError(ToolError, PermissionError):
    """The file exists and is read-only: writers refuse it rather than replace it."""


class FolderError(ToolError, OSError):
    """A write's folder cannot be made: it lies behind a dangling symlink, or is a file."""


def _not_regular(path: str | Path, mode: int) -> NotRegularFileError:
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return NotRegularFileError(
        f"{path} is {kind}, not a regular file; file tools read and write regular files "
        "only (use code_run for pipes, devices and sockets)")


def open_regular(path: str | Path) -> BinaryIO:
    """Open an existing regular file for binary reading, without ever blocking.

    FIFOs, devices and sockets are refused before they are opened, and again on the open
    descriptor (non-blocking), so a swap between the check and the open cannot slip through.
    """
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise _not_regular(path, mode)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ENXIO:  # a socket (or a FIFO without a writer) swapped in
            raise _not_regular(path, stat.S_IFSOCK) from e
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _not_regular(path, mode)
    return os.fdopen(fd, "rb")


def _writable_target(path: str | Path, target: Path) -> os.stat_result | None:
    """The target's stat when it exists (None when new); refuses what must not be replaced."""
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(path, st.st_mode)
    if not st.st_mode & WRITE_BITS or not os.access(target, os.W_OK):
        shown = f"{path} (a link to {target})" if os.path.islink(path) else str(path)
        raise ReadOnlyFileError(
            f"{shown} is read-only (mode {stat.S_IMODE(st.st_mode):o}); nothing was written. "
            "Leave it alone, or make it writable first (chmod u+w) if it is meant to change.")
    return st


def ensure_folder(path: str | Path) -> Path:
    """The real target of ``path``, once the folder that holds it exists.

    Only folders named in ``path`` itself are created, under its nearest existing folder:
    a dangling symlink (the file's or a folder's) is never followed into folders that do
    not exist, and a file standing where a folder should be is named in the error.
    """
    target = Path(os.path.realpath(path))
    if target.parent.is_dir():
        return target
    if os.path.islink(path):
        raise FolderError(
            f"{path} is a symlink to {target}, and {target.parent} is not an existing folder; "
            "nothing was written. Create that folder first if the link is meant to work, or "
            "write to another path.")
    existing = Path(os.path.abspath(path)).parent
    while not os.path.lexists(existing):
        existing = existing.parent
    if os.path.islink(existing) and not os.path.exists(existing):
        raise FolderError(
            f"{existing} is a symlink to {os.path.realpath(existing)}, which does not exist; "
            f"nothing was written to {path}. Create the link's target folder first, or write "
            "to another path.")
    if not os.path.isdir(existing):
        raise FolderError(
            f"{existing} is a file, not a folder, so {path} cannot be created; nothing was "
            "written. Choose another path.")
    target.parent.mkdir(parents=True, exist_ok=True)
    return target


def _create_temp(target: Path, mode: int | None = None) -> tuple[int, Path]:
    """A new empty file beside ``target``, created ``NEW_FILE_MODE`` so the umask applies,
    or with exactly ``mode`` (the umask can only have taken bits away before the chmod)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(TEMP_NAME_TRIES):
        name = f".{target.name[:TEMP_NAME_CHARS]}.{secrets.token_hex(4)}{TEMP_SUFFIX}"
        tmp = target.with_name(name)
        try:
            fd = os.open(tmp, flags, NEW_FILE_MODE if mode is None else mode)
        except FileExistsError:
            continue
        if mode is not None and hasattr(os, "fchmod"):
            os.fchmod(fd, mode)
        return fd, tmp
    raise FileExistsError(errno.EEXIST, "no free temp file name beside", str(target))


def atomic_write(path: str | Path, data: str | bytes, encoding: str = "utf-8",
                 keep: str = "", mode: int | None = None) -> None:
    """Write ``data`` to ``path`` via a temp file beside its real target and ``os.replace``;
    ``keep="before"`` puts the file's old content before ``data`` (an append), ``"after"``
    after it (a prepend), copied in chunks: bounded memory for any file size.

    Missing folders are created as ``ensure_folder`` allows. A crash leaves either the old
    file or the new one. Symlinks, permission bits, the umask, read-only files and hard
    links follow the module's rules. ``mode`` (``0o600`` for a file holding keys) gives the
    file exactly those bits from the moment its temp file exists, whatever the umask or the
    old file's bits; such a file is never rewritten in place (that would keep the old bits).
    """
    target = ensure_folder(path)
    old = _writable_target(path, target)
    raw = data.encode(encoding) if isinstance(data, str) else data
    try:
        _replace(target, raw, old, keep, mode)
    except OSError as e:
        if old is not None and e.errno in IN_PLACE_ERRNOS and mode is None:
            _write_in_place(target, raw, keep)
        elif e.filename is not None and not isinstance(e, ToolError):
            raise OSError(e.errno, e.strerror, str(path)) from None  # not the temp file's name
        else:
            raise


def _replace(target: Path, raw: bytes, old: os.stat_result | None, keep: str,
             mode: int | None) -> None:
    fd, tmp = _create_temp(target, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            if keep == "before" and old is not None:
                _copy_content(target, f)
            f.write(raw)
            if keep == "after" and old is not None:
                _copy_content(target, f)
            f.flush()
            os.fsync(f.fileno())
        if old is not None:
            _keep_mode_and_owner(tmp, old, mode)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _copy_content(source: Path, out: BinaryIO) -> None:
    with open_regular(source) as f:
        shutil.copyfileobj(f, out, COPY_CHUNK_BYTES)


def _write_in_place(target: Path, raw: bytes, keep: str = "") -> None:
    """Change ``target``'s content in its own inode (not atomic: the one way to change a
    file that is a mount point)."""
    with open(target, "r+b") as f:
        if keep == "before":
            f.seek(0, os.SEEK_END)
        elif keep == "after":
            raw += f.read()
            f.seek(0)
        f.write(raw)
        f.truncate()
        f.flush()
        os.fsync(f.fileno())


def _keep_mode_and_owner(tmp: Path, old: os.stat_result, mode: int | None = None) -> None:
    # Only root may give a file away; anyone else's rewrite is owned by them, as with any
    # editor that saves by rename. Owner first: chown clears set-id bits, chmod sets them.
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        os.chown(tmp, old.st_uid, old.st_gid)
    os.chmod(tmp, stat.S_IMODE(old.st_mode) if mode is None else mode)


def is_temp_name(name: str) -> bool:
    """True for the name of a temp file ``atomic_write`` creates (left behind by a kill)."""
    return TEMP_NAME_RE.match(name) is not None


def take_file(path: Path) -> str | None:
    """Read and delete a control file (consumed on sight); None when it is not there."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    path.unlink(missing_ok=True)
    return text


def take_text(folder: Path | None, name: str) -> str | None:
    """The text of control file ``name`` in ``folder`` (a task dir), consumed; None when
    there is no folder, no such file or only blanks in it."""
    if not folder:
        return None
    text = (take_file(Path(folder) / name) or "").strip()
    return text or None


@contextlib.contextmanager
def file_lock(path: str | Path) -> Iterator[None]:
    """Hold an exclusive lock for a read-modify-write of ``path``, across threads and processes.

    The lock (``flock``) is taken on the folder that holds the real target of ``path``: a
    folder's inode stays the same while the files in it are replaced by rename, every name
    of one file (symlinks included) meets at the same folder, a file that does not exist
    yet is covered, and no lock file is left in anyone's folder. Writers in one folder take
    turns; each holds the lock for the milliseconds of one write. Not reentrant.
    """
    folder = ensure_folder(path).parent
    if fcntl is None:  # pragma: no cover - Windows
        yield
        return
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
