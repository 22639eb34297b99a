"""Text tool mode parsing stays linear and cheap per reply.

    python bench/bench_textmode.py [--runs 5]

1. A typical reply (8 KB of prose, a code fence, two calls) against a plain regex search
   for the call tags over the same text: what finding the quoted parts costs on top.
2. Replies full of quoting constructs never closed (or closed many times over), 100 KB and
   1 MB, each followed by one real call: the 1 MB ratio stays near 10 (each closing tag is
   looked for once, not once per opener).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmcore.textmode import parse_calls  # noqa: E402

TOOLS = frozenset({"code_run", "file_read"})
RUN = '<tool_use>{"name": "code_run", "arguments": {"script": "ls"}}</tool_use>'
TYPICAL = ("<summary>read the log</summary>The build fails in `make test`; the log says:\n"
           + "The quick brown fox jumps over the lazy dog, then reads the log. " * 120
           + "\n```text\nERROR: disk full\n```\n" + RUN
           + '\n<tool_use>{"name": "file_read", "arguments": {"path": "build.log"}}</tool_use>')
UNITS = {"<think>": "<think>x ", "fence": "```\nx\n", "blockquote": "> x\n",
         "<!--": "<!-- x ", "code span": "`a ", "<pre>": "<pre>x ", "<code>": "<code>x "}
PLAIN_TAG = re.compile(r"<(tool_use|tool_call)>")


def best(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    runs = ap.parse_args().runs
    assert len(parse_calls(TYPICAL, 1, TOOLS)) == 2
    parse = best(lambda: [parse_calls(TYPICAL, 1, TOOLS) for _ in range(100)], runs) / 100
    plain = best(lambda: [PLAIN_TAG.findall(TYPICAL) for _ in range(100)], runs) / 100
    print(f"typical {len(TYPICAL) // 1000} KB reply: parse {parse * 1e6:.0f} µs, tag search "
          f"alone {plain * 1e6:.0f} µs (ratio {parse / plain:.1f}x)")
    print(f"{'construct':>12}{'100 KB ms':>11}{'1 MB ms':>10}{'ratio':>7}  (ideal 10)")
    for name, unit in UNITS.items():
        small = unit * (100_000 // len(unit)) + RUN
        large = unit * (1_000_000 // len(unit)) + RUN
        assert [c.function.name for c in parse_calls(large, 1, TOOLS)][-1] == "code_run"
        a = best(lambda r=small: parse_calls(r, 1, TOOLS), runs)
        b = best(lambda r=large: parse_calls(r, 1, TOOLS), max(runs // 2, 1))
        print(f"{name:>12}{a * 1000:>11.1f}{b * 1000:>10.1f}{b / a:>7.1f}")


if __name__ == "__main__":
    main()
