"""The ``ga`` command line: one-shot runs, management commands, exit codes (SPEC §7)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from agent_loop import Hooks
from ga import USER_TOOLS, GenericAgent, PluginAPI, handler_with_plugins, load_plugins
from llmcore.base import ConfigError, LLMError

EXIT_CODES = {"CURRENT_TASK_DONE": 0, "EXITED": 3, "FAILED": 1, "MAX_TURNS_EXCEEDED": 4,
              "NO_PROGRESS": 4, "BUDGET_EXCEEDED": 4, "ABORTED": 130}
MANAGEMENT = ("sessions", "memory")


def resolve_home(arg: str | None) -> Path:
    return Path(arg or os.environ.get("GA_HOME") or Path.home() / ".genericagent").expanduser()


def build_parser():
    import argparse

    p = argparse.ArgumentParser(
        prog="ga", description="GenericAgent: a minimal, self-evolving LLM agent.",
        epilog="Management: ga sessions | ga memory [show|sops|lint [--fix]|path]. "
               "Exit codes: 0 done, 1 failure, 2 usage/config, 3 ask_user, 4 limit, "
               "130 interrupted.")
    p.add_argument("task", nargs="*", help="the task; without one, an interactive session")
    p.add_argument("-m", "--model", help="profile name or provider:model (scripted:PATH)")
    p.add_argument("--config", help="config file (default $GA_CONFIG or <home>/config.yaml)")
    p.add_argument("--home", help="state folder (default $GA_HOME or ~/.genericagent)")
    p.add_argument("-C", "--cwd", help="working directory for tools")
    p.add_argument("--max-turns", type=int, default=100, metavar="N")
    p.add_argument("-v", "--verbose", action="store_true", help="full tool args and outputs")
    p.add_argument("--json", action="store_true", help="JSON Lines events on stdout")
    p.add_argument("--no-user-tools", action="store_true",
                   help="drop ask_user and start_long_term_update")
    return p


def setup_logging(verbose: bool) -> None:
    import logging

    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("ga: %(message)s"))
    root = logging.getLogger("ga")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    root.propagate = False


def make_agent(args, home: Path) -> GenericAgent:
    from llmcore import make_client

    cwd = Path(args.cwd or ".").absolute()
    if not cwd.is_dir():
        raise ConfigError(None, "--cwd", f"not a folder: {cwd}")
    client = make_client(args.model, config_path=args.config, home=home)
    api = PluginAPI(Hooks())
    load_plugins(home, api)
    disabled = USER_TOOLS if args.no_user_tools else ()
    return GenericAgent(client, home=home, cwd=cwd, max_turns=args.max_turns,
                        verbose=args.verbose, handler_cls=handler_with_plugins(api),
                        disabled_tools=disabled, hooks=api.hooks)


def run_once(agent: GenericAgent, task: str, render: Any) -> int:
    end: dict = {}
    try:
        for event in agent.run_task(task):
            render(event)
            if event["type"] == "task_end":
                end = event
    except KeyboardInterrupt:
        agent.abort()
        print("ga: interrupted", file=sys.stderr)
        return 130
    code = EXIT_CODES.get(end.get("result"), 1)
    if end.get("result") in ("MAX_TURNS_EXCEEDED", "NO_PROGRESS", "BUDGET_EXCEEDED"):
        print(f"ga: stopped: {end['result'].lower()} {end.get('text', '')}".rstrip(),
              file=sys.stderr)
    elif code == 1:
        print(f"ga: failed: {end.get('error') or end.get('text') or end.get('result')}",
              file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["memory"]:
            from memory.cli import memory_command

            return memory_command(argv[1:], resolve_home(None))
        args = build_parser().parse_args(argv)
        setup_logging(args.verbose)
        home = resolve_home(args.home)
        task = " ".join(args.task).strip()
        if not task and not sys.stdin.isatty():
            task = sys.stdin.read().strip()
        if not task:
            raise ConfigError(None, "task", "no task given (the interactive REPL needs a terminal)")
        agent = make_agent(args, home)
        from frontends.console import JsonRenderer, TextRenderer

        render = JsonRenderer() if args.json else TextRenderer(verbose=args.verbose)
        return run_once(agent, task, render)
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

