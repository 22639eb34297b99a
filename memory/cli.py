"""``ga memory [show|sops|lint [--fix]|path]``: look at and check the long-term memory.

What it prints was mostly written by the model (the L1 index, SOP file names): each line
goes through ``out``, which the CLI gives as its terminal-safe writer (``frontends.terminal
.echo``)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from llmcore.secrets import home_redactor

from .lint import lint_store
from .store import MemoryStore

EXIT_OK = 0
EXIT_PROBLEMS = 1


Out = Callable[[str], None]


def _show(store: MemoryStore, out: Out) -> int:
    out(f"# L1 {store.l1_path}")
    out(store.insight().rstrip() or _missing(store))
    return EXIT_OK


def _missing(store: MemoryStore) -> str:
    if store.dir.is_dir():
        return "(empty)"
    return f"(no memory yet: {store.dir} is created by the first task)"


def _sops(store: MemoryStore, out: Out) -> int:
    stats = store.access_stats()
    sops = store.list_sops()
    if not sops:
        out("(no SOPs)" if store.dir.is_dir() else _missing(store))
        return EXIT_OK
    width = max(len(p.name) for p in sops)
    out(f"{'SOP'.ljust(width)}  reads  last read")
    for p in sops:
        entry = stats.get(p.name) if isinstance(stats.get(p.name), dict) else {}
        count, last = entry.get("count", 0), entry.get("last", "-")
        out(f"{p.name.ljust(width)}  {count:>5}  {last}")
    return EXIT_OK


def _lint(store: MemoryStore, fix: bool, config_path: str | None, out: Out) -> int:
    if not store.dir.exists():
        out(f"memory lint: {_missing(store)}")
        return EXIT_OK
    problems = lint_store(store, fix=fix, redactor=home_redactor(store.home, config_path))
    for p in problems:
        out(str(p))
    fixed = sum(p.fixed for p in problems)
    left = len(problems) - fixed
    if not problems:
        out("memory lint: clean")
        return EXIT_OK
    summary = f"memory lint: {len(problems)} problem(s), {fixed} fixed, {left} left"
    if left and not fix:
        summary += " (ga memory lint --fix repairs index, duplicate and temp-file problems)"
    out(summary)
    return EXIT_PROBLEMS if left else EXIT_OK


def memory_command(action: str, home: Path, fix: bool = False,
                   config_path: str | None = None, out: Out = print) -> int:
    """Run ``ga memory ACTION`` (show, sops, lint, path), each line through ``out``; returns
    the exit code (lint: 0 clean, 1 problems left). Only ``lint --fix`` writes. Lint also
    looks for the keys of the config (``config_path``, else the usual one) and of the
    environment."""
    store = MemoryStore(home)
    if action == "sops":
        return _sops(store, out)
    if action == "lint":
        return _lint(store, fix, config_path, out)
    if action == "path":
        print(store.dir)  # a value for scripts, the user's own: as it is
        return EXIT_OK
    return _show(store, out)
