"""Render agent events: rich text for people, JSON Lines for programs. Every event is made
inert first (``frontends.terminal``): no escape sequence of outside text reaches a terminal."""

from __future__ import annotations

import json
import re
import sys
import time
from typing import IO, Callable

from agent_loop import _clean_content, _compact_tool_args, answer_text, json_default
from llmcore.base import add_cost
from llmcore.price import format_usd
from tools import clip

from .signals import held
from .terminal import OPEN_LINE, inert_event, json_line, say

JSON_EVENTS = ("task_start", "turn", "text", "thinking", "tool_call", "tool_result", "usage",
               "retry", "model_switch", "notice", "approval", "task_end")
ASK = "approval_request"  # a question for the person: asked on the terminal (stderr)
DIAGNOSTICS = ("retry", "model_switch", "notice")  # also said on stderr in --json mode
RESTARTS = ("retry", "model_switch")  # the reply starts over: drop the turn's streamed text
RESTART_NOTE = " — the reply starts over"
COMPACT_PROGRESS_LINES = 8  # live tool output shown per call in compact mode
OUTCOME_CHARS = 300  # an error message on a tool's outcome line
PANEL_CHARS = 4000
ASK_USER = "ask_user"  # its question is shown once, at the end of the task
SUMMARY_TAG = re.compile(r"<summary>(.*?)</summary>\s*", re.DOTALL)
LIVE_MARGIN_ROWS = 3  # rows left free below the live reply preview
ESTIMATE_MARK = "≈"  # before token counts estimated from characters
LIVE_PAINT_SECONDS = 1 / 15  # repaint the live preview at most this often, not per chunk


class SummaryFilter:
    """Streamed text with ``<summary>X</summary>`` shown as ``» X`` on its own line; a tag
    split across chunks is held back until it is complete."""

    OPEN, CLOSE = "<summary>", "</summary>"
    TAGS: tuple[str, ...] = (OPEN, CLOSE)  # the tags a piece may end in the middle of

    def __init__(self) -> None:
        self.pending = ""

    def complete(self, text: str) -> str:
        """``text`` after what was held back, less an end that may begin one of ``TAGS``
        (held back for the next piece)."""
        text = self.pending + text
        cut = text.rfind("<")
        tail = text[cut:] if cut >= 0 else ""
        if tail and tail not in self.TAGS and any(tag.startswith(tail) for tag in self.TAGS):
            text, self.pending = text[:cut], tail
        else:
            self.pending = ""
        return text

    def shown(self, text: str) -> str:
        """Complete text with its summary tags in the console's form."""
        return text.replace(self.OPEN, "» ").replace(self.CLOSE, "\n")

    def feed(self, text: str) -> str:
        return self.shown(self.complete(text))

    def flush(self) -> str:
        text, self.pending = self.pending, ""
        return text


def final_answer(end: dict) -> str:
    """The answer of a finished task as the user should get it: no ``<summary>`` markup."""
    if end.get("result") != "CURRENT_TASK_DONE":
        return ""
    return answer_text(str(end.get("text") or ""))


def tool_outcome(data: object) -> tuple[str, bool]:
    """How a tool call ended, for its compact line: (``ok`` | ``exit N`` | ``timeout after
    N s`` | ``error: …``, failed)."""
    if not isinstance(data, dict):
        return "ok", False
    status = str(data.get("status", "")).lower()
    if status == "timeout":
        limit = data.get("timeout")
        return f"timeout after {limit:g} s" if isinstance(limit, (int, float)) else "timeout", True
    if data.get("exit_code") not in (None, 0):
        return f"exit {data['exit_code']}", True
    if status in ("error", "failed", "refused", "declined", "aborted"):
        msg = str(data.get("msg") or data.get("error") or "").removeprefix("[Error] ")
        return (f"{status}: {clip(msg, OUTCOME_CHARS)}" if msg else status), True
    return "ok", False


def diagnostic_line(event: dict, streamed: bool) -> str:
    """The stderr line of a notice, a retry or a failover switch; ``streamed``: a partial
    reply was shown, which the retry starts over."""
    from llmcore.session import event_text

    if event.get("type") == "notice":
        return f"ga: {event.get('text', '')}"
    return f"ga: {event_text(event)}{RESTART_NOTE if streamed else ''}"


class JsonRenderer:
    """One JSON object per line on stdout, only the documented event types; retries and
    switches are diagnostics on stderr too."""

    def __init__(self, out: IO[str] | None = None) -> None:
        self.out = out or sys.stdout

    def __call__(self, event: dict) -> None:
        if event.get("type") == ASK:
            from .approve import ask_terminal

            ask_terminal(event["request"])
            return
        if event.get("type") not in JSON_EVENTS:
            return
        line = json.dumps(event, ensure_ascii=False, default=json_default)
        self.out.write(json_line(line) + "\n")
        self.out.flush()
        if event.get("type") in DIAGNOSTICS:
            say(diagnostic_line(event, False))


class TextRenderer:
    """Streamed text as it arrives, one compact line per tool call ending with how the call
    ended, panels in verbose mode.

    ``out`` gets the progress. With ``answer`` (stdout when it is not a terminal) the final
    answer, or the question of an ``ask_user`` stop, goes there alone."""

    def __init__(self, out: IO[str] | None = None, err: IO[str] | None = None,
                 verbose: bool = False, answer: IO[str] | None = None) -> None:
        from rich.console import Console

        self.out = out or sys.stdout
        self.console = Console(file=self.out, highlight=False, soft_wrap=True)
        self.err = Console(file=err or sys.stderr, highlight=False, soft_wrap=True)
        self.answer = answer
        self.result = (Console(file=answer, highlight=False, soft_wrap=True) if answer
                       else self.console)
        self.verbose = verbose
        self.usage = {"input": 0, "cached": 0, "output": 0}
        self.usage_estimated = False
        self.cost: float | None = None  # USD, when the model has a price
        self._progress_lines = 0
        self._hidden_lines = 0
        self._hidden_partial = False
        self._at_line_start = True
        self._held_call: dict | None = None  # an ask_user call, until its result
        self._streamed = False  # reply text of the current attempt was shown
        self.summaries = SummaryFilter()

    def _write(self, text: str) -> None:
        if not text:
            return
        with OPEN_LINE.lock:
            self.out.write(text)
            self.out.flush()
            self._left_open(not text.endswith("\n"))

    def _left_open(self, line_open: bool) -> None:
        """Whether ``out`` is left in the middle of a line; a diagnostic said meanwhile
        (``terminal.say``, any thread) ends it first."""
        if line_open == self._at_line_start:  # changed (streamed pieces mostly change nothing)
            self._at_line_start = not line_open
            OPEN_LINE.opened(self.out, self._end_line if line_open else None)

    def _end_line(self) -> None:
        self.out.write("\n")
        self.out.flush()
        self._at_line_start = True

    def newline(self) -> None:
        self._write(self.summaries.flush())
        if not self._at_line_start:
            self._write("\n")

    def __call__(self, event: dict) -> None:
        event = inert_event(event)  # outside text: shown, never acted on by the terminal
        kind = event.get("type", "")
        handler = getattr(self, "on_" + kind, None)
        if handler:
            handler(event)
        if kind == "text" or (kind == "thinking" and self.verbose):
            self._streamed = True
        elif kind in ("turn", "tool_call", *RESTARTS):
            self._streamed = False

    def on_retry(self, e: dict) -> None:
        """The reply starts over: end its partial line and say so."""
        self.summaries = SummaryFilter()
        self.newline()
        self.err.print(diagnostic_line(e, self._streamed), style="yellow", markup=False)

    on_model_switch = on_retry

    def on_notice(self, e: dict) -> None:
        self.newline()
        self.err.print(diagnostic_line(e, False), style="yellow", markup=False)

    def on_approval_request(self, e: dict) -> None:
        from .approve import ask_terminal

        self.newline()
        ask_terminal(e["request"])

    def on_text(self, e: dict) -> None:
        self._write(self.summaries.feed(e["delta"]))

    def on_thinking(self, e: dict) -> None:
        if self.verbose:
            self.err.print(e["delta"], style="dim italic", end="", markup=False)

    def on_turn(self, e: dict) -> None:
        self.newline()
        if self.verbose:
            self.console.rule(f"turn {e['turn']}", style="dim")

    def on_tool_call(self, e: dict) -> None:
        self.newline()
        self._progress_lines = self._hidden_lines = 0
        self._hidden_partial = False
        if e["name"] == ASK_USER:  # shown only when it does not stop with its question
            self._held_call = e
            return
        self._show_call(e)

    def _show_call(self, e: dict) -> None:
        if self.verbose:
            args = {k: v for k, v in e["args"].items() if not k.startswith("_")}
            body = json.dumps(args, ensure_ascii=False, indent=2, default=json_default)
            self._panel(body.replace("\\n", "\n"), f"🛠️ {e['name']}", "cyan")
        else:
            self.console.print(f"🛠️ {e['name']}({_compact_tool_args(e['name'], e['args'])})",
                               style="cyan", markup=False)
        self._at_line_start = True

    def on_progress(self, e: dict) -> None:
        text = e["text"] if self.verbose else self._within_cap(e["text"])
        if not text:
            return
        with OPEN_LINE.lock:
            self.console.print(text, style="dim", end="", markup=False)
            self._left_open(not text.endswith("\n"))

    def _within_cap(self, text: str) -> str:
        """The part of live output still shown in compact mode; counts the lines held back."""
        shown = []
        for piece in text.splitlines(keepends=True):
            if self._progress_lines < COMPACT_PROGRESS_LINES:
                shown.append(piece)
                self._progress_lines += piece.endswith("\n")
            else:
                self._hidden_lines += piece.endswith("\n")
                self._hidden_partial = not piece.endswith("\n")
        return "".join(shown)

    def on_tool_result(self, e: dict) -> None:
        data = e["data"]
        if e["name"] == ASK_USER:
            held, self._held_call = self._held_call, None
            if isinstance(data, dict) and data.get("status") == "INTERRUPT":
                return  # the question is shown once, at the end of the task
            if held is not None:
                self._show_call(held)
        self.newline()
        if self.verbose:
            body = data if isinstance(data, str) else json.dumps(
                data, ensure_ascii=False, indent=2, default=json_default)
            self._panel(clip(body, PANEL_CHARS), f"{e['name']} result", "green")
            return
        hidden = self._hidden_lines + self._hidden_partial
        if hidden:
            self.console.print(f"  … {hidden} more line{'s' * (hidden > 1)} (-v shows all)",
                               style="dim", markup=False)
        text, failed = tool_outcome(data)
        self.console.print(f"  ↳ {text}", style="red" if failed else "dim", markup=False)

    def on_usage(self, e: dict) -> None:
        for key in self.usage:
            self.usage[key] += e.get(key, 0) or 0
        self.usage_estimated = self.usage_estimated or bool(e.get("estimated"))
        self.cost = add_cost(self.cost, e.get("cost"))

    def on_task_end(self, e: dict) -> None:
        self._print_question(e)
        answer = final_answer(e) if self.answer is not None else ""
        if answer:
            self.answer.write(answer + "\n")
            self.answer.flush()
        if any(self.usage.values()):
            self.err.print(self._usage_line(), style="dim", markup=False)

    def _print_question(self, e: dict) -> None:
        self.newline()
        if e.get("question"):
            self.result.print(f"❓ {e['question']}", style="bold yellow", markup=False)
            for i, c in enumerate(e.get("candidates") or [], 1):
                self.result.print(f"  {i}. {c}", markup=False)

    def _usage_line(self) -> str:
        u = self.usage
        about = ESTIMATE_MARK if self.usage_estimated else ""
        line = f"tokens: {about}{u['input']} in ({u['cached']} cached), {about}{u['output']} out"
        if self.cost is not None:
            line += f", cost {about}{format_usd(self.cost)}"
        return f"{line} (estimated: the server reports none)" if about else line

    def _panel(self, body: str, title: str, style: str) -> None:
        from rich.panel import Panel
        from rich.text import Text

        # soft_wrap off here: a panel must wrap long lines, not crop them
        self.console.print(Panel(Text(body, overflow="fold"), title=title, title_align="left",
                                 border_style=style), soft_wrap=False)


class LiveRenderer(TextRenderer):
    """The REPL's renderer: a spinner while the model thinks, the streamed reply shown live
    and rendered as markdown when it is complete, and a status line with token usage."""

    def __init__(self, out: IO[str] | None = None, verbose: bool = False,
                 status: Callable[[], str] | None = None) -> None:
        super().__init__(out=out, err=out, verbose=verbose)
        self.status = status
        self._reply: list[str] = []  # streamed pieces, joined when shown (linear in size)
        self._live = None
        self._painted = 0.0
        self._spinner = None

    def __call__(self, event: dict) -> None:
        kind = event.get("type")
        if kind in RESTARTS:
            self._reply = []  # the partial reply is not kept on screen
        if kind not in ("text", "thinking", "usage"):
            self._stop_spinner()
            self._finish_reply()
        super().__call__(event)

    def on_turn(self, e: dict) -> None:
        super().on_turn(e)
        self._start_spinner("waiting for the model…")

    def on_thinking(self, e: dict) -> None:
        if self.verbose:
            self._stop_spinner()
            super().on_thinking(e)
        elif self._spinner is not None:
            self._spinner.update("thinking…")

    def on_text(self, e: dict) -> None:
        from rich.live import Live

        self._stop_spinner()
        self._reply.append(e["delta"])
        if self._live is None:
            live = Live(console=self.console, auto_refresh=False, transient=True)
            with held():  # a live display cut half-way through starting cannot be stopped
                live.start()
                self._live = live  # kept once started: one that failed to start has no stop
        now = time.monotonic()
        if now - self._painted >= LIVE_PAINT_SECONDS:
            self._live.update(self._tail(), refresh=True)
            self._painted = now

    def on_tool_call(self, e: dict) -> None:
        super().on_tool_call(e)
        if not self.verbose and e["name"] != ASK_USER:
            self._start_spinner(f"running {e['name']}…")

    def on_progress(self, e: dict) -> None:
        self._stop_spinner()
        super().on_progress(e)

    def _tail(self):
        from rich.text import Text

        rows = max(self.console.size.height - LIVE_MARGIN_ROWS, 1)
        self._reply = ["".join(self._reply)]
        return Text("\n".join(self._reply[0].rstrip("\n").rsplit("\n", rows)[-rows:]))

    def _finish_reply(self) -> None:
        if self._live is None:
            return
        from rich.markdown import Markdown

        with held():
            self._live.stop()
            self._live = None
        text = SUMMARY_TAG.sub(r"» \1\n\n", _clean_content("".join(self._reply)))
        self._reply = []
        if text:
            self.console.print(Markdown(text))
        self._at_line_start = True

    def _start_spinner(self, text: str) -> None:
        if self._spinner is None:
            spinner = self.console.status(text, spinner="dots")
            with held():
                spinner.start()
                self._spinner = spinner  # kept once started (a hung-up terminal fails it)

    def _stop_spinner(self) -> None:
        if self._spinner is not None:
            with held():
                self._spinner.stop()
                self._spinner = None

    def close(self) -> None:
        """Stop any live display (on Ctrl-C)."""
        self._stop_spinner()
        self._finish_reply()

    def on_task_end(self, e: dict) -> None:
        self._print_question(e)
        line = self._usage_line()
        if self.status is not None:
            line = f"{self.status()} · {line}"
        self.console.print(line, style="dim", markup=False)
