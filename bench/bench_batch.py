"""`ga batch` throughput and overhead, against baselines measured in the same run.

    python bench/bench_batch.py [--tasks 200] [--ray-tasks 40] [--no-ray]

The model is the local test server answering every request after 0.2 s (one turn a task).
1. Wall time of the batch at --workers 1, 4 and 8 (the work is waiting: target ≥ 3.5× at 4).
2. Per-task overhead of the pool, target ≤ 50 ms: wall time per task at --workers 1 against
   the time each task took in its worker (the same run, so the machine's load drifts out),
   and the task's time against a bare one-shot `ga` run in a warm process
   (`frontends.cli.main`); a cold `ga` process per task is shown for scale.
3. Peak memory (max RSS) of a worker process, and CPU time per task (driver and workers):
   on a shared machine the speed-up is bounded by the CPU left to the batch.
4. Ray (unless --no-ray): `ray.init()` of a local Ray, and the per-task overhead of the
   Ray backend at --workers 1 against the local pool's.
Each batch runs in a child process of its own (the driver; its workers are its children).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from llm_server import LLMServer, Reply, write_config  # noqa: E402

MODEL_SECONDS = 0.2
REPLY = Reply(text="<summary>answer</summary>All done.", delay=MODEL_SECONDS)
BARE_RUNS = 20
COLD_RUNS = 5
WORKER_COUNTS = (1, 4, 8)
TARGET_SPEEDUP_AT_4 = 3.5
TARGET_OVERHEAD_MS = 50.0


def write_batch(folder: Path, count: int) -> Path:
    path = folder / "tasks.jsonl"
    path.write_text("".join(json.dumps({"task": f"task {n}: say done"}) + "\n"
                            for n in range(count)))
    return path


def child(spec: dict) -> None:
    """In a child process: one batch (or one ray.init), timed; prints JSON."""
    from frontends.batch import run_batch

    if spec.get("init_only"):
        from frontends.batch_ray import import_ray

        ray = import_ray()
        start = time.perf_counter()
        ray.init(address="local", include_dashboard=False, log_to_driver=False)
        print(json.dumps({"init": time.perf_counter() - start}))
        ray.shutdown()
        return
    start = time.perf_counter()
    report = run_batch(spec["tasks"], out=spec["out"], workers=spec["workers"],
                       ray=spec.get("ray"), cpus_per_task=spec.get("cpus", 1.0),
                       config=spec["config"], model="p", home=spec["home"], progress=False)
    wall = time.perf_counter() - start
    assert report.exit_code == 0, report.results[:3]
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    driver = resource.getrusage(resource.RUSAGE_SELF)
    cpu = workers.ru_utime + workers.ru_stime + driver.ru_utime + driver.ru_stime
    task = statistics.mean(r["seconds"] for r in report.results)
    print(json.dumps({"wall": wall, "worker_peak_kb": workers.ru_maxrss, "cpu": cpu,
                      "task": task, "count": len(report.results)}))


def run_child(spec: dict) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"child failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bare_task(config: str, home: Path, work: Path) -> float:
    """The same task as a one-shot `ga` run in this (warm) process: its median time."""
    import contextlib
    import io

    from frontends.cli import main

    times = []
    for n in range(BARE_RUNS + 2):
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = main(["--config", config, "-m", "p", "--home", str(home), "-C", str(work),
                         f"bare {n}: say done"])
        assert code == 0
        times.append(time.perf_counter() - start)
    return statistics.median(times[2:])


def cold_task(config: str, home: Path, work: Path) -> float:
    times = []
    for n in range(COLD_RUNS):
        start = time.perf_counter()
        subprocess.run([sys.executable, str(ROOT / "ga.py"), "--config", config, "-m", "p",
                        "--home", str(home), "-C", str(work), f"cold {n}"], check=True,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def local_runs(base: dict, folder: Path, count: int) -> dict[int, dict]:
    tasks = str(write_batch(folder, count))
    found = {}
    for workers in WORKER_COUNTS:
        out = str(folder / f"w{workers}.jsonl")
        found[workers] = run_child({**base, "tasks": tasks, "out": out, "workers": workers})
        print(f"  --workers {workers}: {found[workers]['wall']:.1f} s for {count} tasks",
              flush=True)
    return found


def ray_runs(base: dict, folder: Path, count: int, local_per_task: float) -> None:
    init = run_child({"init_only": True})["init"]
    tasks = str(write_batch(folder / "ray", count))
    wall = run_child({**base, "tasks": tasks, "out": str(folder / "ray.jsonl"),
                      "workers": 1, "ray": True})["wall"]
    per_task = (wall - init) / count
    print(f"Ray {ray_version()}: ray.init() of a local Ray {init:.1f} s; "
          f"--workers 1: {per_task * 1000:.0f} ms a task (start included), "
          f"{(per_task - local_per_task) * 1000:+.0f} ms over the local pool's")


def ray_version() -> str:
    from frontends.batch_ray import import_ray

    return import_ray().__version__


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--ray-tasks", type=int, default=40)
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--child")
    args = ap.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    server = LLMServer().start()
    server.default = REPLY
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        home = folder / "home"
        home.mkdir()
        (folder / "ray").mkdir()
        config = write_config(home, server, p={"provider": "openai", "model": "m"})
        base = {"config": config, "home": str(home)}
        print(f"{args.tasks} tasks, the model answering after {MODEL_SECONDS} s:", flush=True)
        walls = local_runs(base, folder, args.tasks)
        bare = bare_task(config, home, folder)
        cold = cold_task(config, home, folder)
        report(walls, bare, cold, args.tasks)
        if not args.no_ray:
            ray_runs(base, folder, args.ray_tasks, walls[1]["wall"] / args.tasks)
    server.stop()


def report(walls: dict[int, dict], bare: float, cold: float, count: int) -> None:
    one = walls[1]["wall"]
    for workers in WORKER_COUNTS[1:]:
        speedup = one / walls[workers]["wall"]
        mark = f" (target ≥ {TARGET_SPEEDUP_AT_4})" if workers == 4 else ""
        print(f"speed-up at --workers {workers}: {speedup:.2f}×{mark}")
    per_task = one / count
    task = walls[1]["task"]
    print(f"per task at --workers 1: {per_task * 1000:.0f} ms of wall time, of which the task "
          f"in its worker {task * 1000:.0f} ms: pool overhead "
          f"{(per_task - task) * 1000:+.0f} ms (target ≤ {TARGET_OVERHEAD_MS:.0f}, worker "
          "start included)")
    print(f"the same task as a bare one-shot ga run in a warm process: {bare * 1000:.0f} ms "
          f"(the task in a worker: {(task - bare) * 1000:+.0f} ms); as a cold ga process: "
          f"{cold * 1000:.0f} ms")
    peak = max(w["worker_peak_kb"] for w in walls.values()) / 1024
    cpu = walls[1]["cpu"] / count * 1000
    print(f"peak memory of a worker (max RSS): {peak:.0f} MB; CPU time per task at --workers 1 "
          f"(driver and worker, its start included): {cpu:.0f} ms; {os.cpu_count()} CPUs, load "
          "average "
          f"{os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    os.environ.setdefault("GA_LANG", "en")
    main()
