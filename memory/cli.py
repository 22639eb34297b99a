"""``ga memory [show|sops|lint [--fix]|path]``: look at and check the long-term memory."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from .lint import lint_store
from .store import MemoryStore

USAGE = "usage: ga memory [show|sops|lint [--fix]|path]"
EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2


def _emit(out: Any, line: str = "") -> None:
    """Print to stdout, a rich Console (``.print``) or a file-like object (``.write``)."""
    if out is None:
        print(line)
    elif hasattr(out, "print"):
        out.print(line, markup=False, highlight=False)
    else:
        out.write(line + "\n")


def _show(store: MemoryStore, out: Any) -> int:
    _emit(out, f"# L1 {store.l1_path}")
    _emit(out, store.insight().rstrip() or "(empty)")
    return EXIT_OK


def _sops(store: MemoryStore, out: Any) -> int:
    stats = store.access_stats()
    sops = store.list_sops()
    if not sops:
        _emit(out, "(no SOPs)")
        return EXIT_OK
    width = max(len(p.name) for p in sops)
    _emit(out, f"{'SOP'.ljust(width)}  reads  last read")
    for p in sops:
        entry = stats.get(p.name) if isinstance(stats.get(p.name), dict) else {}
        count, last = entry.get("count", 0), entry.get("last", "-")
        _emit(out, f"{p.name.ljust(width)}  {count:>5}  {last}")
    return EXIT_OK


def _lint(store: MemoryStore, args: list[str], out: Any) -> int:
    unknown = [a for a in args if a != "--fix"]
    if unknown:
        print(f"ga memory lint: unknown argument {unknown[0]!r}\n{USAGE}", file=sys.stderr)
        return EXIT_USAGE
    fix = "--fix" in args
    problems = lint_store(store, fix=fix)
    for p in problems:
        _emit(out, str(p))
    fixed = sum(p.fixed for p in problems)
    left = len(problems) - fixed
    if not problems:
        _emit(out, "memory lint: clean")
        return EXIT_OK
    summary = f"memory lint: {len(problems)} problem(s), {fixed} fixed, {left} left"
    if left and not fix:
        summary += " (ga memory lint --fix repairs index, duplicate and temp-file problems)"
    _emit(out, summary)
    return EXIT_PROBLEMS if left else EXIT_OK


def memory_command(argv: list[str], home: Path, out: Any = None) -> int:
    """Run ``ga memory ARGV``; returns the exit code (lint: 0 clean, 1 problems left)."""
    store = MemoryStore(home)
    store.seed()
    sub, rest = (argv[0], argv[1:]) if argv else ("show", [])
    if sub == "show" and not rest:
        return _show(store, out)
    if sub == "sops" and not rest:
        return _sops(store, out)
    if sub == "lint":
        return _lint(store, rest, out)
    if sub == "path" and not rest:
        _emit(out, str(store.dir))
        return EXIT_OK
    print(f"ga memory: unknown command {' '.join(argv)!r}\n{USAGE}", file=sys.stderr)
    return EXIT_USAGE
