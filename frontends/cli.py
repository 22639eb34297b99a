"""The ``ga`` command line: modes, management commands, exit codes (SPEC §7)."""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from llmcore.base import ConfigError, LLMError

if TYPE_CHECKING:
    from ga import GenericAgent

    from .runner import Session

# The agent, the journal and the front ends are imported where they are used, so that
# `ga --help` and usage errors answer fast.
__all__ = ["main"]
MANAGEMENT = ("sessions", "memory")
ABORT_GRACE_SECONDS = 10.0  # after Ctrl-C, how long to wait for the task to stop cleanly


def resolve_home(arg: str | None) -> Path:
    return Path(arg or os.environ.get("GA_HOME") or Path.home() / ".genericagent").expanduser()


def build_parser():
    import argparse

    p = argparse.ArgumentParser(
        prog="ga", description="GenericAgent: a minimal, self-evolving LLM agent.",
        epilog="Management: ga sessions [export ID [FILE]] | ga memory [show|sops|lint [--fix]|"
               "path]. Exit codes: 0 done, 1 failure, 2 usage/config, 3 ask_user, 4 limit, "
               "130 interrupted.")
    p.add_argument("task", nargs="*", help="the task; without one, an interactive session")
    p.add_argument("-m", "--model", help="profile name or provider:model (scripted:PATH)")
    p.add_argument("--config", help="config file (default $GA_CONFIG or <home>/config.yaml)")
    p.add_argument("--home", help="state folder (default $GA_HOME or ~/.genericagent)")
    p.add_argument("-C", "--cwd", help="working directory for tools")
    p.add_argument("--max-turns", type=int, default=100, metavar="N")
    p.add_argument("--max-tokens", type=int, metavar="N",
                   help="token budget per task (input+output, retries included)")
    p.add_argument("-v", "--verbose", action="store_true", help="full tool args and outputs")
    p.add_argument("--json", action="store_true", help="JSON Lines events on stdout")
    p.add_argument("--no-user-tools", action="store_true",
                   help="drop ask_user and start_long_term_update")
    p.add_argument("--resume", nargs="?", const="", metavar="ID",
                   help="continue a saved session (default: the latest)")
    p.add_argument("--continue", dest="cont", action="store_true",
                   help="continue the latest session started in this working directory")
    p.add_argument("--history", metavar="FILE", help="seed the conversation from a JSON file")
    p.add_argument("--task", dest="task_dir", metavar="DIR", help="file-based subagent mode")
    p.add_argument("--input", metavar="TEXT", help="with --task: write DIR/input.txt first")
    p.add_argument("--func", metavar="FILE", help="run FILE's prompt once into FILE-stem.out.txt")
    p.add_argument("--reflect", metavar="SCRIPT", help="poll SCRIPT's check() and run its tasks")
    p.add_argument("--bg", action="store_true", help="with --task/--func: detach, print the PID")
    return p


def split_extra(parser, argv: list[str]) -> tuple[list[str], list[str]]:
    """For ``--reflect``: separate our options from the script's ``--key value`` pairs."""
    actions = parser._option_string_actions
    known: list[str] = []
    extra: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        name = tok.split("=", 1)[0]
        takes_value = "=" not in tok and i + 1 < len(argv) and not argv[i + 1].startswith("-")
        if name in actions:
            known.append(tok)
            if takes_value and actions[name].nargs != 0:
                known.append(argv[i + 1])
                i += 1
        elif tok.startswith("--"):
            extra.append(tok)
            if takes_value:
                extra.append(argv[i + 1])
                i += 1
        else:
            known.append(tok)
        i += 1
    return known, extra


class StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time of the message."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass  # always the current sys.stderr


def setup_logging(verbose: bool) -> Callable[[], None]:
    """Diagnostics to stderr as ``ga: ...``; returns a function that undoes it."""
    root = logging.getLogger("ga")
    saved = (list(root.handlers), root.level, root.propagate)
    handler = StderrHandler()
    handler.setFormatter(logging.Formatter("ga: %(message)s"))
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    root.propagate = False

    def restore() -> None:
        root.handlers[:], root.level, root.propagate = saved

    return restore


def make_agent(args, home: Path) -> GenericAgent:
    from agent_loop import Hooks
    from ga import (
        USER_TOOLS,
        GenericAgent,
        PluginAPI,
        Settings,
        handler_with_plugins,
        load_plugins,
    )
    from llmcore import make_client
    from llmcore.config import config_file, load_config

    cwd = Path(args.cwd or ".").absolute()
    if not cwd.is_dir():
        raise ConfigError(None, "--cwd", f"not a folder: {cwd}")
    client = make_client(args.model, config_path=args.config, home=home)
    cfg = load_config(config_file(args.config, home), required=bool(args.config))
    settings = Settings.from_dict(cfg.agent, cfg.path)
    api = PluginAPI(Hooks())
    load_plugins(home, api)
    disabled = USER_TOOLS if args.no_user_tools else ()
    return GenericAgent(client, home=home, cwd=cwd, max_turns=args.max_turns,
                        verbose=args.verbose, handler_cls=handler_with_plugins(api),
                        disabled_tools=disabled, hooks=api.hooks, task_dir=args.task_dir,
                        settings=settings)


def open_session(args, agent: GenericAgent, home: Path) -> Session:
    """The journal (new, or the resumed one), the seed history and the token budget."""
    from llmcore import make_client

    from .journal import Journal
    from .runner import Session, TokenBudget, read_history_file, resolve_resume

    state = resolve_resume(home, args.resume, args.cont, agent.cwd)
    if state is not None:
        agent.restore(state.history, state.history_info, state.working)
        print(f"ga: resumed session {state.id} ({state.turns} turns)", file=sys.stderr)
    journal = Journal(home, agent, state.id if state else None, state)
    session = Session(agent, home, journal,
                      lambda name: make_client(name, config_path=args.config, home=home))
    if args.history:
        session.seed(read_history_file(args.history))
    agent.listeners.append(TokenBudget(agent, args.max_tokens))
    return session


def run_once(session: Session, task: str, render: Any) -> int:
    from .runner import print_session_id, report_end

    events = session.submit(task)
    try:
        end = session.drain(events, render)
    except KeyboardInterrupt:
        session.abort()
        print("ga: interrupted", file=sys.stderr)
        wait_stopped(session, events)
        print_session_id(session)
        return 130
    return report_end(session, end)


def wait_stopped(session: Session, events: Any) -> None:
    deadline = time.monotonic() + ABORT_GRACE_SECONDS

    def tick() -> None:
        if time.monotonic() > deadline:
            raise TimeoutError

    try:
        session.drain(events, lambda event: None, tick)
    except (TimeoutError, KeyboardInterrupt):
        print("ga: the task did not stop in time", file=sys.stderr)


def make_renderer(args) -> Any:
    from .console import JsonRenderer, TextRenderer

    return JsonRenderer() if args.json else TextRenderer(verbose=args.verbose)


def dispatch(args, extra: list[str], argv: list[str], home: Path) -> int:
    from . import taskmode

    if args.bg:
        return background(args, argv, home)
    if extra and not args.reflect:
        raise ConfigError(None, extra[0], "unknown option")
    if args.input is not None and not args.task_dir:
        raise ConfigError(None, "--input", "only with --task DIR")
    task = " ".join(args.task).strip()
    interactive = not task and sys.stdin.isatty() and not (args.task_dir or args.func
                                                           or args.reflect)
    pick = interactive and args.resume == ""
    if pick:
        args.resume = None
    session = open_session(args, make_agent(args, home), home)
    if args.task_dir:
        return taskmode.run_task_mode(session, Path(args.task_dir))
    if args.func:
        return taskmode.run_func(session, Path(args.func), make_renderer(args))
    if args.reflect:
        from .reflect import parse_extra, run_reflect

        extras = {"home": str(home), "cwd": str(session.agent.cwd), **parse_extra(extra)}
        return run_reflect(session, Path(args.reflect), extras, make_renderer(args))
    if interactive:
        from .repl import run_repl

        return run_repl(session, args.verbose, pick_resume=pick)
    if not task and not sys.stdin.isatty():
        task = sys.stdin.read().strip()
    if not task:
        raise ConfigError(None, "task", "no task given")
    return run_once(session, task, make_renderer(args))


def background(args, argv: list[str], home: Path) -> int:
    from . import taskmode

    if not (args.task_dir or args.func):
        raise ConfigError(None, "--bg", "only with --task or --func")
    if args.task_dir and args.input is not None:
        taskmode.write_input(Path(args.task_dir), args.input)
    log_path = home / "logs" / "bg" / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    return taskmode.spawn_background(argv, log_path)


def run_args(args, extra: list[str], argv: list[str]) -> int:
    home = resolve_home(args.home)
    if args.task_dir and args.input is not None and not args.bg:
        from .taskmode import write_input

        write_input(Path(args.task_dir), args.input)
    return dispatch(args, extra, argv, home)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["memory"]:
            from memory.cli import memory_command

            return memory_command(argv[1:], resolve_home(None))
        if argv[:1] == ["sessions"]:
            from .sessions_cmd import sessions_command

            return sessions_command(argv[1:], resolve_home)
        parser = build_parser()
        known, extra = split_extra(parser, argv) if "--reflect" in " ".join(argv) else (argv, [])
        try:
            args = parser.parse_args(known)
        except SystemExit as e:  # --help, or a usage error already printed by argparse
            return e.code if isinstance(e.code, int) else 2
        restore_logging = setup_logging(args.verbose)
        try:
            return run_args(args, extra, argv)
        finally:
            restore_logging()
    except ConfigError as e:
        print(f"ga: {e}", file=sys.stderr)
        return 2
    except LLMError as e:
        print(f"ga: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("ga: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # stdout closed by the reader (e.g. `| head`): stop quietly
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        return 1
