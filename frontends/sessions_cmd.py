"""``ga sessions [list|show ID|export ID [FILE]]``: saved sessions, read-only."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from agent_loop import cut_middle
from llmcore.images import describe
from llmcore.price import format_usd
from llmcore.secrets import Redactor, home_redactor

from .console import ESTIMATE_MARK
from .journal import list_sessions, load_session, read_events
from .runner import end_message, session_path, write_export
from .terminal import inert, inert_data, json_line

PIPED_WIDTH = 200  # no terminal to fit: keep rows on one line
CWD_CHARS = 40  # longer values are cut in the middle, so a row stays one line
MODEL_CHARS = 32
PROMPT_CHARS = 60


def run(action: str, args: Any, home: Path) -> int:
    if action in ("show", "export"):  # stored text goes out again: keys masked once more
        redact = home_redactor(home, getattr(args, "config", None))
        if action == "show":
            return show_session(home, args.id, args.verbose, redact)
        return export_session(home, args.id, args.file, redact)
    states = list_sessions(home)[: args.limit]
    if args.json:
        for s in states:
            cost = {} if s.cost is None else {"cost": s.cost}
            print(json_line(json.dumps({
                "id": s.id, "started": s.started, "cwd": s.cwd, "model": s.model,
                "turns": s.turns, "tokens": s.tokens, **cost, "tasks": s.tasks,
                "first_prompt": s.first_prompt}, ensure_ascii=False)))
        return 0
    if not states:
        print(f"no saved sessions in {home / 'sessions'}")
        return 0
    print_sessions(states)
    return 0


def print_sessions(states: list) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("id", no_wrap=True, min_width=20)
    table.add_column("started", no_wrap=True, min_width=16)
    table.add_column("cwd", no_wrap=True)
    table.add_column("model", no_wrap=True)
    table.add_column("turns", justify="right", no_wrap=True)
    table.add_column("tokens", justify="right", no_wrap=True)
    priced = any(s.cost is not None for s in states)  # no prices anywhere: no cost column
    if priced:
        table.add_column("cost", justify="right", no_wrap=True)
    table.add_column("first prompt", no_wrap=True, overflow="ellipsis", max_width=PROMPT_CHARS)
    for s in states:
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(s.started)) if s.started else "?"
        tokens = f"{ESTIMATE_MARK if s.tokens_estimated else ''}{s.tokens}"
        cost = [format_usd(s.cost) if s.cost is not None else ""] if priced else []
        table.add_row(*map(inert, (s.id, started, cut_middle(s.cwd, CWD_CHARS),
                                   cut_middle(s.model, MODEL_CHARS), str(s.turns), tokens,
                                   *cost, s.summary)))
    piped = not sys.stdout.isatty()
    Console(highlight=False, width=PIPED_WIDTH if piped else None).print(table)


def show_session(home: Path, session_id: str, verbose: bool = False,
                 redact: Redactor | None = None) -> int:
    """The session as a transcript: prompts, replies, tool lines with their outcomes."""
    from .console import TextRenderer

    path = session_path(home, session_id, "id")
    render = TextRenderer(out=sys.stdout, err=sys.stdout, verbose=verbose)
    for record in read_events(path):
        record = inert_data(redact.data(record) if redact else record)  # shown, never obeyed
        kind = record.get("type")
        if kind in ("session_start", "session_resume"):
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(record.get("time") or 0))
            verb = "started" if kind == "session_start" else "resumed"
            render.console.print(f"── session {record.get('id')} {verb} {when} · model "
                                 f"{record.get('model')} · {record.get('cwd')}", style="dim",
                                 markup=False)
        elif kind == "task_start":
            render.newline()
            render.console.print(f"\n▶ {record.get('prompt', '')}", style="bold", markup=False)
            for image in record.get("images") or []:
                render.console.print(f"  + image {image.get('name', '')} ({describe(image)})",
                                     style="dim", markup=False)
        elif kind in ("text", "thinking"):
            render({"type": kind, "delta": record.get("text", "")})
        elif kind == "task_end":
            render(record)
            message = end_message(record) or (
                "stopped: waiting for an answer" if record.get("question") is not None
                else f"done ({record.get('turns', 0)} turns)")
            if record.get("cost") is not None:
                message += f" · cost {format_usd(record['cost'])}"
            render.console.print(f"■ {message}", style="yellow", markup=False)
        elif kind in ("model", "llm_model_switch"):
            render.newline()
            render.console.print(f"(model: {record.get('name') or record.get('to')})",
                                 style="dim", markup=False)
        else:
            render(record)
    render.newline()
    return 0


def export_session(home: Path, session_id: str, target: str | None,
                   redact: Redactor | None = None) -> int:
    path = session_path(home, session_id, "id")
    state = load_session(path, with_images=False)  # images as references to <home>/images
    data = {"history": state.history, "history_info": state.history_info,
            "working": state.working, "open_turn": state.open_turn}
    text = (redact or Redactor()).dumps(data, indent=1)
    if target and target != "-":  # "-": standard output, as the default
        write_export(target, text)
        print(f"exported {state.id} to {target}")
    else:
        print(json_line(text))
    return 0
