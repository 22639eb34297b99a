"""The local pool of ``ga batch`` (SPEC §14): worker processes, one task each at a time.

Each worker is a Python process that has the runtime imported (forked from one warm process,
``batch_fork``) and runs the tasks the driver sends it, one after another
(``batch_task.run_task``). It talks to the driver in JSON lines: tasks, request grants and
aborts on its stdin; ``started``, ``usage``, ``request`` and ``result`` on its stdout (the
protocol keeps the original fd 1; prints and children write elsewhere). A worker leads its
own session, tied to the driver's runtime (``tools.procs``): whatever ends the driver,
SIGKILL included, ends the workers and what they started, and Ctrl-C on a terminal reaches
only the driver, which aborts the tasks.

A worker that dies costs the task it ran (``failed``) and is replaced. Every model request a
task makes first asks the driver (``--rpm``): one ``RequestCap`` serves the whole batch.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Any, Callable

from tools.procs import end_group, release

from .batch_fork import LOST, Starter

RPM_WINDOW_SECONDS = 60.0  # --rpm counts the requests started in any window this long
WORKER_EXIT_SECONDS = 2.0  # a closed worker ends within this, else it is ended
PRELOAD = ("ga", "frontends.cli", "frontends.runner", "frontends.journal", "frontends.console",
           "frontends.batch_task", "frontends.approve", "frontends.plugins", "llmcore.session",
           "memory.archive", "tools.mcp", "tools.landlock",
           "yaml")  # imported once, before any task (in the forker: once for every worker)
LEFTOVER_THREADS = ("ga-inline-eval",)  # code a task left running: its worker is not reused


class RequestCap:
    """At most ``rpm`` requests started in any ``window`` seconds. ``take()`` grants one
    now (0.0) or says how long until one may start."""

    def __init__(self, rpm: int, window: float = RPM_WINDOW_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rpm = rpm
        self.window = window
        self.clock = clock
        self.starts: collections.deque[float] = collections.deque()
        self.count = 0

    def take(self) -> float:
        now = self.clock()
        while self.starts and self.starts[0] <= now - self.window:
            self.starts.popleft()
        if len(self.starts) < self.rpm:
            self.starts.append(now)
            self.count += 1
            return 0.0
        return self.starts[0] + self.window - now

    def granted(self) -> int:
        """How many requests were let start so far."""
        return self.count


# ---- the driver's side -----------------------------------------------------------------
class Worker:
    """One worker process (``batch_fork``: forked, or spawned) and the task it runs
    (``spec``, None when idle)."""

    def __init__(self, proc: Any, inbox: queue.Queue, hello: dict) -> None:
        self.proc = proc
        self.spec: dict | None = None
        self.send(hello)
        threading.Thread(target=self._read, args=(inbox,), name="ga-batch-reader",
                         daemon=True).start()

    def _read(self, inbox: queue.Queue) -> None:
        for line in self.proc.stdout:
            try:
                inbox.put((self, json.loads(line)))
            except json.JSONDecodeError:  # not the protocol: the worker is broken
                break
        inbox.put((self, None))

    def send(self, message: dict) -> None:
        try:
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:
            pass  # the worker is gone: its reader reports that

    def send_eof(self) -> None:
        """The end of its input: an idle worker exits."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass  # already gone

    def gone(self) -> str:
        """How the worker process ended (ended now, if it broke the protocol), for the task
        it was running."""
        _wait_until(self.proc, time.monotonic() + WORKER_EXIT_SECONDS)
        if self.proc.poll() is None:
            end_group(self.proc)
        code = self.proc.wait()
        release(self.proc)
        if code == LOST:
            how = "ended (its exit status was lost: the process that forked it died)"
        elif code < 0:
            how = f"was killed by {signal.Signals(-code).name}"
        else:
            how = f"exited with code {code}"
        return f"its worker process {how} before the task ended (see the batch log)"


class LocalPool:
    """``workers`` worker processes; ``wait`` turns their messages into batch events."""

    def __init__(self, common: dict, workers: int, rpm: int | None, log_path: Path) -> None:
        self.capacity = workers
        self.hello = {"type": "hello", "common": common, "rpm": bool(rpm)}
        self.cap = RequestCap(rpm, RPM_WINDOW_SECONDS) if rpm else None
        self.inbox: queue.Queue = queue.Queue()
        self.log = open(log_path, "ab")  # noqa: SIM115 (the workers' stderr, while they run)
        self.starter = Starter(f"{__name__}:worker_main", [*PRELOAD, *common.get("preload", ())],
                               self.log)
        self.workers = [self._new() for _ in range(workers)]
        self.retired: list[Worker] = []  # replaced, ending on their own
        self.waiting: collections.deque[tuple[Worker, int]] = collections.deque()
        self.next_grant = 0.0
        self.closing = False

    def _new(self) -> Worker:
        return Worker(self.starter.start(), self.inbox, self.hello)

    def _replace(self, worker: Worker) -> None:
        self.workers.remove(worker)
        if not self.closing:
            self.workers.append(self._new())

    def submit(self, spec: dict) -> None:
        worker = next(w for w in self.workers if w.spec is None)
        worker.spec = spec
        worker.send({"type": "task", "spec": spec})

    def wait(self, timeout: float) -> list[tuple[str, Any, Any]]:
        """The events that arrived within ``timeout`` seconds: ``(kind, id, data)``."""
        if self.waiting:
            timeout = max(0.0, min(timeout, self.next_grant - time.monotonic()))
        events: list = []
        try:
            item = self.inbox.get(timeout=timeout)
            while True:
                self._handle(*item, events)
                item = self.inbox.get_nowait()
        except queue.Empty:
            pass
        self._grant(events)
        return events

    def _handle(self, worker: Worker, message: dict | None, events: list) -> None:
        spec = worker.spec
        if message is None:
            gone = worker.gone()
            if spec is not None:
                events.append(("lost", spec["id"], ("failed", gone)))
            if worker in self.workers:  # else: retired, already replaced
                self._replace(worker)
            return
        kind = message.get("type")
        if spec is None:
            return  # nothing of a task that has ended matters any more
        if kind == "request":
            self.waiting.append((worker, message["n"]))
        elif kind == "result":
            worker.spec = None
            events.append(("result", spec["id"], message["record"]))
            if message.get("retire"):  # code of that task still runs in it
                self._replace(worker)
                self.retired.append(worker)
                worker.send_eof()
        elif kind in ("started", "usage"):
            events.append((kind, spec["id"], message))

    def _grant(self, events: list) -> None:
        while self.waiting:
            worker, n = self.waiting[0]
            if worker.spec is None or worker not in self.workers:
                self.waiting.popleft()  # its task ended meanwhile
                continue
            wait = self.cap.take() if self.cap is not None else 0.0
            if wait > 0:
                self.next_grant = time.monotonic() + wait
                return
            self.waiting.popleft()
            worker.send({"type": "go", "n": n})
            events.append(("request", worker.spec["id"], 1))

    def interrupt(self, reason: str) -> None:
        self.closing = True  # a worker that dies now is not replaced
        for worker in self.workers:
            if worker.spec is not None:
                worker.send({"type": "abort", "reason": reason})

    def kill(self) -> None:
        """End the workers still running a task now."""
        for worker in self.workers:
            if worker.spec is not None:
                end_group(worker.proc)

    def close(self) -> None:
        """Workers end at the end of their input; one still running after
        ``WORKER_EXIT_SECONDS`` is ended."""
        self.closing = True
        for worker in self.workers:
            worker.send_eof()
        deadline = time.monotonic() + WORKER_EXIT_SECONDS
        for worker in [*self.workers, *self.retired]:
            _wait_until(worker.proc, deadline)
            if worker.proc.poll() is None:
                end_group(worker.proc)
            worker.proc.wait()
            release(worker.proc)
        self.starter.close()
        self.log.close()


def _wait_until(proc: Any, deadline: float) -> None:
    try:
        proc.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass  # still running: it is killed


# ---- the worker's side -----------------------------------------------------------------
def _own_channels() -> tuple[IO[str], IO[str]]:
    """The protocol keeps the original stdin and stdout; fd 0 becomes /dev/null and fd 1
    the log (stderr), so a print or a child never mixes into the protocol."""
    proto_in = os.fdopen(os.dup(0), "r", encoding="utf-8")
    proto_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return proto_in, proto_out


class Channel:
    """The worker's end of the protocol: sends from any thread; reads on its own thread."""

    def __init__(self) -> None:
        from .batch_task import Running

        self.proto_in, self.proto_out = _own_channels()
        self._lock = threading.Lock()
        self.tasks: queue.Queue = queue.Queue()
        self.grants: queue.Queue = queue.Queue()
        self.running = Running()
        self._numbers = itertools.count()

    def send(self, message: dict) -> None:
        with self._lock:
            try:
                self.proto_out.write(json.dumps(message, ensure_ascii=False) + "\n")
                self.proto_out.flush()
            except OSError:
                pass  # the driver is gone: the input ends too, and this worker with it

    def read(self) -> None:
        for line in self.proto_in:
            message = json.loads(line)
            kind = message.get("type")
            if kind == "task":
                self.tasks.put(message["spec"])
            elif kind == "go":
                self.grants.put(message["n"])
            elif kind == "abort":
                self.running.abort(message["reason"])
                self.grants.put(None)
        self.running.abort("the batch driver is gone")  # or it closed this worker
        self.grants.put(None)
        self.tasks.put(None)

    def wait_turn(self) -> None:
        """Before a model request: ask the driver and wait for its grant (or an abort)."""
        n = next(self._numbers)
        self.send({"type": "request", "n": n})
        while True:
            got = self.grants.get()
            if got is None or got == n:
                return

    def clear_grants(self) -> None:
        while not self.grants.empty():
            self.grants.get_nowait()


def worker_main() -> int:
    """A worker process: run the tasks that arrive until the input ends."""
    import importlib
    import logging

    from . import signals

    logging.basicConfig(format="ga: %(message)s", level=logging.WARNING)  # to the batch log
    channel = Channel()
    hello = json.loads(channel.proto_in.readline() or "{}")
    for name in (*PRELOAD, *hello.get("common", {}).get("preload", ())):
        importlib.import_module(name)
    threading.Thread(target=channel.read, name="ga-batch-channel", daemon=True).start()
    wait_turn = channel.wait_turn if hello.get("rpm") else None
    with signals.handled():
        try:
            return serve(channel, hello["common"], wait_turn)
        except signals.STOPS as stop:  # ended by the driver or its watchdog
            return signals.exit_code(stop)


def serve(channel: Channel, common: dict, wait_turn: Callable[[], None] | None) -> int:
    """Run the tasks that arrive, one at a time, until the input ends."""
    from .batch_task import run_task

    while (spec := channel.tasks.get()) is not None:
        channel.clear_grants()
        try:
            result = run_task(spec, common, channel.running, channel.send, wait_turn)
        except Exception as e:  # the worker's edge: the driver always gets a result
            result = crashed(spec, e)
        retire = any(t.name in LEFTOVER_THREADS for t in threading.enumerate())
        channel.send({"type": "result", "record": result, "retire": retire})
        if retire:
            return 0  # a task's code still runs here: the next task gets a new process
    return 0


def crashed(spec: dict, error: Exception) -> dict:
    import logging

    from .batch_task import record

    logging.getLogger("ga.batch").error("task %s crashed", spec["id"], exc_info=True)
    return record(spec["id"], "failed", error=f"{type(error).__name__}: {error}")
