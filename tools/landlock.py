"""Landlock (Linux >= 5.13): confine a process, and all it starts, to writing only below some
folders; optionally deny it TCP and keep its signals inside its own tree.

Standard library only, because it is also the first thing a confined child runs:
``main([--write DIR]... [--no-net] -- ARGV...)`` confines the process and then executes
ARGV; ``main([... --python SCRIPT ARGS...])`` runs SCRIPT in this very interpreter (a
Python child costs no second start-up). ``tools.sandbox`` builds these command lines.

The process also gives up its capabilities (as ``bwrap --cap-drop ALL`` does): a confined
root could otherwise still reboot, load kernel modules or reconfigure the network.

What is confined: creating, writing, truncating, renaming and removing files, folders,
links, FIFOs, sockets and devices, outside the ``--write`` folders (and writing to a few
harmless devices: ``/dev/null`` …). Reading and executing are not confined. Signals
(ABI 6): the process cannot signal, nor connect to an abstract unix socket of, a process
outside the tree that starts here. ``--no-net`` (ABI 4): no TCP bind or connect.
"""

from __future__ import annotations

import ctypes
import os
import sys

SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446  # every architecture
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
CAP_VERSION_3 = 0x20080522
FS_WRITE_FILE = 1 << 1
FS_TRUNCATE = 1 << 14  # ABI 3
FS_WRITES = {  # the write rights each ABI knows, beyond the one before
    1: sum(1 << bit for bit in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12)),  # write, remove, make *
    2: 1 << 13,  # REFER: rename and link across folders
    3: FS_TRUNCATE,
}
NET_TCP = (1 << 0) | (1 << 1)  # bind, connect (ABI 4)
SCOPE_ABSTRACT_UNIX = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6
NET_ABI = 4
SCOPE_ABI = 6
WRITABLE_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64),
                ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def abi(libc: ctypes.CDLL | None = None) -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is missing or turned off."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        version = (libc or _libc()).syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0),
                                            ctypes.c_uint32(CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"landlock {what}: {os.strerror(err)}")
    return result


def restrict(writable: list[str], network: bool = True, version: int | None = None) -> None:
    """Confine this thread, and every process it starts from now on, as the module says.
    Folders in ``writable`` that do not exist are skipped. Raises OSError."""
    libc = _libc()
    version = abi(libc) if version is None else version
    if version < 1:
        raise OSError("Landlock is not available in this kernel")
    writes = sum(bits for level, bits in FS_WRITES.items() if level <= version)
    attr = _RulesetAttr(writes, 0, 0)
    if not network and version >= NET_ABI:
        attr.handled_access_net = NET_TCP
    if version >= SCOPE_ABI:
        attr.scoped = SCOPE_SIGNAL | (0 if network else SCOPE_ABSTRACT_UNIX)
    ruleset = _check(libc.syscall(SYS_CREATE_RULESET, ctypes.byref(attr),
                                  ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0)),
                     "create_ruleset")
    try:
        file_writes = writes & (FS_WRITE_FILE | FS_TRUNCATE)
        for path in writable:
            _allow(libc, ruleset, path, writes)
        for path in WRITABLE_DEVICES:
            _allow(libc, ruleset, path, file_writes)
        _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        _check(libc.syscall(SYS_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)), "restrict_self")
    finally:
        os.close(ruleset)
    drop_capabilities(libc)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def drop_capabilities(libc: ctypes.CDLL) -> None:
    """Give up every capability, for good: ambient, effective, permitted and inheritable
    emptied, and no_new_privs (set before) lets no exec bring one back; a process that has
    none (any user but root) loses nothing."""
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    data = (_CapData * 2)()  # all zero: nothing effective, permitted or inheritable
    _check(libc.capset(ctypes.byref(_CapHeader(CAP_VERSION_3, 0)), data), "capset")


def _allow(libc: ctypes.CDLL, ruleset: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # not there (yet): nothing to allow
    try:
        rule = _PathBeneath(access, fd)
        _check(libc.syscall(SYS_ADD_RULE, ruleset, RULE_PATH_BENEATH, ctypes.byref(rule),
                            ctypes.c_uint32(0)), f"add_rule {path}")
    finally:
        os.close(fd)


def _parse(argv: list[str]) -> tuple[list[str], bool, list[str], bool]:
    """(writable folders, network, the command, whether it is a Python script to run here)."""
    writable: list[str] = []
    network = True
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--write":
            writable.append(argv[i + 1])
            i += 2
        elif arg == "--no-net":
            network = False
            i += 1
        elif arg in ("--", "--python"):
            return writable, network, argv[i + 1:], arg == "--python"
        else:
            raise SystemExit(f"landlock.py: unknown argument {arg!r}")
    raise SystemExit("landlock.py: no command given")


def _run_python(argv: list[str]) -> None:
    """Run the script ``argv[0]`` as ``__main__`` in this interpreter, as ``python SCRIPT``
    would (its traceback without this file's frame). The caller's ``__main__`` (``python
    -c``) is emptied for it."""
    import builtins

    path = argv[0]
    sys.argv = list(argv)
    _start_like_python(path)
    with open(path, "rb") as f:
        code = compile(f.read(), path, "exec")
    scope = sys.modules["__main__"].__dict__
    scope.clear()
    scope.update(__name__="__main__", __file__=path, __builtins__=builtins, __doc__=None,
                 __package__=None, __spec__=None, __loader__=None, __cached__=None)
    try:
        exec(code, scope)
    except Exception as e:  # the script's own error: shown as python SCRIPT shows it
        import traceback

        traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        sys.exit(1)


def _start_like_python(script: str) -> None:
    """What ``python SCRIPT`` does at start-up that the isolated wrapper (``-I -S``) left
    undone, now that the process is confined: the script's folder and ``$PYTHONPATH``
    first on the import path, then ``site`` (site-packages, user site, ``.pth`` files,
    ``sitecustomize``). Other ``PYTHON*`` variables stay unread here (not in its children)."""
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[0:0] = [os.path.dirname(os.path.abspath(script)), *extra]
    import site

    if os.environ.get("PYTHONNOUSERSITE"):
        site.ENABLE_USER_SITE = False
    elif os.geteuid() == os.getuid() and os.getegid() == os.getgid():
        site.ENABLE_USER_SITE = True  # as site decides without -I (which turned it off)
    site.main()


def main(argv: list[str]) -> None:
    writable, network, command, python = _parse(argv)
    try:
        restrict(writable, network)
    except OSError as e:
        sys.stderr.write(f"ga sandbox: cannot confine the command: {e}\n")
        sys.exit(126)
    if python:
        _run_python(command)
        return
    try:
        os.execvp(command[0], command)
    except OSError as e:
        sys.stderr.write(f"ga sandbox: cannot run {command[0]}: {e.strerror}\n")
        sys.exit(127)
