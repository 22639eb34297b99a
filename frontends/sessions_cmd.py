"""``ga sessions``: list saved sessions; ``ga sessions export ID [FILE]``."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Callable

from llmcore.base import ConfigError

from .console import ESTIMATE_MARK
from .journal import find_session, list_sessions, load_session

DEFAULT_LIMIT = 20
PIPED_WIDTH = 200  # no terminal to fit: keep rows on one line


def sessions_command(argv: list[str], resolve_home: Callable[[str | None], Path]) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="ga sessions", description="Saved sessions, newest first.")
    p.add_argument("action", nargs="?", choices=("list", "export"), default="list")
    p.add_argument("id", nargs="?", help="session id (or a unique prefix) for export")
    p.add_argument("file", nargs="?", help="export target (default: stdout)")
    p.add_argument("--home", help="state folder (default $GA_HOME or ~/.genericagent)")
    p.add_argument("-n", "--limit", type=int, default=DEFAULT_LIMIT, help="how many to list")
    args = p.parse_args(argv)
    home = resolve_home(args.home)
    if args.action == "export":
        return export_session(home, args.id, args.file)
    states = list_sessions(home)
    if not states:
        print(f"no saved sessions in {home / 'sessions'}")
        return 0
    print_sessions(states[: args.limit])
    return 0


def print_sessions(states: list) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("id", no_wrap=True, min_width=20)
    table.add_column("started", no_wrap=True, min_width=16)
    table.add_column("cwd", overflow="fold", max_width=40)
    table.add_column("model", overflow="fold", max_width=40)
    table.add_column("turns", justify="right", no_wrap=True)
    table.add_column("tokens", justify="right", no_wrap=True)
    table.add_column("first prompt", overflow="fold", max_width=60)
    for s in states:
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(s.started)) if s.started else "?"
        tokens = f"{ESTIMATE_MARK if s.tokens_estimated else ''}{s.tokens}"
        table.add_row(s.id, started, s.cwd, s.model, str(s.turns), tokens, s.summary)
    piped = not sys.stdout.isatty()
    Console(highlight=False, width=PIPED_WIDTH if piped else None).print(table)


def export_session(home: Path, session_id: str | None, target: str | None) -> int:
    if not session_id:
        raise ConfigError(None, "id", "ga sessions export ID [FILE]")
    path = find_session(home, session_id)
    if path is None:
        raise ConfigError(None, "id", f"no saved session {session_id!r}")
    state = load_session(path)
    data = {"history": state.history, "history_info": state.history_info,
            "working": state.working}
    text = json.dumps(data, ensure_ascii=False, indent=1, default=str)
    if target:
        from tools.fsutil import atomic_write

        atomic_write(Path(target), text)
        print(f"exported {state.id} to {target}")
    else:
        print(text)
    return 0
