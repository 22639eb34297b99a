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

A path is resolved once: the folder that holds its real target is opened (a ``Target``),
the caller's ``check`` (the sandbox's rule) looks at that open folder's real path, and the
temp file, the rename and every read are made relative to it. A folder swapped for a
symlink after that changes nothing: the write lands where it was checked.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from tools import ToolError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no F_GETPATH either
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
DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
DIR_FDS = os.open in os.supports_dir_fd and os.rename in os.supports_dir_fd  # not on Windows
PATH_BUFFER_BYTES = 1024  # macOS's MAXPATHLEN: what fcntl F_GETPATH fills
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


def open_regular(path: str | Path, dir_fd: int | None = None) -> BinaryIO:
    """Open an existing regular file for binary reading, without ever blocking (``dir_fd``:
    ``path`` is a name in that open folder).

    FIFOs, devices and sockets are refused before they are opened, and again on the open
    descriptor (non-blocking), so a swap between the check and the open cannot slip through.
    """
    mode = os.stat(path, dir_fd=dir_fd).st_mode
    if not stat.S_ISREG(mode):
        raise _not_regular(path, mode)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ENXIO:  # a socket (or a FIFO without a writer) swapped in
            raise _not_regular(path, stat.S_IFSOCK) from e
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _not_regular(path, mode)
    return os.fdopen(fd, "rb")


def folder_path(fd: int) -> str | None:
    """The real path of an open folder now (Linux, macOS); None where it cannot be asked."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
    getpath = getattr(fcntl, "F_GETPATH", None)
    if getpath is None:
        return None
    raw = fcntl.fcntl(fd, getpath, bytes(PATH_BUFFER_BYTES))
    return os.fsdecode(raw.split(b"\0", 1)[0])


@dataclass
class Target:
    """Where a write to ``path`` lands: the folder that holds its real target, open, and the
    file's name in it. Reads and writes go through the open folder (``fd``), never through
    the path again. Where ``dir_fd`` is missing (Windows), ``fd`` is None and names are
    joined to ``folder``."""

    path: Path  # as the caller named it (for messages)
    folder: Path  # the folder's real path when it was opened
    name: str
    fd: int | None

    def at(self, name: str | None = None) -> str:
        """``name`` (default: the file's) as the os functions take it with ``dir_fd=fd``."""
        name = self.name if name is None else name
        return name if self.fd is not None else str(self.folder / name)

    def real(self) -> Path:
        """The file's real path now, found from the open folder."""
        found = folder_path(self.fd) if self.fd is not None else None
        return Path(found or os.path.realpath(self.folder)) / self.name

    def stat(self) -> os.stat_result | None:
        """The file's stat, None when it does not exist (a symlink is not followed)."""
        try:
            return os.stat(self.at(), dir_fd=self.fd, follow_symlinks=self.fd is None)
        except FileNotFoundError:
            return None

    def read(self, limit: int = -1) -> bytes:
        """The file's bytes (the first ``limit`` of them when given); b"" when it is new."""
        try:
            f = open_regular(self.at(), self.fd)
        except FileNotFoundError:
            return b""
        with f:
            return f.read(limit)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def open_target(path: str | Path, check: Callable[[Path], None] | None = None) -> Target:
    """Open the folder that holds the real target of ``path``, once it exists.

    Only folders named in ``path`` itself are created, under its nearest existing folder,
    and only once ``check`` (given the real path the file would have) did not raise: a
    dangling symlink (the file's or a folder's) is never followed into folders that do not
    exist, and a file standing where a folder should be is named in the error.
    """
    target = Path(os.path.realpath(path))
    if target.parent.is_dir():
        return Target(Path(path), target.parent, target.name, _open_dir(target.parent))
    _refuse_missing_folder(path, target)
    existing, missing = target.parent, []
    while not existing.is_dir():
        missing.insert(0, existing.name)
        existing = existing.parent
    if not DIR_FDS:  # pragma: no cover - Windows
        if check is not None:
            check(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        return Target(Path(path), target.parent, target.name, None)
    fd = _open_dir(existing)
    try:
        if check is not None:
            check(Path(folder_path(fd) or existing).joinpath(*missing, target.name))
        for name in missing:
            child = _make_dir(fd, name)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return Target(Path(path), target.parent, target.name, fd)


def _open_dir(folder: Path) -> int | None:
    return os.open(folder, DIR_FLAGS) if DIR_FDS else None


def _make_dir(parent: int, name: str) -> int:
    """Make folder ``name`` in the open folder ``parent``, and open it (never a symlink)."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, dir_fd=parent)
    return os.open(name, DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent)


def _refuse_missing_folder(path: str | Path, target: Path) -> None:
    """Refuse to make the missing folders of ``path`` behind a dangling symlink or a file."""
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


def _writable_target(at: Target) -> os.stat_result | None:
    """The target's stat when it exists (None when new); refuses what must not be replaced."""
    st = at.stat()
    if st is None:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(at.path, st.st_mode)
    if not st.st_mode & WRITE_BITS or not os.access(at.at(), os.W_OK, dir_fd=at.fd):
        target = at.folder / at.name
        shown = f"{at.path} (a link to {target})" if os.path.islink(at.path) else str(at.path)
        raise ReadOnlyFileError(
            f"{shown} is read-only (mode {stat.S_IMODE(st.st_mode):o}); nothing was written. "
            "Leave it alone, or make it writable first (chmod u+w) if it is meant to change.")
    return st


def _create_temp(at: Target, mode: int | None = None) -> tuple[int, str]:
    """A new empty file beside the target, created ``NEW_FILE_MODE`` so the umask applies,
    or with exactly ``mode`` (the umask can only have taken bits away before the chmod)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(TEMP_NAME_TRIES):
        name = f".{at.name[:TEMP_NAME_CHARS]}.{secrets.token_hex(4)}{TEMP_SUFFIX}"
        try:
            fd = os.open(at.at(name), flags, NEW_FILE_MODE if mode is None else mode,
                         dir_fd=at.fd)
        except FileExistsError:
            continue
        if mode is not None and hasattr(os, "fchmod"):
            os.fchmod(fd, mode)
        return fd, name
    raise FileExistsError(errno.EEXIST, "no free temp file name beside", str(at.path))


def atomic_write(path: str | Path, data: str | bytes, encoding: str = "utf-8",
                 keep: str = "", mode: int | None = None, *, at: Target | None = None,
                 check: Callable[[Path], None] | None = None) -> None:
    """Write ``data`` to ``path`` via a temp file beside its real target and ``os.replace``;
    ``keep="before"`` puts the file's old content before ``data`` (an append), ``"after"``
    after it (a prepend), copied in chunks: bounded memory for any file size.

    Missing folders are created as ``open_target`` allows. A crash leaves either the old
    file or the new one. Symlinks, permission bits, the umask, read-only files and hard
    links follow the module's rules. ``mode`` (``0o600`` for a file holding keys) gives the
    file exactly those bits from the moment its temp file exists, whatever the umask or the
    old file's bits; such a file is never rewritten in place (that would keep the old bits).
    ``at``: the target ``file_lock`` holds (nothing is resolved again); else ``check`` is
    given the real path of the open target before anything is written (it raises to refuse).
    """
    raw = data.encode(encoding) if isinstance(data, str) else data
    if at is not None:
        _write(at, raw, keep, mode)
        return
    target = open_target(path, check)
    try:
        if check is not None:
            check(target.real())
        _write(target, raw, keep, mode)
    finally:
        target.close()


def _write(at: Target, raw: bytes, keep: str, mode: int | None) -> None:
    old = _writable_target(at)
    try:
        _replace(at, raw, old, keep, mode)
    except OSError as e:
        if old is not None and e.errno in IN_PLACE_ERRNOS and mode is None:
            _write_in_place(at, raw, keep)
        elif e.filename is not None and not isinstance(e, ToolError):
            raise OSError(e.errno, e.strerror, str(at.path)) from None  # not the temp file's
        else:
            raise


def _replace(at: Target, raw: bytes, old: os.stat_result | None, keep: str,
             mode: int | None) -> None:
    fd, tmp = _create_temp(at, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            if keep == "before" and old is not None:
                _copy_content(at, f)
            f.write(raw)
            if keep == "after" and old is not None:
                _copy_content(at, f)
            f.flush()
            os.fsync(f.fileno())
            if old is not None:
                _keep_mode_and_owner(f.fileno(), old, mode)
        os.replace(at.at(tmp), at.at(), src_dir_fd=at.fd, dst_dir_fd=at.fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(at.at(tmp), dir_fd=at.fd)
        raise


def _copy_content(at: Target, out: BinaryIO) -> None:
    with open_regular(at.at(), at.fd) as f:
        shutil.copyfileobj(f, out, COPY_CHUNK_BYTES)


def _write_in_place(at: Target, raw: bytes, keep: str = "") -> None:
    """Change the target's content in its own inode (not atomic: the one way to change a
    file that is a mount point)."""
    with open(at.at(), "r+b", opener=lambda name, flags: os.open(name, flags, dir_fd=at.fd)) as f:
        if keep == "before":
            f.seek(0, os.SEEK_END)
        elif keep == "after":
            raw += f.read()
            f.seek(0)
        f.write(raw)
        f.truncate()
        f.flush()
        os.fsync(f.fileno())


def _keep_mode_and_owner(fd: int, old: os.stat_result, mode: int | None = None) -> None:
    # Only root may give a file away; anyone else's rewrite is owned by them, as with any
    # editor that saves by rename. Owner first: chown clears set-id bits, chmod sets them.
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        os.fchown(fd, old.st_uid, old.st_gid)
    if hasattr(os, "fchmod"):
        os.fchmod(fd, stat.S_IMODE(old.st_mode) if mode is None else mode)


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
