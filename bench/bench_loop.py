"""Loop overhead and start-up time, as ratios against baselines measured in the same run.

    python bench/bench_loop.py [--turns 1000] [--runs 10]

1. 1,000 turns of the scripted model calling a no-op tool through the full agent
   (working memory, anchor prompt, turn-end rules), against the scripted model alone.
   Target: < 2 ms per turn of loop overhead.
2. `ga --help` against `python -c pass`. Target: ≤ 3×.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent_loop import StepOutcome  # noqa: E402
from ga import GenericAgent, GenericAgentHandler  # noqa: E402
from llmcore.scripted import ScriptedClient  # noqa: E402
from tools.spec import tool  # noqa: E402


class NoopHandler(GenericAgentHandler):
    @tool
    def do_noop(self, n: int, *, _index: int = 0):
        """Do nothing.

        Args:
            n: A counter.
        """
        return StepOutcome({"ok": n}, next_prompt=self._anchor(_index))


def script(turns: int) -> list[dict]:
    steps = [{"text": f"<summary>step {i}</summary>", "tool_calls": [
        {"name": "noop", "args": {"n": i}}]} for i in range(turns - 1)]
    return steps + [{"text": "done"}]


def model_only(turns: int) -> float:
    client = ScriptedClient(script(turns))
    start = time.perf_counter()
    for _ in range(turns):
        for _chunk in client.chat([{"role": "user", "content": "x"}], []):
            pass
    return time.perf_counter() - start


def full_loop(turns: int, home: str) -> float:
    agent = GenericAgent(ScriptedClient(script(turns)), home=home, cwd=home,
                         handler_cls=NoopHandler, max_turns=turns + 1)
    start = time.perf_counter()
    events = list(agent.run_task("benchmark"))
    elapsed = time.perf_counter() - start
    assert events[-1]["result"] == "CURRENT_TASK_DONE", events[-1]
    return elapsed


def timed_command(cmd: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                       cwd=ROOT)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as home:
        os.environ["GA_HOME"] = home
        base = model_only(args.turns)
        loop = full_loop(args.turns, home)
    per_turn = (loop - base) / args.turns * 1e6
    print(f"loop: {args.turns} turns in {loop:.3f}s; scripted model alone {base:.3f}s "
          f"(ratio {loop / base:.2f}x); loop overhead {per_turn:.0f} µs/turn (target < 2000)")
    bare = timed_command([sys.executable, "-c", "pass"], args.runs)
    # what the installed `ga` console script runs
    helpc = timed_command([sys.executable, "-c", "import sys; from frontends.cli import main; "
                           "sys.exit(main())", "--help"], args.runs)
    print(f"startup: ga --help {helpc * 1000:.0f} ms vs python -c pass {bare * 1000:.0f} ms "
          f"(ratio {helpc / bare:.2f}x, target <= 3x)")


if __name__ == "__main__":
    main()
