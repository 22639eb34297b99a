"""The interactive REPL: line editing with history, slash commands, Ctrl-C aborts a task.

Ctrl-C while a task runs aborts it (running code is killed, the session stays); a second
Ctrl-C before it has stopped, or two in a row at the prompt, quits. SIGTERM and SIGHUP stop
the task and quit. ``ask_user`` questions are answered inline; a number picks one of the
candidates.
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path
from typing import Any, Callable

from llmcore.base import ConfigError
from llmcore.images import describe as describe_image
from llmcore.price import format_usd

from .approve import describe
from .console import LiveRenderer
from .runner import Session, end_message, export_history
from .signals import Terminated
from .terminal import inert, say

PROMPT = "ga> "
ANSWER_PROMPT = "answer> "
PICK_PROMPT = "session> "
HISTORY_FILE = "repl_history"
HISTORY_LENGTH = 1000
RECENT_SESSIONS = 10
KEY_INFO_SHOWN = 60  # characters of key_info in the /resume confirmation
QUIT = "quit"
HELP = """Commands:
  /model [NAME]        list the models, or switch (the conversation is kept)
  /session.KEY=VALUE   change a setting of the current model (e.g. /session.temperature=0.2)
  /resume              pick a recent session and continue it
  /new                 start a new conversation
  /export [FILE]       write the conversation to a JSON file (reload with --history FILE)
  /cost                what this session has cost so far (needs price: on the model)
  /image [PATH|clear]  attach an image to your next message (no PATH: list attached ones)
  /sandbox [MODE]      show or set what the agent may write: read-only, workspace-write,
                       full-access
  /approval [MODE]     show or set when you are asked first: never, on-request, always
  /exit                quit (also Ctrl-D, or Ctrl-C twice)
Ctrl-C while a task runs aborts it; the session stays."""


def setup_readline(home: Path) -> Any:
    """Line editing with a history file in the home; None when readline is unavailable."""
    try:
        import readline
    except ImportError:
        return None
    path = home / HISTORY_FILE
    try:
        readline.read_history_file(path)
    except OSError:
        pass  # first run: no history yet
    readline.set_history_length(HISTORY_LENGTH)
    return readline


def save_readline(rl: Any, home: Path, redact: Callable[[str], str]) -> None:
    """Write the line history, keys typed at the prompt masked."""
    if rl is None:
        return
    for i in range(rl.get_current_history_length()):
        line = rl.get_history_item(i + 1) or ""  # 1-based; replace_history_item is 0-based
        masked = redact(line)
        if masked != line:
            rl.replace_history_item(i, masked)
    try:
        home.mkdir(parents=True, exist_ok=True)
        rl.write_history_file(home / HISTORY_FILE)
    except OSError as e:
        say(f"ga: cannot save line history: {e}")


class Repl:
    def __init__(self, session: Session, verbose: bool = False) -> None:
        self.session = session
        self.verbose = verbose
        self.out = sys.stdout
        self.readline: Any = None
        self.last_cost: float | None = None  # USD of the last task, when priced

    def say(self, text: str) -> None:
        """The REPL's own lines (questions, memory, listings hold outside text): inert."""
        print(inert(text), file=self.out, flush=True)

    def status(self) -> str:
        return f"[{self.session.agent.llmclient.name}] session {self.session.id}"

    # ---- the loop --------------------------------------------------------------------
    def loop(self) -> int:
        rl = self.readline = setup_readline(self.session.home)
        self.say(f"GenericAgent · model {self.session.agent.llmclient.name} · "
                 f"{describe(self.session.agent)} · /help for commands, /exit to quit")
        try:
            return self._loop()
        finally:
            save_readline(rl, self.session.home, self.session.agent.redactor)
            self.session.close()
            say(f"ga: session {self.session.id}")

    def _loop(self) -> int:
        pending_quit = False
        while True:
            try:
                line = input(PROMPT).strip()
            except EOFError:
                self.say("")
                return 0
            except KeyboardInterrupt:
                if pending_quit:
                    self.say("")
                    return 130
                pending_quit = True
                self.say("\n(Ctrl-C again or /exit to quit)")
                continue
            pending_quit = False
            if not line:
                continue
            outcome = self.command(line) if line.startswith("/") else self.run(line)
            if outcome == QUIT:
                return 130 if not line.startswith("/") else 0

    def run(self, task: str) -> str | None:
        """Run a task; answer its ``ask_user`` questions inline. QUIT on a second Ctrl-C."""
        while task:
            try:
                end = self._run_one(task)
            except ConfigError as e:  # e.g. attached images the current model cannot see
                self.say(f"error: {e}")
                return None
            if end is None:
                return QUIT
            self.last_cost = end.get("cost")
            message = end_message(end)
            if message:
                say(f"ga: {message}")
            task = self.answer(end) if end.get("question") else ""
        return None

    def _run_one(self, task: str) -> dict | None:
        render = LiveRenderer(out=self.out, verbose=self.verbose, status=self.status)
        events = self.session.submit(task)
        while True:
            try:
                return self.session.drain(events, render)
            except Terminated as stop:  # SIGTERM/SIGHUP end the REPL, not only the task
                render.close()
                self.session.stop(events, stop)
                raise
            except KeyboardInterrupt:
                render.close()
                if self.session.aborted:
                    return None
                self.session.abort()
                self.say("\n[aborting the task… Ctrl-C again to quit]")

    def answer(self, end: dict) -> str:
        """Read the answer to an ``ask_user`` question (the agent maps a number to its
        candidate)."""
        from memory.working import pick_answer

        reply = self._input(ANSWER_PROMPT)
        if pick_answer(reply, end.get("candidates") or []) != reply:
            self._forget_last()  # a pick by number is no line worth recalling
        return reply

    def _forget_last(self) -> None:
        """Drop the line just read from the line history."""
        rl = self.readline
        if rl is not None and rl.get_current_history_length():
            rl.remove_history_item(rl.get_current_history_length() - 1)

    # ---- slash commands --------------------------------------------------------------
    def command(self, line: str) -> str | None:
        name, _, arg = line[1:].partition(" ")
        arg = arg.strip()
        if name in ("exit", "quit"):
            return QUIT
        if name.startswith("session.") and "=" in name + arg:
            return self.cmd_option(line[len("/session."):])
        handler = getattr(self, f"cmd_{name}", None)
        if handler is None:
            self.say(f"unknown command /{name}; /help lists them")
            return None
        try:
            handler(arg)
        except ConfigError as e:
            self.say(f"error: {e}")
        return None

    def cmd_help(self, arg: str) -> None:
        self.say(HELP)

    def cmd_model(self, arg: str) -> None:
        current = self.session.agent.llmclient.name
        if not arg:
            for name in self.session.model_names():
                self.say(f"{'*' if name == current else ' '} {name}")
            return
        try:
            new = self.session.switch_model(arg)
        except ConfigError as e:
            self.say(f"error: {e}; still using {current}")
            return
        self.say(f"model: {current} -> {new} (conversation kept)")
        pending = len(self.session.pending_images)
        if pending and not getattr(self.session.agent.llmclient, "vision", True):
            self.say(f"note: {new} cannot see images; the {pending} image(s) attached to your "
                     "next message would be refused: /image clear drops them, or /model back")

    def cmd_image(self, arg: str) -> None:
        pending = self.session.pending_images
        if arg == "clear":
            pending.clear()
            self.say("attached images dropped")
            return
        if arg:
            try:  # a path dropped into the terminal comes quoted or with escaped spaces
                paths = [self.session.agent.cwd / Path(a).expanduser() for a in shlex.split(arg)]
            except ValueError as e:
                raise ConfigError(None, "/image", f"{e}: {arg}") from None
            for block in self.session.attach(paths):
                self.say(f"attached {block['name']} ({describe_image(block)}); it goes with "
                         "your next message")
            return
        names = ", ".join(f"{b['name']} ({describe_image(b)})" for b in pending)
        self.say(f"attached: {names}" if names else "no image attached; /image PATH adds one")

    def cmd_option(self, text: str) -> None:
        key, _, value = text.partition("=")
        try:
            self.session.agent.llmclient.set_option(key.strip(), value.strip())
        except ConfigError as e:
            self.say(f"error: {e}")
            return
        self.say(f"{key.strip()} = {value.strip()}")

    def cmd_cost(self, arg: str) -> None:
        spent = self.session.journal.cost
        client = self.session.agent.llmclient
        unpriced = ", ".join(getattr(client, "unpriced", lambda: [client.name])())
        if spent is None and not unpriced:
            self.say("no cost yet: this session has made no request")
            return
        if spent is None:
            self.say(f"no cost to show: model {unpriced} has no price; give its profile "
                     "price: {input: USD, output: USD} (per million tokens) in the config")
            return
        last = f" (last task {format_usd(self.last_cost)})" if self.last_cost is not None else ""
        self.say(f"session {self.session.id}: {format_usd(spent)} so far{last}")
        if unpriced:
            self.say(f"(model {unpriced} has no price: its requests are not counted)")

    def cmd_sandbox(self, arg: str) -> None:
        from tools.sandbox import MODES, choice

        agent = self.session.agent
        if arg:
            agent.sandbox.mode = choice(arg, MODES, None, "/sandbox")
        self.say(describe(agent))

    def cmd_approval(self, arg: str) -> None:
        from tools.sandbox import APPROVALS, choice

        agent = self.session.agent
        if arg:
            agent.approvals.mode = choice(arg, APPROVALS, None, "/approval")
        self.say(describe(agent))

    def cmd_new(self, arg: str) -> None:
        self.session.new()
        self.say(f"new conversation: session {self.session.id}")

    def cmd_export(self, arg: str) -> None:
        path = Path(arg or f"ga-history-{self.session.id}.json").expanduser()
        if not path.is_absolute():
            path = self.session.agent.cwd / path
        self.say(f"exported to {export_history(self.session.agent, path)}")

    def cmd_resume(self, arg: str) -> None:
        from .journal import claim_session, list_sessions

        recent = [s for s in list_sessions(self.session.home)
                  if s.id != self.session.id][:RECENT_SESSIONS]
        if not recent:
            self.say("no saved sessions")
            return
        for i, s in enumerate(recent, 1):
            when = time.strftime("%m-%d %H:%M", time.localtime(s.started)) if s.started else "?"
            self.say(f"{i:2}. {s.id}  {when}  turns={s.turns}  {s.summary}")
        pick = arg or self._input(PICK_PROMPT)
        if pick and not arg:
            self._forget_last()  # "1" picks a session; not a line worth recalling
        chosen = self._pick(recent, pick)
        if chosen is None:
            self.say("nothing resumed")
            return
        state = claim_session(chosen.path)
        self.session.resume(state)
        stale = self.session.agent.texts.table["stale_key_info"]
        self.say(f"resumed session {state.id}: {len(state.history)} messages, "
                 f"key_info: {key_info_line(state.working.get('key_info') or '', stale)}, "
                 f"in {self.session.agent.cwd}")

    def _input(self, prompt: str) -> str:
        try:
            return input(prompt).strip()
        except (EOFError, KeyboardInterrupt):
            self.say("")
            return ""

    @staticmethod
    def _pick(recent: list, pick: str) -> Any:
        if pick.isdigit() and 1 <= int(pick) <= len(recent):
            return recent[int(pick) - 1]
        return next((s for s in recent if pick and s.id.startswith(pick)), None)


def key_info_line(text: str, stale_note: str) -> str:
    """key_info on one line, without the runtime's staleness note (rendered from the
    ``stale_note`` template), cut to ``KEY_INFO_SHOWN`` characters."""
    from memory.working import drop_rendered

    lines = [ln.strip() for ln in drop_rendered(text, stale_note).splitlines() if ln.strip()]
    shown = " / ".join(lines) or "-"
    return shown if len(shown) <= KEY_INFO_SHOWN else shown[:KEY_INFO_SHOWN] + "..."


def run_repl(session: Session, verbose: bool = False, pick_resume: bool = False) -> int:
    repl = Repl(session, verbose)
    if pick_resume:
        repl.cmd_resume("")
    return repl.loop()
