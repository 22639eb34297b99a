"""File tools on big files: peak RSS of `file_read` on a 2 GB log against a bare process
that imports the same code, and the `file_patch` near-miss time on a 200,000-line file
against a patch that matches, for a near miss early in the file and one deep in it (the
search must cover the whole file within its time limit and name the closest line).

Run: python bench/bench_files.py [GB]   (targets: RSS ratio <= 1.5, near miss <= 1 s)
The log is written under the temp dir and removed afterwards. Linux (reads /proc).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools import ToolError  # noqa: E402
from tools.files import file_patch  # noqa: E402

DEFAULT_GB = 2.0
LOG_ROW = "2024-05-01 12:00:00.000 INFO  worker-{:02d} handled GET /api/items in 12 ms status=200\n"
BLOCK_ROWS = 10_000
NEEDLE = "ERROR disk quota exceeded"
PATCH_LINES = 200_000
DEEP_LINE = 150_001  # the near miss deep in the file
TARGET_RSS_RATIO = 1.5
TARGET_NEAR_MISS_S = 1.0
# The child's own peak (VmHWM): ru_maxrss would carry the parent's peak across fork + exec.
PEAK_RSS = (
    "import re, sys\n"
    "sys.path.insert(0, {root!r})\n"
    "from tools.files import file_read\n"
    "{call}\n"
    "status = open('/proc/self/status').read()\n"
    "print(re.search(r'VmHWM:\\s+(\\d+) kB', status).group(1))\n"
)


def write_log(path: Path, size: int) -> int:
    """A text log of about ``size`` bytes with ``NEEDLE`` 1,000 lines before its end."""
    block = "".join(LOG_ROW.format(i % 100) for i in range(BLOCK_ROWS)).encode()
    blocks = max(1, size // len(block))
    with open(path, "wb") as f:
        for _ in range(blocks - 1):
            f.write(block)
        tail = block.splitlines(keepends=True)
        tail[-1000] = f"2024-05-01 12:00:01.000 {NEEDLE} on /var\n".encode()
        f.write(b"".join(tail))
    return blocks * BLOCK_ROWS


def peak_rss_kb(call: str) -> int:
    code = PEAK_RSS.format(root=str(ROOT), call=call)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    return int(done.stdout.split()[-1])


def bench_read(gb: float) -> bool:
    with tempfile.TemporaryDirectory(prefix="ga-bench-") as tmp:
        log = Path(tmp) / "app.log"
        started = time.perf_counter()
        lines = write_log(log, int(gb * (1 << 30)))
        print(f"log: {log.stat().st_size / (1 << 30):.2f} GB, {lines:,} lines "
              f"(written in {time.perf_counter() - started:.1f} s)")
        bare = peak_rss_kb("pass")
        ok = True
        for label, call in (("default count", f"file_read({str(log)!r})"),
                            ("keyword near the end",
                             f"file_read({str(log)!r}, keyword={NEEDLE!r})")):
            started = time.perf_counter()
            rss = peak_rss_kb(call)
            took = time.perf_counter() - started
            ratio = rss / bare
            ok = ok and ratio <= TARGET_RSS_RATIO
            print(f"file_read, {label}: peak RSS {rss / 1024:.1f} MB against a bare process's "
                  f"{bare / 1024:.1f} MB, ratio {ratio:.2f} (target <= {TARGET_RSS_RATIO}), "
                  f"{took:.1f} s")
    return ok


def near_miss_seconds(path: Path, old: str, closest: str) -> tuple[float, bool]:
    """How long a missing ``old`` takes, and whether the search covered the file and named
    the ``closest`` line."""
    started = time.perf_counter()
    try:
        file_patch(path, old, "x")
    except ToolError as e:
        message = str(e)
    took = time.perf_counter() - started
    return took, "The closest lines in the file are" in message and closest in message


def bench_near_miss() -> bool:
    with tempfile.TemporaryDirectory(prefix="ga-bench-") as tmp:
        path = Path(tmp) / "big.py"
        body = [f"    value_{i} = compute(alpha, beta, {i})\n" for i in range(PATCH_LINES)]
        body[DEEP_LINE - 1] = "    return reticulate(splines, 42)\n"
        path.write_text("".join(body))
        started = time.perf_counter()
        file_patch(path, "value_100 = compute(alpha, beta, 100)",
                   "value_100 = compute(alpha, beta, 101)")
        hit = time.perf_counter() - started
        early, early_ok = near_miss_seconds(path, "    value_7 = compute(alpha, gamma, 7)",
                                            "8|    value_7 = compute(alpha, beta, 7)")
        deep, deep_ok = near_miss_seconds(path, "    return reticulate(splines, 43)",
                                          f"{DEEP_LINE}|    return reticulate(splines, 42)")
    for label, took, found in (("early", early, early_ok), (f"at line {DEEP_LINE:,}", deep,
                                                              deep_ok)):
        print(f"file_patch on {PATCH_LINES:,} lines, near miss {label}: {took:.2f} s "
              f"(target <= {TARGET_NEAR_MISS_S} s), ratio {took / hit:.1f} against a matching "
              f"patch ({hit:.2f} s); whole file searched and closest line named: "
              f"{'yes' if found else 'NO'}")
    return max(early, deep) <= TARGET_NEAR_MISS_S and early_ok and deep_ok


def main() -> int:
    gb = float(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_GB
    ok = bench_near_miss()
    ok = bench_read(gb) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
