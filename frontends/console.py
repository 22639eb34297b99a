"""Render agent events: rich text for people, JSON Lines for programs."""

from __future__ import annotations

import json
import sys
from typing import IO

from agent_loop import _compact_tool_args, json_default
from tools import clip

JSON_EVENTS = ("task_start", "turn", "text", "thinking", "tool_call", "tool_result", "usage",
               "task_end")
COMPACT_PROGRESS_LINES = 8
PANEL_CHARS = 4000


class JsonRenderer:
    """One JSON object per line on stdout, only the documented event types."""

    def __init__(self, out: IO[str] | None = None) -> None:
        self.out = out or sys.stdout

    def __call__(self, event: dict) -> None:
        if event.get("type") not in JSON_EVENTS:
            return
        self.out.write(json.dumps(event, ensure_ascii=False, default=json_default) + "\n")
        self.out.flush()


class TextRenderer:
    """Streamed text as it arrives, one compact line per tool call, panels in verbose mode."""

    def __init__(self, out: IO[str] | None = None, err: IO[str] | None = None,
                 verbose: bool = False) -> None:
        from rich.console import Console

        self.out = out or sys.stdout
        self.console = Console(file=self.out, highlight=False, soft_wrap=True)
        self.err = Console(file=err or sys.stderr, highlight=False, soft_wrap=True)
        self.verbose = verbose
        self.usage = {"input": 0, "cached": 0, "output": 0}
        self._progress_lines = 0
        self._at_line_start = True

    def _write(self, text: str) -> None:
        if not text:
            return
        self.out.write(text)
        self.out.flush()
        self._at_line_start = text.endswith("\n")

    def _newline(self) -> None:
        if not self._at_line_start:
            self._write("\n")

    def __call__(self, event: dict) -> None:
        handler = getattr(self, "on_" + event.get("type", ""), None)
        if handler:
            handler(event)

    def on_text(self, e: dict) -> None:
        self._write(e["delta"])

    def on_thinking(self, e: dict) -> None:
        if self.verbose:
            self.err.print(e["delta"], style="dim italic", end="", markup=False)

    def on_turn(self, e: dict) -> None:
        self._newline()
        if self.verbose:
            self.console.rule(f"turn {e['turn']}", style="dim")

    def on_tool_call(self, e: dict) -> None:
        self._newline()
        self._progress_lines = 0
        if self.verbose:
            args = {k: v for k, v in e["args"].items() if not k.startswith("_")}
            body = json.dumps(args, ensure_ascii=False, indent=2, default=json_default)
            self._panel(body.replace("\\n", "\n"), f"🛠️ {e['name']}", "cyan")
        else:
            self.console.print(f"🛠️ {e['name']}({_compact_tool_args(e['name'], e['args'])})",
                               style="cyan", markup=False)
        self._at_line_start = True

    def on_progress(self, e: dict) -> None:
        text = e["text"]
        if not self.verbose:
            lines = text.count("\n") or 1
            self._progress_lines += lines
            if self._progress_lines > COMPACT_PROGRESS_LINES:
                return
        self.console.print(text, style="dim", end="", markup=False)
        self._at_line_start = text.endswith("\n")

    def on_tool_result(self, e: dict) -> None:
        data = e["data"]
        if self.verbose:
            body = data if isinstance(data, str) else json.dumps(
                data, ensure_ascii=False, indent=2, default=json_default)
            self._newline()
            self._panel(clip(body, PANEL_CHARS), f"{e['name']} result", "green")
        elif isinstance(data, dict) and data.get("status") == "error":
            self._newline()
            self.console.print(f"  ↳ {clip(str(data.get('msg', '')), 300)}", style="red",
                               markup=False)

    def on_usage(self, e: dict) -> None:
        for key in self.usage:
            self.usage[key] += e.get(key, 0) or 0

    def on_task_end(self, e: dict) -> None:
        self._newline()
        if e.get("question"):
            self.console.print(f"❓ {e['question']}", style="bold yellow", markup=False)
            for i, c in enumerate(e.get("candidates") or [], 1):
                self.console.print(f"  {i}. {c}", markup=False)
        u = self.usage
        if any(u.values()):
            self.err.print(f"tokens: {u['input']} in ({u['cached']} cached), {u['output']} out",
                           style="dim")

    def _panel(self, body: str, title: str, style: str) -> None:
        from rich.panel import Panel
        from rich.text import Text

        self.console.print(Panel(Text(body), title=title, title_align="left",
                                 border_style=style))

