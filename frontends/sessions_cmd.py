"""``ga sessions``: list saved sessions; ``ga sessions export ID [FILE]``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from llmcore.base import ConfigError
from sessions import find_session, format_sessions, list_sessions, load_session

DEFAULT_LIMIT = 20


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
    print("id  started  cwd  model  turns  tokens  first prompt")
    for line in format_sessions(states[: args.limit]):
        print(line)
    return 0


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
        from tools.files import atomic_write

        atomic_write(Path(target), text)
        print(f"exported {state.id} to {target}")
    else:
        print(text)
    return 0
