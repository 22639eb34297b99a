"""What tracing costs, against the same work untraced in the same run.

    python bench/bench_tracing.py [--turns 100] [--runs 7]

1. A 100-turn scripted task (a tool call a turn) with tracing off, and traced into the
   SDK's in-memory exporter (with and without message content), in CPU time of the process
   (its threads included). Target: ≤ 0.5 ms a turn.
2. `ga --help` with no OTEL_* variable: no OpenTelemetry module imported, and its time against
   `ga --help` with tracing asked for (tracing never starts for --help: the same).
3. The exit of a one-turn `ga` run whose OTLP endpoint does not answer (a socket that takes
   connections and never replies; a closed port), against the same run untraced.
   Target: ≤ 2 s added (the SDK's import included).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_loop import NoopHandler  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from frontends.spans import Tracer  # noqa: E402
from ga import GenericAgent  # noqa: E402
from llmcore.scripted import ScriptedClient  # noqa: E402

TARGET_TURN_MS = 0.5
TARGET_EXIT_S = 2.0


def script(turns: int) -> list[dict]:
    steps = [{"text": f"<summary>step {i}</summary>", "usage": {"input": 900, "output": 30},
              "tool_calls": [{"name": "noop", "args": {"n": i}}]} for i in range(turns - 1)]
    return steps + [{"text": "done"}]


def task_seconds(turns: int, home: str, tracer: Tracer | None) -> float:
    agent = GenericAgent(ScriptedClient(script(turns)), home=home, cwd=home,
                         handler_cls=NoopHandler, max_turns=turns + 1)
    if tracer is not None:
        tracer.watch(agent)
    start = time.process_time()  # CPU time of all threads: other processes' load stays out
    end = list(agent.run_task("benchmark"))[-1]
    elapsed = time.process_time() - start
    assert end["result"] == "CURRENT_TASK_DONE", end
    return elapsed


def loop_overhead(turns: int, runs: int, home: str) -> None:
    off, on, content = [], [], []
    spans = 0
    for _ in range(runs):  # interleaved: the machine's load falls on all three alike
        off.append(task_seconds(turns, home, None))
        exporter = InMemorySpanExporter()
        tracer = Tracer([exporter])
        on.append(task_seconds(turns, home, tracer))
        tracer.close()
        spans = len(exporter.get_finished_spans())
        tracer = Tracer([InMemorySpanExporter()], capture=True)
        content.append(task_seconds(turns, home, tracer))
        tracer.close()
    base = statistics.median(off)
    for label, times in (("traced", on), ("traced with content", content)):
        per_turn = (statistics.median(times) - base) / turns * 1000
        print(f"loop, {label}: {statistics.median(times) * 1000:.1f} ms vs off "
              f"{base * 1000:.1f} ms for {turns} turns ({spans} spans): "
              f"{per_turn:+.3f} ms a turn (target <= {TARGET_TURN_MS})")


def command_seconds(args: list[str], runs: int, env: dict) -> tuple[float, str]:
    times, err = [], ""
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True,
                              cwd=env["GA_HOME"])
        times.append(time.perf_counter() - start)
        err = done.stderr
    return statistics.median(times), err


def help_unchanged(runs: int, env: dict) -> None:
    ga = str(ROOT / "ga.py")
    off, err = command_seconds(["-X", "importtime", ga, "--help"], runs, env)
    otel = [line for line in err.splitlines() if "| opentelemetry" in line]
    asked, _ = command_seconds([ga, "--help"], runs, {**env, "OTEL_TRACES_EXPORTER": "otlp"})
    plain, _ = command_seconds([ga, "--help"], runs, env)
    print(f"ga --help: {plain * 1000:.0f} ms with no OTEL_* variable, {asked * 1000:.0f} ms "
          f"with OTEL_TRACES_EXPORTER=otlp (ratio {plain / asked:.2f}); OpenTelemetry modules "
          f"imported: {len(otel)}")


def exit_delay(runs: int, env: dict, home: str) -> None:
    steps = Path(home) / "one.yaml"
    steps.write_text("- text: the answer\n")
    args = [str(ROOT / "ga.py"), "-m", f"scripted:{steps}", "go"]
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)  # takes connections, never answers
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
    try:
        base, _ = command_seconds(args, runs, env)
        for label, sock in (("does not answer", silent), ("refuses", closed)):
            url = f"http://127.0.0.1:{sock.getsockname()[1]}"
            took, _ = command_seconds(args, runs, {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": url})
            print(f"exit, endpoint that {label}: {took:.2f} s vs untraced {base:.2f} s: "
                  f"{took - base:+.2f} s (target <= {TARGET_EXIT_S})")
    finally:
        silent.close()
        closed.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as home:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env.update(GA_HOME=home, PYTHONPATH=str(ROOT))
        os.environ["GA_HOME"] = home
        loop_overhead(args.turns, args.runs, home)
        help_unchanged(args.runs, env)
        exit_delay(args.runs, env, home)


if __name__ == "__main__":
    main()
