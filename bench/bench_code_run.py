"""code_run overhead: `code_run("print(1)")` against a bare subprocess.run, same process.

Run: python bench/bench_code_run.py [N]   (target ratio <= 1.5)
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools.code_run import code_run  # noqa: E402

DEFAULT_RUNS = 30
TARGET_RATIO = 1.5


def drain(gen) -> dict:
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return stop.value


def time_ms(action, runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.mean(samples)


def bare() -> None:
    subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True, check=True)


def ours() -> None:
    result = drain(code_run("print(1)"))
    assert result["stdout"] == "1\n", result


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_RUNS
    bare()  # warm the OS caches for both
    ours()
    bare_ms = time_ms(bare, runs)
    ours_ms = time_ms(ours, runs)
    ratio = ours_ms / bare_ms
    print(f"subprocess.run: {bare_ms:.1f} ms  code_run: {ours_ms:.1f} ms  "
          f"ratio {ratio:.2f} (target <= {TARGET_RATIO}, {runs} runs each)")
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
