"""Worker processes of ``ga batch``'s local pool, forked from one warm process (SPEC §14).

A worker needs the runtime imported before its first task: ≈ 1 s of CPU, most of it the
provider SDKs. Four workers on two cores spent their first two seconds on that alone. So the
pool starts one *forker*: a process tied to the runtime that imports the runtime once, runs
no thread, and forks a worker whenever the driver asks — a worker is ready in milliseconds.

The driver makes a worker's two pipes and sends the worker's ends over a Unix socket (the
forker's stdin); the forker forks, and the child makes them its stdin and stdout, leads a
new session and runs the worker's entry point (``batch_pool.worker_main``). The forker
answers with the child's pid and, when the child exits, with its exit status. The driver
ties each worker's session to its runtime, so a forked worker ends with the driver as a
``popen_tied`` one does. Elsewhere than on Linux (Windows cannot fork; on macOS a child
forked after the system's TLS frameworks were loaded may crash), or when the forker cannot
be started, every worker is a ``popen_tied`` process of its own.
"""

from __future__ import annotations

import gc
import importlib
import json
import logging
import os
import queue
import select
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any, Callable

from tools.procs import popen_tied, tie

log = logging.getLogger("ga.batch")

ROOT = Path(__file__).resolve().parent.parent  # the runtime's own code, for the workers
FORK_SECONDS = 30.0  # the forker answers a fork within this (its imports come first)
CAN_FORK = sys.platform == "linux" and hasattr(socket, "send_fds")
ORPHAN_POLL_SECONDS = 0.1  # without pidfds: how often an orphaned worker is looked for
LOST = -256  # a worker's exit status when its forker died first (not a signal number)


class Forked:
    """A worker forked by the forker, as the pool uses a ``subprocess.Popen``: its pid, its
    pipes, and its exit status once the forker reports it (``LOST`` if the forker died: the
    worker then runs on, and its end is seen through a pidfd)."""

    def __init__(self, pid: int, stdin: IO[bytes], stdout: IO[bytes]) -> None:
        self.pid = pid
        self.args = f"batch worker {pid}"
        self.stdin = stdin
        self.stdout = stdout
        self.returncode: int | None = None
        self._ended = threading.Event()

    def ended(self, code: int) -> None:
        self.returncode = code
        self._ended.set()

    def orphaned(self) -> None:
        """Its forker is gone: it ends ``LOST`` when the process does."""
        try:
            pidfd = os.pidfd_open(self.pid)
        except ProcessLookupError:
            self.ended(LOST)
            return
        except OSError:  # Linux < 5.3: asked every ORPHAN_POLL_SECONDS
            pidfd = None

        def watch() -> None:
            if pidfd is None:
                while _exists(self.pid):
                    time.sleep(ORPHAN_POLL_SECONDS)
            else:
                with os.fdopen(pidfd, "rb", buffering=0):
                    select.select([pidfd], [], [])  # readable once the process has exited
            self.ended(LOST)

        threading.Thread(target=watch, name="ga-batch-orphan", daemon=True).start()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode  # type: ignore[return-value]


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


class Forker:
    """One forker process and what it reports: ``pid N`` after a fork, ``exit N CODE`` when
    one of its workers ends."""

    def __init__(self, entry: str, preload: list[str], log_file: IO[bytes]) -> None:
        ours, theirs = socket.socketpair()
        code = ("import sys; sys.path[0] = sys.argv[1]; "
                "from frontends.batch_fork import forker_main; sys.exit(forker_main())")
        try:
            self.proc = popen_tied([sys.executable, "-c", code, str(ROOT), entry,
                                    json.dumps(preload)],
                                   stdin=theirs, stdout=log_file, stderr=log_file)
        finally:
            theirs.close()
        self.sock = ours
        self.pids: queue.Queue = queue.Queue()
        self.children: dict[int, Forked] = {}
        self.exits: dict[int, int] = {}  # reported before the driver knew the pid
        self.lost = False
        self.lock = threading.Lock()
        threading.Thread(target=self._read, name="ga-batch-forker", daemon=True).start()

    def alive(self) -> bool:
        return not self.lost and self.proc.poll() is None

    def fork(self) -> Forked:
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        try:
            socket.send_fds(self.sock, [b"f"], [in_r, out_w])
            pid = self.pids.get(timeout=FORK_SECONDS)
        except (queue.Empty, OSError) as e:
            pid = None
            why = str(e) or "no answer"
        else:
            why = "it ended"
        finally:
            os.close(in_r)
            os.close(out_w)
        if pid is None:
            for fd in (in_w, out_r):
                os.close(fd)
            raise OSError(f"the forker did not fork ({why})")
        tie(pid)
        child = Forked(pid, os.fdopen(in_w, "wb"), os.fdopen(out_r, "rb"))
        with self.lock:
            if pid in self.exits:
                child.ended(self.exits.pop(pid))
            elif not self.lost:
                self.children[pid] = child
            else:
                child.orphaned()
        return child

    def _read(self) -> None:
        try:
            with self.sock.makefile("rb") as reports:
                for line in reports:
                    kind, *numbers = line.split()
                    if kind == b"pid":
                        self.pids.put(int(numbers[0]))
                    elif kind == b"exit":
                        self._ended(int(numbers[0]), int(numbers[1]))
        except OSError:
            pass  # reset: the forker died with a request unread
        with self.lock:  # its workers run on; only their exit statuses are lost
            self.lost = True
            orphans, self.children = self.children, {}
        self.pids.put(None)
        for child in orphans.values():
            child.orphaned()

    def _ended(self, pid: int, code: int) -> None:
        with self.lock:
            child = self.children.pop(pid, None)
            if child is None:
                self.exits[pid] = code
        if child is not None:
            child.ended(code)

    def close(self) -> None:
        """It ends at the end of its input (its workers are the pool's to end)."""
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # already gone
        try:
            self.proc.wait(FORK_SECONDS)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.sock.close()


class Starter:
    """Starts the pool's worker processes: forked when it can, else spawned. A worker runs
    ``entry`` (``"module:function"``, returning its exit code) after importing ``preload``.
    A forker that died is replaced at the next start."""

    def __init__(self, entry: str, preload: list[str], log_file: IO[bytes]) -> None:
        self.entry = entry
        self.preload = preload
        self.log_file = log_file
        self.forkers: list[Forker] = []  # the last one forks
        self.use_fork = CAN_FORK

    @property
    def forker(self) -> subprocess.Popen | None:
        return self.forkers[-1].proc if self.forkers else None

    def start(self) -> Any:
        if self.use_fork:
            try:
                return self._fork()
            except OSError as e:
                log.warning("cannot fork batch workers from a warm process (%s): each worker "
                            "starts on its own", e)
                self.use_fork = False
        return spawn(self.entry, self.log_file)

    def _fork(self) -> Forked:
        if self.forkers and self.forkers[-1].alive():
            try:
                return self.forkers[-1].fork()
            except OSError:
                if self.forkers[-1].alive():
                    raise
        self.forkers.append(Forker(self.entry, self.preload, self.log_file))  # a first or
        return self.forkers[-1].fork()  # a new one, for one that died

    def close(self) -> None:
        for forker in self.forkers:
            forker.close()


def spawn(entry: str, log_file: IO[bytes]) -> subprocess.Popen:
    """A worker as a process of its own (it imports the runtime itself)."""
    code = ("import sys; sys.path[0] = sys.argv[1]; "
            "from frontends.batch_fork import entry_point; sys.exit(entry_point(sys.argv[2])())")
    return popen_tied([sys.executable, "-c", code, str(ROOT), entry], stdin=subprocess.PIPE,
                      stdout=subprocess.PIPE, stderr=log_file)


def entry_point(entry: str) -> Callable[[], int]:
    module, _, name = entry.partition(":")
    return getattr(importlib.import_module(module), name)


# ---- the forker's side -----------------------------------------------------------------
def forker_main() -> int:
    """Import the runtime, then fork a worker for each pair of pipe ends that arrives on
    stdin (a Unix socket) and report its pid and exit status, until the input ends. In a
    forked child this returns that worker's exit code."""
    gc.disable()  # as the gc module advises before fork: no holes in the pages workers share
    sock = socket.socket(fileno=os.dup(0))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    main = entry_point(sys.argv[2])
    for name in json.loads(sys.argv[3]):
        importlib.import_module(name)
    from .batch_task import warm

    warm()
    gc.freeze()  # the runtime's objects: never scanned by a worker's collections (nor at its
    # exit, ≈ 0.7 s that touched every shared page), so they stay shared
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # a C handler: wakes the select
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ)
        selector.register(wake_r, selectors.EVENT_READ)
        while True:
            for key, _ in selector.select():
                if key.fileobj is not sock:
                    os.read(wake_r, 512)
                    continue
                message, fds, _, _ = socket.recv_fds(sock, 16, 2)
                if not message:
                    return 0  # the driver closed the pool (or is gone)
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    for fd in (wake_r, wake_w):
                        os.close(fd)
                    return _worker(sock, fds, main)
                for fd in fds:
                    os.close(fd)
                _tell(sock, b"pid %d\n" % pid)
            _reap(sock)


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _tell(sock, b"exit %d %d\n" % (pid, os.waitstatus_to_exitcode(status)))


def _tell(sock: socket.socket, report: bytes) -> None:
    try:
        sock.sendall(report)
    except OSError:
        pass  # the driver is gone: the input ends next, and the forker with it


def _worker(sock: socket.socket, fds: list[int], main: Callable[[], int]) -> int:
    """In the forked child: the pipes become stdin and stdout, a session of its own."""
    gc.enable()
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    sock.close()
    os.setsid()
    os.dup2(fds[0], 0)
    os.dup2(fds[1], 1)
    for fd in fds:
        os.close(fd)
    return main()
