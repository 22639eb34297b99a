"""Helpers for the batch tests: task files, replies per task, a real `ga batch` process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from llm_server import Reply

ROOT = Path(__file__).resolve().parent.parent
GA = str(ROOT / "ga.py")
EXIT_SECONDS = 30.0  # sanity bound: a signalled `ga batch` exits
POLL_SECONDS = 0.02
STARTED: list[subprocess.Popen] = []  # drivers started by start_batch


def tag(n: int | str) -> str:
    """A task's marker: in its text, so every request of its conversation holds it."""
    return f"[task-{n}]"


def numbered(count: int) -> list[dict]:
    """Tasks 0 .. count-1, each with its marker and its number as id."""
    return [{"task": f"{tag(n)} go", "id": n} for n in range(count)]


def write_tasks(path: Path, tasks: list[dict]) -> Path:
    path.write_text("".join(json.dumps(t) + "\n" for t in tasks), encoding="utf-8")
    return path


def answer(text: str, **kw) -> Reply:
    return Reply(text=f"<summary>answer</summary>{text}", **kw)


def ask(question: str) -> Reply:
    args = json.dumps({"question": question, "candidates": ["yes", "no"]})
    return Reply(text="<summary>ask</summary>", tool_calls=[("ask_user", args)])


def code(script: str, **kw) -> Reply:
    args = json.dumps({"type": "bash", "script": script, "timeout": 600})
    return Reply(text="<summary>run</summary>", tool_calls=[("code_run", args)], **kw)


def results(path: Path) -> list[dict]:
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").split("\n")  # JSON text may hold U+2028 raw
    return [json.loads(line) for line in lines if line.strip()]


def by_id(path: Path) -> dict:
    return {r["id"]: r for r in results(path)}


def without_timings(items: list[dict]) -> list[dict]:
    return sorted(({k: v for k, v in r.items() if k not in ("seconds", "session")}
                   for r in items), key=lambda r: str(r["id"]))


def start_batch(tmp_path: Path, home: Path, *args: str, env: dict | None = None
                ) -> subprocess.Popen:
    """A real `ga batch` (the driver) in its own process group; output to files. A test that
    fails before it ends its driver leaves it to ``end_started``."""
    full = {**os.environ, "GA_HOME": str(home), "GA_LANG": "en", **(env or {})}
    proc = subprocess.Popen([sys.executable, GA, "batch", *args], env=full, cwd=tmp_path,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            stdout=open(tmp_path / "out.txt", "w"),  # noqa: SIM115
                            stderr=open(tmp_path / "err.txt", "w"))  # noqa: SIM115
    STARTED.append(proc)
    return proc


def end_started() -> None:
    """SIGKILL every driver ``start_batch`` started that still runs (its watchdog then ends
    its workers and what they started)."""
    while STARTED:
        proc = STARTED.pop()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def finish(proc: subprocess.Popen, seconds: float = EXIT_SECONDS) -> int:
    try:
        return proc.wait(seconds)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def wait_until(predicate, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(POLL_SECONDS)


def descendants(pid: int) -> list[int]:
    """Live processes under ``pid``: its children, theirs, and so on (a batch's workers are
    its forker's children)."""
    found: list[int] = []
    parents = [pid]
    while parents:
        found += (new := [child for parent in parents for child in children_of(parent)])
        parents = new
    return found


def children_of(pid: int) -> list[int]:
    """Live processes whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def stopped(pid: int) -> bool:
    """Whether ``pid`` is stopped by a signal (SIGSTOP): state T in /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
