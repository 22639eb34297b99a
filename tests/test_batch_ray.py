"""`ga batch --ray ADDRESS` (SPEC §14) on one local Ray cluster started for the test session.

The cluster is started with `ray start --head` in a process group of its own, its temp dir
and logs in a fresh folder; its workers get no key from its environment, so a key that
reaches them came through the job's runtime environment. Each test runs a real `ga batch`
driver against it. Ray must be installed (.ci/run installs the extra): a cluster that cannot
start fails these tests, never skips them.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from batchutil import (
    answer,
    ask,
    by_id,
    code,
    end_started,
    finish,
    numbered,
    results,
    start_batch,
    tag,
    wait_until,
    without_timings,
    write_tasks,
)
from llm_server import Reply, llm_server, write_config

from frontends.cli import main

__all__ = ["llm_server"]  # the fixture

RAY_START_SECONDS = 240.0  # sanity bound: a head node starts (≈ 5 s idle, far more under load)
RAY_STOP_SECONDS = 2.0  # `ray start --block` outlasts SIGTERM by 30 s; its whole group is killed
START_SECONDS = 240.0  # sanity bound: the driver joined the cluster and tasks run
KEY = "sk-batch-ray-6f1e2d3c4b5a"  # reaches the workers only through the runtime env
LOG_SUFFIXES = (".log", ".out", ".err", ".txt")  # Ray's logs, in the cluster's temp dir
ADDRESS = re.compile(r"ray start --address='([^']+)'")


@pytest.fixture(autouse=True)
def no_driver_left():
    yield
    end_started()  # a test that failed before ending its driver


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray head node, shut down when the session ends: its address, and the
    variables that let a driver in (a token of its own, not the user's ~/.ray one)."""
    try:
        import ray  # noqa: F401
    except ImportError:
        pytest.fail('Ray is not installed: pip install -e ".[dev,ray]" (.ci/run does)')
    temp = Path(tempfile.mkdtemp(prefix="ga-ray-"))  # short: Ray's socket paths live in it
    log = temp / "head.log"
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "GA_HOME", "RAY_AUTH_TOKEN_PATH") and "KEY" not in k}
    env.update(auth)
    argv = [sys.executable, "-c", "from ray.scripts.scripts import main; main()", "start",
            "--head", "--block", "--port", "0", "--num-cpus", "4", "--temp-dir", str(temp),
            "--include-dashboard", "false", "--disable-usage-stats"]
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        yield {"address": wait_for_head(proc, log), "env": auth, "temp": temp}
    finally:
        stop_group(proc)
        shutil.rmtree(temp, ignore_errors=True)


def wait_for_head(proc: subprocess.Popen, log: Path) -> str:
    deadline = time.monotonic() + RAY_START_SECONDS
    while time.monotonic() < deadline:
        found = ADDRESS.search(log.read_text(errors="replace"))
        if found:
            return found[1]
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-2000:]
    stop_group(proc)
    pytest.fail(f"the local Ray head node did not start:\n{tail}")


def stop_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(RAY_STOP_SECONDS)
    except subprocess.TimeoutExpired:
        pass
    except ProcessLookupError:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    proc.wait()


@pytest.fixture
def cfg(home, llm_server):
    return write_config(home, llm_server, p={"provider": "openai", "model": "m",
                                             "max_retries": 0, "api_key_env": "BATCH_RAY_KEY"})


def ray_batch(tmp_path, home, cluster, *args):
    return start_batch(tmp_path, home, "tasks.jsonl", "--ray", cluster["address"], *args,
                       env={"BATCH_RAY_KEY": KEY, **cluster["env"]})


def mixed_replies(server):
    write = json.dumps({"path": "x.txt", "content": "x"})
    server.answer(tag(0), code("echo hi"), answer("said hi"))
    server.answer(tag(1), ask("which one?"))
    server.answer(tag(2), Reply(text="<summary>w</summary>", tool_calls=[("file_write", write)]))
    server.answer(tag(3), Reply(status=400, message="refused"))


def test_ray_gives_the_same_result_lines_as_the_local_pool(tmp_path, home, cfg, llm_server,
                                                           ray_cluster, monkeypatch, capsys):
    tasks = numbered(4)
    tasks[2]["max_turns"] = 1
    write_tasks(tmp_path / "tasks.jsonl", tasks)
    monkeypatch.setenv("BATCH_RAY_KEY", KEY)
    mixed_replies(llm_server)
    local = tmp_path / "local.jsonl"
    assert main(["batch", str(tmp_path / "tasks.jsonl"), "--config", cfg, "-m", "p",
                 "--out", str(local)]) == 1
    llm_server.by_marker.clear()
    mixed_replies(llm_server)
    proc = ray_batch(tmp_path, home, ray_cluster, "--config", cfg, "-m", "p", "--out",
                     "ray.jsonl", "--cpus-per-task", "0.5")
    assert finish(proc, START_SECONDS) == 1, (tmp_path / "err.txt").read_text()
    on_ray = results(tmp_path / "ray.jsonl")
    assert without_timings(on_ray) == without_timings(results(local))
    assert {r["status"] for r in on_ray} == {"done", "asked", "limit", "failed"}
    assert main(["sessions", "--json", "-n", "50"]) == 0  # written to this home by the workers
    listed = {json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()}
    assert {r["session"] for r in on_ray} <= listed


def test_ray_keeps_workers_in_flight_and_the_key_comes_through_the_runtime_env(
        tmp_path, home, cfg, llm_server, ray_cluster):
    workers = 3
    llm_server.quorum = workers
    for n in range(2 * workers):
        llm_server.answer(tag(n), answer(f"fine {n}"))
    write_tasks(tmp_path / "tasks.jsonl", numbered(2 * workers))
    proc = ray_batch(tmp_path, home, ray_cluster, "--config", cfg, "-m", "p", "--workers",
                     str(workers), "--cpus-per-task", "0.5", "--rpm", "1000", "--json")
    assert finish(proc, START_SECONDS) == 0, (tmp_path / "err.txt").read_text()
    assert llm_server.max_active == workers  # 8 task slots in the cluster; --workers caps
    sent = {v for r in llm_server.requests for k, v in r["headers"].items()
            if k.lower() == "authorization"}
    assert sent == {f"Bearer {KEY}"}
    err = (tmp_path / "err.txt").read_text()
    assert f"{2 * workers} model requests (--rpm 1000)" in err  # one cap, asked by every task
    out = (tmp_path / "out.txt").read_text()
    assert len(out.splitlines()) == 2 * workers
    logs = [p for p in ray_cluster["temp"].rglob("*") if p.is_file() and p.suffix in LOG_SUFFIXES]
    for path in [tmp_path / "out.txt", tmp_path / "err.txt", tmp_path / "tasks.results.jsonl",
                 *(p for p in home.rglob("*") if p.is_file()), *logs]:
        assert KEY not in path.read_text(errors="replace"), path


def test_a_task_whose_ray_worker_dies_is_run_once_more_then_failed(tmp_path, home, cfg,
                                                                  llm_server, ray_cluster):
    flag = tmp_path / "died-once"
    once = code(f"test -e {flag} || {{ touch {flag}; kill -9 $PPID; }}")
    llm_server.answer(tag("once"), once, once, answer("made it"))
    llm_server.answer(tag("always"), code("kill -9 $PPID"), code("kill -9 $PPID"))
    write_tasks(tmp_path / "tasks.jsonl", [{"task": f"{tag('once')} go", "id": "once"},
                                           {"task": f"{tag('always')} go", "id": "always"}])
    proc = ray_batch(tmp_path, home, ray_cluster, "--config", cfg, "-m", "p",
                     "--yolo")  # confined code could not signal its worker
    assert finish(proc, START_SECONDS) == 1, (tmp_path / "err.txt").read_text()
    got = by_id(tmp_path / "tasks.results.jsonl")
    assert got["once"]["status"] == "done" and got["once"]["answer"] == "made it"
    assert len(llm_server.requests_for(tag("once"))) == 3  # its conversation ran twice
    assert got["always"]["status"] == "failed" and "both tries" in got["always"]["error"]
    assert len(llm_server.requests_for(tag("always"))) == 2


def test_sigterm_aborts_the_running_ray_tasks_and_records_them_interrupted(
        tmp_path, home, cfg, llm_server, ray_cluster):
    from test_batch_signals import pids_with

    mark = f"ga-batchray-{os.getpid()}-{time.monotonic_ns()}"
    for n in range(4):
        llm_server.answer(tag(n), code(f"exec -a {mark} sleep 300"))
    write_tasks(tmp_path / "tasks.jsonl", numbered(4))
    proc = ray_batch(tmp_path, home, ray_cluster, "--config", cfg, "-m", "p", "--workers", "2",
                     "--cpus-per-task", "0.5")
    try:
        wait_until(lambda: len(pids_with(mark)) == 2, START_SECONDS, "two tasks running")
        os.kill(proc.pid, signal.SIGTERM)
        assert finish(proc, START_SECONDS) == 143, (tmp_path / "err.txt").read_text()
        got = results(tmp_path / "tasks.results.jsonl")
        assert sorted(r["id"] for r in got) == [0, 1]
        assert all(r["status"] == "interrupted" and "SIGTERM" in r["error"] for r in got)
        wait_until(lambda: not pids_with(mark), START_SECONDS, "their code ended")
    finally:
        for pid in pids_with(mark):
            os.kill(pid, signal.SIGKILL)


def test_without_an_address_ray_is_ray_address_else_a_new_local_one(monkeypatch):
    from frontends.batch_ray import ray_address

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert ray_address(None) == "local"
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    assert ray_address(None) == "10.0.0.5:6379"
    assert ray_address("head:6379") == "head:6379"


def test_sealed_config_and_keys_show_nothing_of_them_and_open_with_their_pad():
    from frontends.batch_ray import seal, unseal

    values = {"config": "models: {p: {api_key: sk-inline-1234567890}}", "env": {"K": KEY}}
    sealed, pad = seal(values)
    assert KEY not in sealed and "sk-inline" not in sealed and "models" not in sealed
    assert unseal(sealed, pad) == values
    assert seal(values)[0] != sealed  # a new pad each time
