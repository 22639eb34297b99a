"""Start child processes tied to this runtime: whatever ends the runtime ends them too.

Every process the runtime starts (code_run children, a launched browser, MCP servers) goes
through one call, with any ``subprocess.Popen`` keyword::

    proc = popen_tied(argv, stdout=subprocess.PIPE)
    ...
    end_group(proc)   # stop it: SIGTERM its whole session, SIGKILL after a grace
    release(proc)     # once it has ended: forget it (kept while any of its session lives)

How it works. A tied child leads a new session (a new process group on Windows), so it and
everything it starts are signalled at once: every process group of that session, so a job
that left the group (``set -m``, a shell's job control) is still found. One small watchdog
process per runtime reads a pipe that only the runtime writes to: the runtime announces
each tied session on it (a write of a few bytes, nothing on disk). The kernel closes the
pipe when the runtime exits — normally, on a signal, on SIGKILL, whichever thread started
the child — and the watchdog then ends every process of each session still announced
(SIGTERM, SIGKILL after ``TERM_GRACE_SECONDS``) and removes the runtime's private temp dir
(``runtime_dir()``) with the folders it owns elsewhere (``owned_dir()``: a short path for
a unix socket). A temp dir left by a runtime whose watchdog died too is swept when the next
run starts (``sweep_stale``); an owned folder, when the next one is made.

By design, not tied: a process that leaves its session (``setsid``, a daemonising server) —
that is how the model starts a service meant to outlive ``ga``. ``popen_detached`` starts
a process meant to outlive this one (``ga --bg``); when this process was itself started by
a runtime (``$GA_TIE_DIR``), the new group is tied to that runtime instead, so a subagent
never outlives the agent that launched it.

Limits: a child escapes if the runtime is SIGKILLed in the instant between starting it and
announcing it (microseconds). A process forked without exec (multiprocessing's "fork")
holds the pipe too, so the watchdog acts when the last of them is gone. The check that a
session id was not reused by another program reads ``/proc`` (Linux only); elsewhere a
session's processes are listed with ``ps``. Windows has no
process groups to signal: the watchdog ends each tied child's tree with ``taskkill /T``.

Run as a script (``python -I -S procs.py DIR``) this file is the watchdog.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: an open lock file cannot be deleted
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("ga.procs")

TIE_ENV = "GA_TIE_DIR"  # in a tied child's environment: its runtime's temp dir
DIR_PREFIX = "ga-run-"  # runtime temp dirs: <tmp>/ga-run-<pid>-<random>
LOCK_NAME = "lock"  # held (flock) by the runtime for its whole life
TIED_DIR = "tied"  # groups tied from other processes (ga --bg): name = id, text = start time
TERM_GRACE_SECONDS = 0.5  # SIGTERM, then SIGKILL this long after
GONE_POLL_SECONDS = 0.02  # the watchdog re-checks ended groups this often within the grace
STALE_GRACE_SECONDS = 5.0  # a runtime dir younger than this is never swept (being created)
OWNED_DIR = "owned"  # folders outside the runtime dir removed with it: one file each, its path
OWNER_FILE = ".ga-runtime"  # in such a folder: the runtime dir that owns it

_RUNTIMES: dict[int, _Runtime] = {}  # registry: this process's runtime, by pid (fork-safe)
_RUNTIMES_LOCK = threading.Lock()


def popen_tied(argv: list[str], **popen_kwargs: Any) -> subprocess.Popen:
    """Start ``argv`` as the leader of a new process group tied to this runtime.

    Takes any ``subprocess.Popen`` keyword except the ones that choose the group. The
    child's environment (``env``, default ours) gains ``$GA_TIE_DIR``.
    """
    runtime = _runtime()
    env = dict(os.environ if popen_kwargs.get("env") is None else popen_kwargs["env"])
    env[TIE_ENV] = str(runtime.dir)
    popen_kwargs["env"] = env
    proc = subprocess.Popen(argv, **popen_kwargs, **_new_group())
    runtime.register(proc.pid)
    return proc


def tie(pid: int) -> None:
    """Tie the session that process ``pid`` leads to this runtime, as ``popen_tied`` ties
    its child's (for a process another tied process started: a forked batch worker)."""
    _runtime().register(pid)


def popen_detached(argv: list[str], **popen_kwargs: Any) -> subprocess.Popen:
    """Start ``argv`` in a new session that outlives this process (``ga --bg``), unless this
    process was started by a runtime: then it is tied to that runtime."""
    proc = subprocess.Popen(argv, **popen_kwargs, **_new_group())
    outer = os.environ.get(TIE_ENV)
    if outer and Path(outer, TIED_DIR).is_dir():
        try:
            _register(Path(outer), proc.pid)
        except OSError as e:  # e.g. a sandboxed caller: it would outlive its runtime
            end_group(proc)
            raise OSError(e.errno, "it cannot be tied to the agent that started it (that "
                          f"agent's folder {outer} is not writable here)") from None
    return proc


def runtime_dir() -> Path:
    """This runtime's private temp dir, removed when the runtime ends, however it ends."""
    return _runtime().dir


def started_dir() -> Path | None:
    """``runtime_dir()`` when this process has one already, else None (nothing is started)."""
    runtime = _RUNTIMES.get(os.getpid())
    return runtime.dir if runtime is not None else None


def owned_dir(parent: Path, prefix: str) -> Path:
    """A new folder in ``parent``, outside ``runtime_dir()`` (for a path that must stay
    short, like a unix socket's), removed with the runtime however it ends: by its watchdog,
    or by a later ``sweep_owned``. Stale folders of ``prefix`` there are swept first."""
    runtime = _runtime()
    sweep_owned(parent, prefix)
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    (path / OWNER_FILE).write_text(str(runtime.dir), encoding="utf-8")
    (runtime.dir / OWNED_DIR / path.name).write_text(str(path), encoding="utf-8")
    return path


def sweep_owned(parent: Path, prefix: str) -> None:
    """Remove the ``owned_dir`` folders of ``prefix`` in ``parent`` whose runtime is gone."""
    now = time.time()
    for path in parent.glob(f"{prefix}*"):
        try:
            if now - path.stat().st_mtime < STALE_GRACE_SECONDS:
                continue
            owner = Path((path / OWNER_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:  # its runtime died before it could say whose it was
            owner = None
        except OSError:
            continue  # another user's, or just gone
        if owner is None or _lock_is_free(owner / LOCK_NAME):
            shutil.rmtree(path, ignore_errors=True)


def tied_groups() -> set[int]:
    """The sessions tied to this runtime now, by leader id (a finished one is kept while any
    process of it is left)."""
    runtime = _RUNTIMES.get(os.getpid())
    return set(runtime.groups) if runtime is not None else set()


def end_group(proc: subprocess.Popen, grace: float = TERM_GRACE_SECONDS,
              wait: Callable[[float], Any] | None = None) -> None:
    """SIGTERM every process group of ``proc``'s session; SIGKILL them after
    ``wait(grace)`` returns (default: waits for ``proc`` to exit, at most ``grace``
    seconds)."""
    if os.name == "nt":
        _kill_tree(proc.pid)
        return
    signal_session(proc.pid, signal.SIGTERM)
    (wait or (lambda seconds: _wait(proc, seconds)))(grace)
    signal_session(proc.pid, signal.SIGKILL)


def release(proc: subprocess.Popen) -> None:
    """Forget ``proc``'s session when no process is left in it (else it stays tied)."""
    runtime = _RUNTIMES.get(os.getpid())
    if runtime is not None:
        runtime.release(proc)


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to a process group; False when no process of it is left (or it is not
    ours any more)."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def session_groups(sids: set[int]) -> dict[int, set[int]]:
    """The process groups that have a process in each session of ``sids`` (by id)."""
    found: dict[int, set[int]] = {sid: set() for sid in sids}
    for pid in _pids() if found else []:
        try:
            sid = os.getsid(pid)
            if sid in found:
                found[sid].add(os.getpgid(pid))
        except OSError:  # gone meanwhile, or not ours to ask about
            continue
    return found


def signal_session(sid: int, sig: int) -> bool:
    """Send ``sig`` to every process group of session ``sid`` (the leader's group first);
    False when no process of it is left."""
    hit = signal_group(sid, sig)
    for pgid in session_groups({sid})[sid] - {sid}:
        hit = signal_group(pgid, sig) or hit
    return hit


def session_alive(sid: int) -> bool:
    return signal_group(sid, 0) or bool(session_groups({sid})[sid])


def _pids() -> list[int]:
    """Every process id on the system: from ``/proc``, else from ``ps``."""
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        pass
    try:
        listing = subprocess.run(["ps", "-A", "-o", "pid="], capture_output=True, text=True,
                                 check=False).stdout
    except OSError:
        return []
    return [int(word) for word in listing.split() if word.isdigit()]


def sweep_stale(tmp: Path | None = None) -> None:
    """Remove the temp dirs of runtimes that are gone (their lock is free), in ``tmp``
    (default: the temp dir). A run calls it at start; a runtime, when it is made."""
    tmp = Path(tempfile.gettempdir()) if tmp is None else tmp
    now = time.time()
    for path in tmp.glob(f"{DIR_PREFIX}*"):
        try:
            if now - path.stat().st_mtime < STALE_GRACE_SECONDS:
                continue
        except OSError:
            continue
        if _lock_is_free(path / LOCK_NAME):
            _remove_owned(path)
            shutil.rmtree(path, ignore_errors=True)


def _remove_owned(run_dir: Path) -> None:
    """Remove the folders a runtime dir owns outside itself (``owned_dir``)."""
    try:
        entries = list((run_dir / OWNED_DIR).iterdir())
    except OSError:
        return
    for entry in entries:
        try:
            path = Path(entry.read_text(encoding="utf-8"))
            owner = (path / OWNER_FILE).read_text(encoding="utf-8")
        except OSError:
            continue  # already removed with its browser
        if owner == str(run_dir):
            shutil.rmtree(path, ignore_errors=True)


# ---- the runtime -------------------------------------------------------------------------
class _Runtime:
    """This process's temp dir (held by a lock), its tied groups and its watchdog."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        tmp = Path(tempfile.gettempdir())
        sweep_stale(tmp)
        self.dir = Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{self.pid}-", dir=tmp))
        self._lock_fd = _hold_lock(self.dir / LOCK_NAME)
        (self.dir / TIED_DIR).mkdir()
        (self.dir / OWNED_DIR).mkdir()
        self.groups: set[int] = set()
        self.watchdog: subprocess.Popen | None = None

    def ensure_watchdog(self) -> None:
        """Start the watchdog, again if it died (telling the new one every tied group)."""
        if self.watchdog is not None and self.watchdog.poll() is None:
            return
        try:
            self.watchdog = subprocess.Popen(
                [sys.executable, "-I", "-S", str(Path(__file__).absolute()), str(self.dir)],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                **_new_group())
        except OSError as e:
            log.warning("cannot start the process watchdog (%s): if ga is killed, the "
                        "processes it started may keep running", e)
            return
        self._send("".join(f"+{pgid}\n" for pgid in list(self.groups)))

    def register(self, pgid: int) -> None:
        if os.name != "nt":
            quiet = {g for g in list(self.groups) if not signal_group(g, 0)}
            for sid, groups in session_groups(quiet).items():
                if not groups:
                    self._forget(sid)
        self.groups.add(pgid)
        self._send(f"+{pgid}\n")

    def release(self, proc: subprocess.Popen) -> None:
        # Windows cannot ask about a group: a tree is forgotten once its leader has exited.
        gone = proc.poll() is not None if os.name == "nt" else not session_alive(proc.pid)
        if gone:
            self._forget(proc.pid)

    def _forget(self, pgid: int) -> None:
        self.groups.discard(pgid)
        self._send(f"-{pgid}\n")

    def _send(self, text: str) -> None:
        if not text or self.watchdog is None:
            return
        try:
            os.write(self.watchdog.stdin.fileno(), text.encode("ascii"))
        except OSError:
            pass  # the watchdog died: the next popen_tied starts one and tells it everything


def _runtime() -> _Runtime:
    with _RUNTIMES_LOCK:
        runtime = _RUNTIMES.get(os.getpid())
        if runtime is None:
            _RUNTIMES.clear()  # a forked child starts its own runtime
            runtime = _RUNTIMES[os.getpid()] = _Runtime()
        runtime.ensure_watchdog()
        return runtime


def _new_group() -> dict:
    if os.name == "nt":
        return {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}
    return {"start_new_session": True}


def _register(run_dir: Path, pgid: int) -> None:
    (run_dir / TIED_DIR / str(pgid)).write_text(_start_time(pgid), encoding="ascii")


def _start_time(pid: int) -> str:
    """The process's start time on Linux (tells a reused pid apart), else ""."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def _wait(proc: subprocess.Popen, seconds: float) -> None:
    try:
        proc.wait(seconds)
    except subprocess.TimeoutExpired:
        pass  # still running: the caller kills it


def _kill_tree(pid: int) -> None:
    subprocess.run(["taskkill", "/F", "/T", "/PID", str(pid)], capture_output=True, check=False)


def _hold_lock(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX)
    return fd  # never closed: the lock ends with the process


def _lock_is_free(path: Path) -> bool:
    if fcntl is None:  # Windows: the owner holds the file open, so it cannot be deleted
        try:
            path.unlink(missing_ok=True)
        except OSError:
            return False
        return True
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return True  # its owner died before taking the lock
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


# ---- the watchdog ------------------------------------------------------------------------
def end_tied_groups(groups: dict[int, str], grace: float = TERM_GRACE_SECONDS) -> None:
    """End the sessions ``{id: leader start time}``, every process group of each: SIGTERM,
    SIGKILL after ``grace``. A session whose id now names a process started at another time
    (a reused pid) is spared."""
    alive = []
    for pgid, started in groups.items():
        now = _start_time(pgid)
        if not (started and now and now != started):
            alive.append(pgid)
    if os.name == "nt":
        for pid in alive:
            _kill_tree(pid)
        return
    live = [g for g in alive if signal_session(g, signal.SIGTERM)]
    deadline = time.monotonic() + grace
    while live and time.monotonic() < deadline:
        time.sleep(GONE_POLL_SECONDS)
        live = [g for g in live if session_alive(g)]
    for sid in live:
        signal_session(sid, signal.SIGKILL)


def _registered_files(run_dir: Path) -> dict[int, str]:
    groups = {}
    try:
        entries = [p for p in (run_dir / TIED_DIR).iterdir() if p.name.isdigit()]
    except OSError:
        return {}
    for entry in entries:
        try:
            groups[int(entry.name)] = entry.read_text(encoding="ascii").strip()
        except OSError:
            continue
    return groups


def _watch(run_dir: Path) -> None:
    """Follow the runtime's announcements until it is gone (EOF), then clean up."""
    groups: dict[int, str] = {}
    pending = b""
    try:
        while chunk := os.read(0, 4096):
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                if not line[1:].isdigit():
                    continue  # not an announcement: nothing to act on
                if line.startswith(b"+"):
                    groups[int(line[1:])] = _start_time(int(line[1:]))
                else:
                    groups.pop(int(line[1:]), None)
    except OSError:
        pass  # a broken pipe ends the runtime's life just the same
    end_tied_groups({**_registered_files(run_dir), **groups})
    _remove_owned(run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    _watch(Path(sys.argv[1]))
