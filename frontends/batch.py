"""``ga batch TASKS.jsonl`` (SPEC §14): many one-shot tasks, resumable and interruptible.

The driver (this module) reads and checks every task before anything runs, skips the ids
that already have a final result, and hands the rest to a backend — the local pool of worker
processes (``batch_pool``) or a Ray cluster (``batch_ray``, imported only with ``--ray``) —
at most ``--workers`` at a time. It alone writes the results, one flushed line per finished
task. Ctrl-C or SIGTERM: nothing new starts, the running tasks are aborted and recorded
``interrupted`` (not final: the next run runs them), exit 130/143.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterable

from llmcore.base import ConfigError

from .batch_input import check_setup, jsonl_lines, load_tasks, tasks_from_list
from .batch_task import FINAL, RETRYABLE, record
from .batch_view import BatchState, BatchView, summary_lines
from .signals import STOPS, describe

EXIT_FAILED, EXIT_LIMIT, EXIT_ASKED = 1, 4, 3
TICK_SECONDS = 0.25  # the driver looks at its tasks and the display this often
ABORT_GRACE_SECONDS = 5.0  # after Ctrl-C/SIGTERM, how long aborted tasks get to end


@dataclass
class BatchOptions:
    """How a batch runs (the options of ``ga batch`` and keywords of ``run_batch``)."""

    out: str | Path | None = None
    workers: int | None = None  # default: min(4, CPUs)
    ray: bool | str | None = None  # True: a local Ray (or $RAY_ADDRESS); a str: that cluster
    cpus_per_task: float = 1.0
    model: str | None = None
    config: str | None = None
    home: str | Path | None = None
    plugins: tuple = ()
    no_user_tools: bool = False
    max_turns: int = 100
    max_tokens: int | None = None
    max_cost: float | None = None  # USD per task; needs a price on the model
    mcp_config: tuple = ()  # Claude-Code JSON files of more MCP servers, for every task
    sandbox: str | None = None  # default: the config's, else workspace-write
    approval: str | None = None  # nobody answers a batch: only never (the default) works
    yolo: bool = False
    rpm: int | None = None
    max_tokens_total: int | None = None
    retry: tuple = ()
    progress: bool = True
    on_result: Callable[[dict], Any] | None = None


@dataclass
class BatchReport:
    """What ``run_batch`` returns: the latest result of each task (input order), the exit code
    ``ga batch`` would give, where the results are, and the ids a token cap left unstarted."""

    results: list[dict]
    exit_code: int
    out: Path
    not_started: list = field(default_factory=list)


def default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def paths_for(tasks_path: Path | None, out: str | Path | None) -> tuple[Path, Path]:
    """The results file and the folder of the tasks' own folders (``OUT.work``)."""
    if out is None:
        if tasks_path is None:
            raise ConfigError(None, "out", "a list of tasks needs a results file: "
                              "run_batch(tasks, out='results.jsonl')")
        stem = tasks_path.name[:-len(".jsonl")] if tasks_path.name.endswith(".jsonl") else \
            tasks_path.name
        out = tasks_path.with_name(f"{stem}.results.jsonl")
    out = Path(out).expanduser().absolute()
    if tasks_path is not None and out.resolve() == tasks_path.resolve():
        raise ConfigError(None, "--out", f"{out} is the tasks file: the results would be "
                          "written into it; give another results file")
    base = out.name[:-len(".jsonl")] if out.name.endswith(".jsonl") else out.name
    return out, out.with_name(f"{base}.work")


# ---- the results file --------------------------------------------------------------------
def read_results(out: Path) -> dict[str, dict]:
    """The latest result of each id in ``out`` (a torn or unreadable line is skipped)."""
    latest: dict[str, dict] = {}
    try:
        lines = jsonl_lines(out.read_text(encoding="utf-8", errors="replace"))
    except FileNotFoundError:
        return latest
    except OSError as e:
        raise ConfigError(str(out), None, f"cannot read the results: {e.strerror}") from None
    for line in lines:
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(item, dict) and "id" in item and "status" in item:
            latest[str(item["id"])] = item
    return latest


class ResultsFile:
    """The results, appended a flushed line at a time, by this process only (a lock on the
    file refuses a second ``ga batch`` writing the same results)."""

    def __init__(self, path: Path) -> None:
        from .journal import ends_with_newline

        path.parent.mkdir(parents=True, exist_ok=True)
        torn = not ends_with_newline(path)
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (kept open)
        self._lock(path)
        if torn:  # a line cut by a killed driver ends here; the next starts clean
            self.file.write("\n")

    def _lock(self, path: Path) -> None:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: no advisory lock
            return
        try:
            fcntl.flock(self.file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.file.close()
            raise ConfigError(str(path), None, "another ga batch is writing these results; "
                              "wait for it to end, or give another --out") from None

    def write(self, item: dict) -> None:
        self.file.write(result_line(item))
        self.file.flush()

    def close(self) -> None:
        self.file.close()


# ---- the driver --------------------------------------------------------------------------
class Driver:
    """Feeds a backend at most ``capacity`` tasks at a time and records what ends."""

    def __init__(self, backend: Any, results: ResultsFile, view: BatchView, state: BatchState,
                 opts: BatchOptions) -> None:
        self.backend = backend
        self.results = results
        self.view = view
        self.state = state
        self.opts = opts
        self.running: dict[str, dict] = {}  # by id: spec, start time, session, tokens
        self.finished: list[dict] = []
        self.capped = False

    def run(self, todo: collections.deque) -> None:
        try:
            while todo or self.running:
                self._start_more(todo)
                if self.capped and not self.running:
                    return
                for event in self.backend.wait(TICK_SECONDS):
                    self._handle(*event)
                self.view.refresh()
        except STOPS as stop:
            todo.clear()
            self._stop(describe(stop))
            raise

    def _start_more(self, todo: collections.deque) -> None:
        cap = self.opts.max_tokens_total
        self.capped = bool(cap) and self.state.tokens >= cap
        while todo and not self.capped and len(self.running) < self.backend.capacity:
            spec = todo.popleft()
            self.running[str(spec["id"])] = {"spec": spec, "at": time.monotonic(),
                                             "session": None, "tokens": {}}
            self.backend.submit(spec)
        self.state.running = len(self.running)

    def _handle(self, kind: str, task_id: Any, data: Any) -> None:
        """A backend's event: ``started`` {session}, ``usage`` {input, cached, output},
        ``request`` (how many model requests were let start), ``result`` (the task's line),
        ``lost`` (status, error: its worker did not report its end)."""
        if kind == "request":
            self.state.requests += data
            return
        info = self.running.get(str(task_id))
        if info is None:
            return
        if kind == "started":
            info["session"] = data.get("session")
        elif kind == "usage":
            for key in ("input", "cached", "output"):
                info["tokens"][key] = info["tokens"].get(key, 0) + data.get(key, 0)
            self.state.tokens += data.get("input", 0) + data.get("output", 0)
        elif kind == "lost":
            self._finish(self._lost(info, *data))
        elif kind == "result":
            if not info["tokens"]:  # a backend that reports usage only at the end
                tokens = data.get("tokens") or {}
                self.state.tokens += tokens.get("input", 0) + tokens.get("output", 0)
            self._finish(data)

    def _lost(self, info: dict, status: str, error: str) -> dict:
        """The result of a task whose end its worker did not report."""
        tokens = {k: info["tokens"].get(k, 0) for k in ("input", "cached", "output")}
        return record(info["spec"]["id"], status, tokens=tokens, session=info["session"],
                      seconds=time.monotonic() - info["at"], error=error)

    def _finish(self, item: dict) -> None:
        self.running.pop(str(item["id"]), None)
        self.results.write(item)
        self.finished.append(item)
        self.state.counts[item["status"]] = self.state.counts.get(item["status"], 0) + 1
        self.state.running = len(self.running)
        self.view.result(item)
        if self.opts.on_result is not None:
            self.opts.on_result(item)

    def failed(self) -> list[dict]:
        return [r for r in self.finished if r["status"] == "failed"]

    def _stop(self, reason: str) -> None:
        """Abort what runs, give it ``ABORT_GRACE_SECONDS`` to end (its end is recorded),
        then end the rest and record them ``interrupted``."""
        self.view.note(f"{reason}: stopping {len(self.running)} running task(s)")
        self.backend.interrupt(reason)
        deadline = time.monotonic() + ABORT_GRACE_SECONDS
        try:
            while self.running and time.monotonic() < deadline:
                for event in self.backend.wait(min(TICK_SECONDS, deadline - time.monotonic())):
                    self._handle(*event)
        except STOPS:
            pass  # asked again: end them now
        if self.running:
            self.backend.kill()
        for info in list(self.running.values()):
            self._finish(self._lost(info, "interrupted", f"{reason}; the task was ended"))


def result_line(item: dict) -> str:
    return json.dumps(item, ensure_ascii=False) + "\n"


def print_result(item: dict) -> None:
    """``--json``: each result line on stdout as it lands, as the results file has it."""
    sys.stdout.write(result_line(item))
    sys.stdout.flush()


def exit_code(latest: Iterable[dict], capped: bool) -> int:
    statuses = {r.get("status") for r in latest}
    if "failed" in statuses:
        return EXIT_FAILED
    if "limit" in statuses or capped:
        return EXIT_LIMIT
    return EXIT_ASKED if "asked" in statuses else 0


def make_backend(opts: BatchOptions, setup: dict, workers: int, log_path: Path) -> Any:
    if opts.ray:
        from .batch_ray import RayPool

        return RayPool(None if opts.ray is True else str(opts.ray), setup, workers,
                       opts.cpus_per_task, opts.rpm)
    from .batch_pool import LocalPool

    return LocalPool(setup, workers, opts.rpm, log_path)


def run_batch(tasks: str | Path | Iterable[dict], **options: Any) -> BatchReport:
    """Run ``tasks`` (a JSONL file, or dicts with the fields of its lines) as ``ga batch``
    does, with the keywords of ``BatchOptions`` (``out``, ``workers``, ``ray``, ``model``…).
    Ctrl-C or SIGTERM records the running tasks ``interrupted`` and goes on to the caller."""
    from . import signals

    opts = BatchOptions(**options)
    bad = [r for r in opts.retry if r not in RETRYABLE]
    if bad:
        raise ConfigError(None, "--retry", f"{bad[0]!r} is not a final status to run again; "
                          f"choose from {', '.join(RETRYABLE)}")
    with signals.handled():
        return _run(tasks, opts)


def _run(tasks: str | Path | Iterable[dict], opts: BatchOptions) -> BatchReport:
    from .commands import resolve_home

    home = resolve_home(str(opts.home) if opts.home else None).absolute()
    if isinstance(tasks, (str, Path)):
        tasks_path = Path(tasks).expanduser().absolute()
        out, work = paths_for(tasks_path, opts.out)
        specs = load_tasks(tasks_path, work)
    else:
        tasks_path = None
        out, work = paths_for(None, opts.out)
        specs = tasks_from_list(list(tasks), Path.cwd(), work)
    setup = check_setup(specs, opts, home, where=str(tasks_path or "tasks"))
    results = ResultsFile(out)
    try:
        return _drive(specs, opts, setup, results, out)
    finally:
        results.close()


def _drive(specs: list[dict], opts: BatchOptions, setup: dict, results: ResultsFile,
           out: Path) -> BatchReport:
    earlier = read_results(out)
    todo = collections.deque(s for s in specs if to_run(earlier.get(str(s["id"])), opts.retry))
    state = BatchState(total=len(todo))
    view = BatchView(state, enabled=opts.progress)
    skipped = len(specs) - len(todo)
    driver = Driver(None, results, view, state, opts)
    try:
        if todo:
            workers = min(opts.workers or default_workers(), len(todo))
            driver.backend = make_backend(opts, setup, workers, out.with_suffix(".log"))
            try:
                driver.run(todo)
            finally:
                driver.backend.close()
    except STOPS:
        lines = summary_lines(state, driver.failed(), skipped, 0, opts, str(out))
        view.summary([*lines, "run the same command again to go on (interrupted tasks run "
                      "again)"])
        raise
    finally:
        view.close()
    latest = {**earlier, **{str(r["id"]): r for r in driver.finished}}
    ordered = [latest[str(s["id"])] for s in specs if str(s["id"]) in latest]
    view.summary(summary_lines(state, driver.failed(), skipped, len(todo), opts, str(out)))
    return BatchReport(ordered, exit_code(ordered, bool(todo)), out, [s["id"] for s in todo])


def to_run(earlier: dict | None, retry: tuple) -> bool:
    """Whether a task runs: it has no final result yet, or ``--retry`` names its status."""
    status = (earlier or {}).get("status")
    return status not in FINAL or status in retry


# ---- the command -------------------------------------------------------------------------
def batch_command(argv: list[str]) -> int:
    """``ga batch TASKS.jsonl [OPTIONS]``; returns the exit code."""
    from .batch_input import parse_args

    args = parse_args(argv)
    if isinstance(args, int):
        return args
    names = {f.name for f in fields(BatchOptions)}
    options = {k: v for k, v in vars(args).items() if k in names}
    options["on_result"] = print_result if args.json else None
    try:
        report = run_batch(args.tasks, **options)
    except STOPS as stop:
        from .signals import exit_code as stop_code

        return stop_code(stop)
    return report.exit_code
