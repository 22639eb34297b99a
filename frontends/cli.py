"""The ``ga`` command line: parsing, modes, exit codes (SPEC §7).

Parsing is git-style: the first positional argument that is exactly a command name runs
that command (``commands.py``), with the other arguments, options before the word included;
otherwise the positional text is the task.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from llmcore.base import ConfigError, LLMError

from . import signals, version
from .commands import (
    COMMANDS,
    add_global_options,
    add_limit_options,
    add_sandbox_options,
    add_tool_options,
    resolve_home,
)
from .session_setup import open_session, resume_command
from .task_input import task_text
from .terminal import StderrHandler, say

if TYPE_CHECKING:
    from .runner import Session

# The agent, the journal and the front ends are imported where they are used, so that
# `ga --help` and usage errors answer fast.
__all__ = ["main"]
COMMAND_LIKE = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
TYPO_CUTOFF = 0.75  # a lone word this close to a command name (difflib ratio) is a typo
OPTION_WORDS = {"help": "--help", "version": "--version"}  # `ga help` means `ga --help`
RESUMING = ("--resume", "--continue")  # after these, the text is always a task (an answer)
EPILOG = """\
commands (ga COMMAND --help for each):
  ga sessions [list|show ID|export ID [FILE]]   saved sessions
  ga memory [show|sops|lint [--fix]|path]      long-term memory
  ga tools                                     the tools the model gets, and any hidden
  ga config [path|check]                       where the config is read from; validate it
  ga acp                                       serve an editor (Agent Client Protocol)
  ga mcp [list|call SERVER TOOL [JSON]]        MCP servers: their tools and costs; call one
  ga batch TASKS.jsonl [--workers N] [--ray]   many tasks, resumable (results: one line each)

which words are a command:
  The first argument that is exactly a command name runs that command; options may stand
  before or after it. Anything else is the task ("ga fix the memory leak").
  A lone word close to a command name (ga sesions, ga tool) is an error that suggests the
  command, not a task. ga -- TEXT always runs TEXT as a task, and after --resume or
  --continue the text is always the task (an answer).

input and output:
  Piped stdin with a task is added as <stdin> context (cat log | ga "why does this fail");
  piped stdin without a task is the task. Use < /dev/null to pass none.
  On a terminal everything is shown live. When stdout is a pipe or a file it receives only
  the final answer and the progress goes to stderr. Diagnostics always go to stderr.

exit codes: 0 done, 1 failure, 2 usage or config error, 3 the agent asked a question
  (answer with ga --resume ID "ANSWER"; a number picks a candidate), 4 a limit ended
  the task (turns, tokens, cost, no progress), 130 interrupted (Ctrl-C), 143 terminated
  (SIGTERM), 129 hung up (SIGHUP).
  Whatever ends ga, the processes it started end with it (setsid detaches a service)."""


def build_parser():
    import argparse

    p = argparse.ArgumentParser(
        prog="ga", description="GenericAgent: a minimal, self-evolving LLM agent.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False)  # exact options only: the command-word scan reads them so
    p.add_argument("task", nargs="*", help="the task; without one, an interactive session")
    add_global_options(p)
    add_tool_options(p)
    add_sandbox_options(p)
    p.add_argument("--version", action="version", version=f"ga {version()}",
                   help="print the version and exit")
    add_limit_options(p)
    p.add_argument("--resume", nargs="?", const="", metavar="ID",
                   help="continue a saved session (default: the latest), in its folder")
    p.add_argument("--continue", dest="cont", action="store_true",
                   help="continue the latest session that works in this folder (-C)")
    p.add_argument("--history", metavar="FILE", help="seed the conversation from a JSON file")
    p.add_argument("--task", dest="task_dir", metavar="DIR",
                   help="file-based subagent mode; the task text, if given, is its input")
    p.add_argument("--input", metavar="TEXT",
                   help="with --task: write DIR/input.txt first (the same as the task text)")
    p.add_argument("--func", metavar="FILE", help="run FILE's prompt once into FILE-stem.out.txt")
    p.add_argument("--reflect", metavar="SCRIPT", help="poll SCRIPT's check() and run its tasks")
    p.add_argument("--bg", action="store_true", help="with --task/--func: detach, print the PID")
    p.add_argument("--image", action="append", default=[], metavar="PATH",
                   help="send an image (PNG, JPEG, WebP, GIF) with the task; repeatable")
    return p


def find_command(parser, argv: list[str]) -> int | None:
    """The index of the command word: the first positional argument, when it is exactly a
    command name. Option values are skipped; ``--`` and ``--resume``/``--continue`` mean
    a task."""
    for i in positional_indexes(parser, argv)[:1]:
        if "--" in argv[:i] or any(tok in RESUMING for tok in argv[:i]):
            return None
        return i if argv[i] in COMMANDS else None
    return None


def positional_indexes(parser, argv: list[str]) -> list[int]:
    """Where the positional words of ``argv`` stand: option values skipped, every word
    after ``--`` included."""
    actions = parser._option_string_actions
    found: list[int] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            return found + list(range(i + 1, len(argv)))
        if not tok.startswith("-") or tok == "-":
            found.append(i)
            i += 1
            continue
        action = actions.get(tok)
        takes = action is not None and action.nargs != 0
        if takes and action.nargs == "?" and (i + 1 >= len(argv) or argv[i + 1].startswith("-")):
            takes = False
        i += 2 if takes else 1
    return found


def options_only(argv: list[str]) -> list[str]:
    """``argv`` without its positional words (the task text)."""
    text_at = set(positional_indexes(build_parser(), argv))
    return [tok for i, tok in enumerate(argv) if i not in text_at]


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


def check_lone_word(args, argv: list[str]) -> None:
    """``ga sesions``: a lone word close to a command name is a typo, not a task."""
    if "--" in argv or len(args.task) != 1 or args.resume is not None or args.cont:
        return
    word = args.task[0]
    if not COMMAND_LIKE.fullmatch(word):
        return
    import difflib

    if word.lower() in OPTION_WORDS:
        guess = f"did you mean 'ga {OPTION_WORDS[word.lower()]}'?"
    else:
        close = difflib.get_close_matches(word.lower(), COMMANDS, n=1, cutoff=TYPO_CUTOFF)
        if not close:
            return
        guess = f"did you mean 'ga {close[0]}'?"
    as_task = " ".join(["ga", *map(shlex.quote, options_only(argv)), "--", shlex.quote(word)])
    raise ConfigError(None, None, f"'{word}' is not a command ({guess}); "
                      f"to run it as a task: {as_task}")


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


def resumed_task_text(args, home: Path) -> str:
    """The task text; ``--resume "TASK"`` (no id) says how to give both, and ``--resume``
    or ``--continue`` without a task or a terminal says how to give one."""
    from llmcore.secrets import home_redactor

    from .journal import session_matches

    try:
        return task_text(args, lambda: home_redactor(home, args.config))
    except ConfigError:
        if args.resume and not session_matches(home, args.resume):
            words = shlex.quote(args.resume)
            raise ConfigError(None, "--resume", f"{args.resume!r} was read as a session id, "
                              "and no session has it; to continue the latest session with "
                              f"that task: ga --resume -- {words} (ga --resume ID {words} for "
                              "another one)") from None
        if args.resume is None and not args.cont:
            raise
        raise no_task_to_resume(args) from None


def no_task_to_resume(args) -> ConfigError:
    """``--resume``/``--continue`` with no task and no terminal: there is no picker or REPL
    to continue in, so the task must be given."""
    ga = resume_command(args)
    if args.cont:
        flag, give = "--continue", f'{ga} --continue "TASK"'
    elif args.resume:
        flag, give = "--resume", f'{ga} --resume {shlex.quote(args.resume)} "TASK"'
    else:
        flag, give = "--resume", (f'{ga} --resume ID "TASK" (ga sessions lists them; '
                                  f'{ga} --resume -- "TASK" continues the latest)')
    return ConfigError(None, flag, "no task given, and without a terminal there is no session "
                       f"picker or REPL to continue in; give the task: {give}, or run it in a "
                       "terminal")


def run_once(session: Session, task: str, render: Any) -> int:
    from .runner import print_session_id, report_end

    events = session.submit(task)
    try:
        end = session.drain(events, render)
    except signals.STOPS as stop:
        say(f"ga: {signals.describe(stop)}")
        session.stop(events, stop, render)
        print_session_id(session)
        return signals.exit_code(stop)
    return report_end(session, end)


def make_renderer(args) -> Any:
    """``--json`` events; else text: all on a terminal, or the progress on stderr and only
    the answer on stdout when stdout is a pipe or a file."""
    from .console import JsonRenderer, TextRenderer

    if args.json:
        return JsonRenderer()
    if sys.stdout.isatty():
        return TextRenderer(verbose=args.verbose)
    return TextRenderer(out=sys.stderr, verbose=args.verbose, answer=sys.stdout)


def dispatch(args, extra: list[str], argv: list[str], home: Path) -> int:
    from .runner import read_history_file, resolve_resume, work_dir

    if args.bg:
        return background(args, argv, home)
    if extra and not args.reflect:
        raise ConfigError(None, extra[0], "unknown option")
    if args.input is not None and not args.task_dir:
        raise ConfigError(None, "--input", "only with --task DIR")
    if args.cont and args.resume is not None:
        raise ConfigError(None, "--continue", "give --resume [ID] or --continue, not both")
    check_lone_word(args, argv)
    file_mode = bool(args.task_dir or args.func or args.reflect)
    interactive = not args.task and sys.stdin.isatty() and not file_mode
    if interactive and args.json:
        raise ConfigError(None, "--json", 'needs a task: ga --json "TASK" (or the task on stdin)')
    pick = interactive and args.resume == ""
    if pick:
        args.resume = None
    task = "" if interactive or file_mode else resumed_task_text(args, home)
    state = resolve_resume(home, args.resume, args.cont, work_dir(args))  # locked: ours now
    try:
        session = open_session(args, home, state)
    except BaseException:
        if state is not None and state.lock is not None:
            state.lock.release()
        raise
    try:
        session.attach(args.image)  # checked now: a bad file or a text-only model exits 2
        if args.history:  # after the checks: a run refused at start leaves no session
            session.seed(read_history_file(args.history))
        return run_mode(args, extra, session, task, interactive, pick)
    finally:
        session.close()  # the journal's lock goes with it


def run_mode(args, extra: list[str], session: Session, task: str, interactive: bool,
             pick: bool) -> int:
    """Run the session in the mode the options ask for; returns the exit code."""
    from . import taskmode

    home = session.home
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
    return run_once(session, task, make_renderer(args))


def background(args, argv: list[str], home: Path) -> int:
    from .taskmode import start_background

    return start_background(args, options_only(argv), home)


def run_args(args, extra: list[str], argv: list[str]) -> int:
    home = resolve_home(args.home)
    if args.task_dir or args.func:
        from .taskmode import write_file_mode_input

        write_file_mode_input(args)
    return dispatch(args, extra, argv, home)


def parse_run_args(parser, argv: list[str]) -> tuple[Any, list[str]] | int:
    """The options and task of a run, or the exit code of ``--help``/a usage error."""
    reflect = any(a.split("=", 1)[0] == "--reflect" for a in argv)
    known, extra = split_extra(parser, argv) if reflect else (argv, [])
    try:
        return parser.parse_intermixed_args(known), extra
    except SystemExit as e:  # --help, --version, or a usage error already printed by argparse
        return e.code if isinstance(e.code, int) else 2


def main(argv: list[str] | None = None) -> int:
    """The ``ga`` command; returns the exit code (SPEC §7)."""
    with signals.handled():
        try:
            return run_main(argv)
        except signals.STOPS as stop:
            say(f"ga: {signals.describe(stop)}")
            return signals.exit_code(stop)


def run_main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    restore_logging = setup_logging("-v" in argv or "--verbose" in argv)
    try:
        parser = build_parser()
        at = find_command(parser, argv)
        if at is not None and argv[at] == "batch":  # a driver of its own (SPEC §14)
            from .batch import batch_command

            return batch_command(argv[:at] + argv[at + 1:])
        if at is not None:
            from .commands import run_command

            return run_command(argv[at], argv[:at] + argv[at + 1:], open_session)
        parsed = parse_run_args(parser, argv)
        if isinstance(parsed, int):
            return parsed
        args, extra = parsed
        return run_args(args, extra, argv)
    except ConfigError as e:
        say(f"ga: {e}")
        return 2
    except LLMError as e:
        say(f"ga: {e}")
        return 1
    except BrokenPipeError:  # stdout closed by the reader (e.g. `| head`): stop quietly
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        return 1
    finally:
        restore_logging()
