"""A real `ga batch` driver stopped from outside (SPEC §14, §7): Ctrl-C and SIGTERM abort the
running tasks and record them `interrupted`; SIGKILL loses nothing that had ended; a crashed
or hung worker costs one task; nothing the batch started outlives it."""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import pytest
from batchutil import (
    alive,
    answer,
    by_id,
    code,
    descendants,
    end_started,
    finish,
    numbered,
    results,
    start_batch,
    stopped,
    tag,
    wait_until,
    write_tasks,
)
from llm_server import llm_server, write_config

from frontends.cli import main

__all__ = ["llm_server"]  # the fixture

START_SECONDS = 60.0  # sanity bound: workers started and their tasks running
GONE_SECONDS = 5.0  # sanity bound: what the batch started is gone after it stopped

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(),
                                reason="finds processes through /proc (Linux)")


def pids_with(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.fixture(autouse=True)
def no_driver_left():
    yield
    end_started()  # a test that failed before ending its driver


@pytest.fixture
def mark():
    text = f"ga-batchtest-{uuid.uuid4().hex}"
    yield text
    for pid in pids_with(text):
        os.kill(pid, signal.SIGKILL)


@pytest.fixture
def cfg(home, llm_server):
    return write_config(home, llm_server, p={"provider": "openai", "model": "m",
                                             "max_retries": 0})


def sleeper(mark: str):
    return code(f"exec -a {mark} sleep 300")


@pytest.mark.parametrize("sig, exit_code, words", [(signal.SIGINT, 130, "interrupted"),
                                                   (signal.SIGTERM, 143, "(SIGTERM)")])
def test_a_signal_aborts_running_tasks_records_them_interrupted_and_a_rerun_resumes(
        tmp_path, home, cfg, llm_server, mark, sig, exit_code, words):
    for n in range(4):
        llm_server.answer(tag(n), sleeper(mark))
    tasks = write_tasks(tmp_path / "tasks.jsonl", numbered(4))
    proc = start_batch(tmp_path, home, "tasks.jsonl", "--config", cfg, "-m", "p",
                       "--workers", "2")
    wait_until(lambda: len(pids_with(mark)) == 2, START_SECONDS, "two tasks running")
    workers = descendants(proc.pid)
    os.kill(proc.pid, sig)
    assert finish(proc) == exit_code
    got = results(tmp_path / "tasks.results.jsonl")
    assert sorted(r["id"] for r in got) == [0, 1]  # nothing new started
    assert all(r["status"] == "interrupted" and words in r["error"] for r in got)
    for r in got:  # each was aborted in its worker, its end journaled
        journal = (home / "sessions" / f"{r['session']}.jsonl").read_text()
        assert '"result": "ABORTED"' in journal
    wait_until(lambda: not pids_with(mark) and not [p for p in workers if alive(p)],
               GONE_SECONDS, "the tasks' code, the workers and the driver's watchdog gone")
    assert "stopping 2 running task(s)" in (tmp_path / "err.txt").read_text()
    llm_server.by_marker.clear()
    for n in range(4):
        llm_server.answer(tag(n), answer(f"done {n}"))
    assert main(["batch", str(tasks), "--config", cfg, "-m", "p"]) == 0
    assert {k: r["status"] for k, r in by_id(tmp_path / "tasks.results.jsonl").items()} == \
        dict.fromkeys(range(4), "done")


def test_sigkill_of_the_driver_ends_its_workers_and_a_rerun_never_repeats_a_final_task(
        tmp_path, home, cfg, llm_server, mark):
    for n in range(3):
        llm_server.answer(tag(n), answer(f"quick {n}"))
    for n in range(3, 6):
        llm_server.answer(tag(n), sleeper(mark))
    tasks = write_tasks(tmp_path / "tasks.jsonl", numbered(6))
    out = tmp_path / "tasks.results.jsonl"
    proc = start_batch(tmp_path, home, "tasks.jsonl", "--config", cfg, "-m", "p",
                       "--workers", "2", "--yolo")  # confined code could not stop its worker
    wait_until(lambda: len(results(out)) == 3 and len(pids_with(mark)) == 2, START_SECONDS,
               "the quick tasks done, two slow ones running")
    workers = descendants(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    finish(proc)
    wait_until(lambda: not pids_with(mark) and not [p for p in workers if alive(p)],
               GONE_SECONDS, "the workers and their code gone with the driver")
    finished = {r["id"] for r in results(out)}
    assert finished == {0, 1, 2}
    asked = {n: len(llm_server.requests_for(tag(n))) for n in range(6)}
    llm_server.by_marker.clear()
    for n in range(6):
        llm_server.answer(tag(n), answer(f"done {n}"))
    assert main(["batch", str(tasks), "--config", cfg, "-m", "p"]) == 0
    for n in finished:  # a task with a final status never starts again
        assert len(llm_server.requests_for(tag(n))) == asked[n]
    assert sorted(r["id"] for r in results(out)) == list(range(6))  # one line each


def test_a_hung_worker_costs_one_task_and_is_ended_when_the_batch_stops(tmp_path, home, cfg,
                                                                        llm_server):
    llm_server.answer(tag("hang"), code("kill -STOP $PPID"))
    for n in range(3):
        llm_server.answer(tag(n), answer(f"fine {n}"))
    write_tasks(tmp_path / "tasks.jsonl", [{"task": f"{tag('hang')} go", "id": "hang"},
                                           *numbered(3)])
    out = tmp_path / "tasks.results.jsonl"
    proc = start_batch(tmp_path, home, "tasks.jsonl", "--config", cfg, "-m", "p",
                       "--workers", "2", "--yolo")  # confined code could not stop its worker
    wait_until(lambda: len(results(out)) == 3, START_SECONDS, "the other tasks done")
    workers = descendants(proc.pid)
    wait_until(lambda: any(map(stopped, workers)), START_SECONDS, "the hung worker stopped")
    os.kill(proc.pid, signal.SIGTERM)
    assert finish(proc) == 143
    got = by_id(out)
    assert [got[n]["status"] for n in range(3)] == ["done"] * 3
    assert got["hang"]["status"] == "interrupted" and "ended" in got["hang"]["error"]
    wait_until(lambda: not [p for p in workers if alive(p)], GONE_SECONDS, "workers gone")


def test_a_worker_that_dies_fails_its_task_only_and_is_replaced(tmp_path, home, cfg,
                                                               llm_server, capsys):
    llm_server.answer(tag("crash"), code("kill -9 $PPID"))
    for n in range(4):
        llm_server.answer(tag(n), answer(f"fine {n}"))
    tasks = write_tasks(tmp_path / "tasks.jsonl", [
        {"task": f"{tag('crash')} go", "id": "crash"},
        *numbered(4)])
    assert main(["batch", str(tasks), "--config", cfg, "-m", "p", "--workers", "2",
                 "--yolo"]) == 1  # confined code could not kill its worker
    got = by_id(tmp_path / "tasks.results.jsonl")
    assert got["crash"]["status"] == "failed" and "killed by SIGKILL" in got["crash"]["error"]
    assert got["crash"]["session"]  # which session to look at
    assert [got[n]["status"] for n in range(4)] == ["done"] * 4


def test_on_a_terminal_the_progress_is_live_on_stderr_and_stdout_stays_empty(tmp_path, home,
                                                                              cfg, llm_server):
    import sys

    import pexpect
    from batchutil import GA

    for n in range(3):
        llm_server.answer(tag(n), answer(f"fine {n}", delay=0.5))
    write_tasks(tmp_path / "tasks.jsonl", numbered(3))
    out = tmp_path / "stdout.txt"
    command = (f"exec {sys.executable} {GA} batch tasks.jsonl --config {cfg} -m p "
               f"--workers 1 >{out}")
    child = pexpect.spawn("bash", ["-c", command], cwd=str(tmp_path), encoding="utf-8",
                          env={**os.environ, "GA_HOME": str(home)}, timeout=START_SECONDS,
                          dimensions=(30, 160))
    child.expect("done 1 · failed 0 · running 1 · tokens 110")  # the live line, then ETA
    child.expect("ETA")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0 and "batch: 3 done" in child.before
    assert out.read_text() == ""
