"""Sandbox cost: a confined `code_run("print(1)")` against an unconfined one, same process,
for each mechanism this machine has (Landlock, bubblewrap); a bash `echo 1` for reference.

Run: python bench/bench_sandbox.py [N]   (target: python ratio <= 1.25 for every mechanism)
The runs of both sides alternate; the ratio is of the best run of each (the least disturbed
by other load on the machine), the medians are shown beside it.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_code_run import drain  # noqa: E402

from tools import landlock  # noqa: E402
from tools.code_run import code_run  # noqa: E402
from tools.sandbox import Confinement, bwrap_works, run_temp_dir  # noqa: E402

DEFAULT_RUNS = 30
TARGET_RATIO = 1.25
CODE = {"python": ("print(1)", "1\n"), "bash": ("echo 1", "1\n")}


def run(kind: str, jail: Confinement | None, folder: str) -> None:
    code, want = CODE[kind]
    env = jail.env({}, run_temp_dir()) if jail else None
    result = drain(code_run(code, kind, cwd=folder, confine=jail, env=env))
    assert result["stdout"] == want, result


def time_ms(action) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def compare(kind: str, jail: Confinement, folder: str, runs: int) -> tuple[list, list]:
    """Timings (ms) unconfined and confined, measured in alternating rounds."""
    plain, boxed = [], []
    for _ in range(runs):
        plain.append(time_ms(lambda: run(kind, None, folder)))
        boxed.append(time_ms(lambda: run(kind, jail, folder)))
    return plain, boxed


def mechanisms() -> list[str]:
    found = ["landlock"] if landlock.abi() >= 1 else []
    return found + (["bwrap"] if bwrap_works() else [])


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_RUNS
    ok = True
    with tempfile.TemporaryDirectory() as folder:
        for mechanism in mechanisms():
            jail = Confinement(mechanism, (folder, str(run_temp_dir())))
            for kind in CODE:
                run(kind, jail, folder)  # warm the OS caches
                plain, boxed = compare(kind, jail, folder, runs)
                ratio = min(boxed) / min(plain)
                target = f" (target <= {TARGET_RATIO})" if kind == "python" else ""
                print(f"{mechanism:8} {kind:6}: unconfined {min(plain):6.1f} ms  confined "
                      f"{min(boxed):6.1f} ms  ratio {ratio:.2f}{target}  (+"
                      f"{min(boxed) - min(plain):.1f} ms; medians {statistics.median(plain):.1f}"
                      f" / {statistics.median(boxed):.1f})")
                ok = ok and (kind != "python" or ratio <= TARGET_RATIO)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
