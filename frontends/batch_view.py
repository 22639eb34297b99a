"""What ``ga batch`` shows on stderr: a live progress line on a terminal (rich), else one line
per finished task; the summary at the end. Stdout stays for the results (``--json``)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import IO, Any

ERROR_CHARS = 200  # a task's error on its line
ERRORS_SHOWN = 5  # failed tasks named in the summary
REFRESH_PER_SECOND = 4


def inert(text: Any, limit: int = ERROR_CHARS) -> str:
    """One line a terminal shows as text: control characters (escape sequences) become
    U+FFFD, line breaks spaces, cut at ``limit``."""
    line = " ".join(str(text).split())
    line = "".join("\ufffd" if ord(c) < 32 or 0x7f <= ord(c) < 0xa0 else c for c in line)
    return line if len(line) <= limit else line[:limit - 1] + "…"


def duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


@dataclass
class BatchState:
    """The batch so far: results by status of this run, tokens spent, what runs."""

    total: int = 0  # tasks this run is to run
    counts: dict[str, int] = field(default_factory=dict)
    tokens: int = 0
    requests: int = 0
    running: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def finished(self) -> int:
        return sum(self.counts.values())

    def describe(self) -> str:
        done, failed = self.counts.get("done", 0), self.counts.get("failed", 0)
        return (f"done {done} · failed {failed} · running {self.running} · "
                f"tokens {self.tokens:,}")


class BatchView:
    """Progress on ``err``: live on a terminal, else a line per finished task."""

    def __init__(self, tally: BatchState, err: IO[str] | None = None, enabled: bool = True) -> None:
        from rich.console import Console

        self.tally = tally
        stream = err or sys.stderr
        self.console = Console(file=stream, highlight=False, soft_wrap=True)
        self.enabled = enabled
        self.progress: Any = None
        self.bar: Any = None
        if enabled and stream.isatty():
            self._start_live()

    def _start_live(self) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        from .signals import held

        self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(),
                                 TextColumn("ETA"), TimeRemainingColumn(),
                                 console=self.console, transient=True,
                                 refresh_per_second=REFRESH_PER_SECOND)
        with held():  # a display half started cannot be stopped cleanly
            self.progress.start()
        self.bar = self.progress.add_task(self.tally.describe(), total=self.tally.total)

    def note(self, text: str) -> None:
        if self.enabled:
            self.console.print(f"ga: {text}", markup=False)

    def refresh(self) -> None:
        if self.progress is not None:
            self.progress.update(self.bar, description=self.tally.describe(),
                                 completed=self.tally.finished)

    def result(self, record: dict) -> None:
        """One line for a finished task."""
        if not self.enabled:
            return
        t = self.tally
        status = record["status"]
        tokens = record["tokens"].get("input", 0) + record["tokens"].get("output", 0)
        line = (f"ga: [{t.finished}/{t.total}] {status} {inert(record['id'])} "
                f"({record['seconds']:.1f}s, {tokens:,} tokens)")
        if record.get("error"):
            line += f": {inert(record['error'])}"
        style = {"failed": "red", "interrupted": "yellow", "done": None}.get(status, "yellow")
        self.console.print(line, style=style, markup=False)
        self.refresh()

    def close(self) -> None:
        if self.progress is not None:
            from .signals import held

            with held():
                self.progress.stop()
            self.progress = None

    def summary(self, lines: list[str]) -> None:
        self.close()
        for line in lines if self.enabled else ():
            self.console.print(f"ga: {line}", markup=False)


def summary_lines(tally: BatchState, failed: list[dict], skipped: int, not_started: int,
                  opts: Any, out: str) -> list[str]:
    """The end of a batch: what this run did, what it skipped or left, where the results are."""
    order = ("done", "failed", "asked", "limit", "interrupted")
    parts = [f"{tally.counts.get(s, 0)} {s}" for s in order if tally.counts.get(s)]
    did = ", ".join(parts) or "no task run"
    requests = f" · {tally.requests} model requests (--rpm {opts.rpm})" if opts.rpm else ""
    lines = [f"batch: {did} · {tally.tokens:,} tokens{requests} · "
             f"{duration(time.monotonic() - tally.started)}"]
    if skipped:
        lines.append(f"{skipped} task(s) had finished before and were skipped "
                     "(--retry failed runs the failed ones again)")
    for r in failed[:ERRORS_SHOWN]:
        lines.append(f"failed {inert(r['id'])}: {inert(r.get('error') or '')}")
    if len(failed) > ERRORS_SHOWN:
        lines.append(f"… and {len(failed) - ERRORS_SHOWN} more failed")
    if not_started:
        lines.append(f"{not_started} task(s) not started: the batch spent {tally.tokens:,} "
                     f"tokens (--max-tokens-total {opts.max_tokens_total}); run the same "
                     "command again to go on")
    lines.append(f"results: {out}")
    return lines
