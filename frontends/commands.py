"""Management commands (SPEC §7): ``ga sessions|memory|tools|config|acp``, and the options
they share with task runs.

Each command parses its own arguments, so global options may stand before or after the
command word and ``--help`` works on every command and subcommand. Read-only commands
create nothing in the home. Imports are cheap here; the agent is imported where used.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from llmcore.base import ConfigError

from .terminal import echo, json_line

if TYPE_CHECKING:
    from llmcore.config import Config, Profile

COMMANDS = ("sessions", "memory", "tools", "config", "mcp", "acp", "batch")
RUN_LIKE = ("tools", "acp")  # commands without actions that take a run's tool options
DEFAULT_ACTION = {"sessions": "list", "memory": "show", "config": "check", "mcp": "list"}
SESSIONS_LIMIT = 20
EXIT_OK = 0
EXIT_CONFIG_PROBLEMS = 2  # what `ga config check` found is a config error, as on a run


def resolve_home(arg: str | None) -> Path:
    if arg is not None and not arg.strip():
        raise ConfigError(None, "--home", "an empty path; give a folder, or leave --home out "
                          "for $GA_HOME or ~/.genericagent")
    return Path(arg or os.environ.get("GA_HOME") or Path.home() / ".genericagent").expanduser()


def add_global_options(parser: argparse.ArgumentParser, suppress: bool = False) -> None:
    """Options every command accepts, before or after its word (``suppress``: on a
    subcommand, so a value given before the subcommand is not reset)."""
    kw = {"default": argparse.SUPPRESS} if suppress else {}
    p = parser.add_argument_group("global options (before or after a command word)")
    p.add_argument("-m", "--model", help="profile name or provider:model (scripted:PATH)", **kw)
    p.add_argument("--config", help="config file (default $GA_CONFIG or <home>/config.yaml)",
                   **kw)
    p.add_argument("--home", help="state folder (default $GA_HOME or ~/.genericagent)", **kw)
    p.add_argument("-C", "--cwd", help="working directory for tools", **kw)
    p.add_argument("-v", "--verbose", action="store_true", help="full tool args and outputs",
                   **kw)
    p.add_argument("--json", action="store_true",
                   help="JSON: a task's events as JSON Lines; ga tools and ga sessions as data",
                   **kw)
    p.add_argument("--mcp-config", action="append", metavar="FILE",
                   help="more MCP servers from a Claude-Code JSON file (repeatable)", **kw)


def add_tool_options(p: argparse.ArgumentParser) -> None:
    """Options that change the tool set (task runs and ``ga tools``)."""
    p.add_argument("--no-user-tools", action="store_true",
                   help="drop ask_user and start_long_term_update")
    p.add_argument("--plugin", action="append", metavar="FILE",
                   help="load a plugin file for this run (repeatable)")


def add_limit_options(p: argparse.ArgumentParser, tasks_may_set: bool = False) -> None:
    """The limits of each task (task runs, ``ga acp``; ``ga batch``, whose tasks may set
    their own)."""
    unless = ", unless the task gives {}" if tasks_may_set else ""
    p.add_argument("--max-turns", type=positive_int, default=100, metavar="N",
                   help=f"turn limit per task{unless.format('max_turns')} (default 100)")
    p.add_argument("--max-tokens", type=positive_int, metavar="N",
                   help="token budget per task (input+output, retries included)"
                        + unless.format("max_tokens"))
    p.add_argument("--max-cost", type=positive_amount, metavar="USD",
                   help="cost budget per task in USD (needs price: on the model's profile)")


def add_sandbox_options(p: argparse.ArgumentParser) -> None:
    """What the model's actions may touch and when a person is asked (SPEC §11)."""
    from tools.sandbox import APPROVALS, MODES

    g = p.add_argument_group("sandbox and approval")
    g.add_argument("--sandbox", choices=MODES, help="what code_run and the file tools may "
                   "write (default workspace-write: -C, the home's memory/, a temp folder)")
    g.add_argument("--approval", choices=APPROVALS, help="when you are asked first (default "
                   "on-request at a terminal or in an editor, else never)")
    g.add_argument("--yolo", action="store_true", help="--sandbox full-access --approval "
                   "never: nothing confined, nothing asked (the original's behaviour)")


def positive_int(text: str) -> int:
    """An option value that must be a whole number above zero (argparse reports it)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_amount(text: str) -> float:
    """An option value that must be a number above zero (``--max-cost 0.50``)."""
    try:
        value = float(text.lstrip("$"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number above 0, got {text}")
    return value


class CommandParser(argparse.ArgumentParser):
    """Usage errors also say how to run the same words as a task instead."""

    task_hint = ""  # `ga OPTIONS -- 'WORDS'`, or empty

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)  # exact options, as the command-word scan
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # argparse's hook; never returns
        self.print_usage(sys.stderr)
        hint = f"\n(to run this as a task: {self.task_hint})" if self.task_hint else ""
        self.exit(2, f"{self.prog}: error: {message}{hint}\n")


def task_hint(name: str, argv: list[str]) -> str:
    """The command that runs ``ga NAME ARGV`` as a task: the options a task run takes stay
    options, the words (the command word first) become the quoted task."""
    run_options = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    add_global_options(run_options)
    add_tool_options(run_options)
    actions = run_options._option_string_actions
    options: list[str] = []
    words = [name]
    i = 0
    while i < len(argv):
        action = actions.get(argv[i].split("=", 1)[0])
        if action is None:
            words.append(argv[i])
            i += 1
            continue
        takes_value = action.nargs != 0 and "=" not in argv[i]
        options += argv[i:i + 1 + takes_value]
        i += 1 + takes_value
    return " ".join(["ga", *map(shlex.quote, options), "--", shlex.quote(" ".join(words))])


def command_parser(name: str, argv: list[str]) -> argparse.ArgumentParser:
    p = CommandParser(prog=f"ga {name}", description=DESCRIPTIONS[name])
    p.task_hint = task_hint(name, argv)
    add_global_options(p)
    if name in RUN_LIKE:
        add_tool_options(p)
        if name == "acp":
            add_limit_options(p)
            add_sandbox_options(p)
        return p
    sub = p.add_subparsers(dest="action", metavar="ACTION", parser_class=CommandParser)
    for action, (text, arguments) in ACTIONS[name].items():
        a = sub.add_parser(action, help=text, description=text)
        a.task_hint = p.task_hint
        add_global_options(a, suppress=True)
        for flags, kw in arguments:
            a.add_argument(*flags, **kw)
    if name == "sessions":
        p.add_argument("-n", "--limit", type=positive_int, default=SESSIONS_LIMIT,
                       help="how many to list")
    return p


DESCRIPTIONS = {
    "sessions": "Saved sessions (<home>/sessions): list, show one as a transcript, export it.",
    "memory": "Long-term memory (<home>/memory): the L1 index, SOPs, a consistency check.",
    "tools": "Every tool the model would get (built-in and plugins), where each comes from, "
             "and which are not offered and why.",
    "config": "Where the config is read from, whether it is valid, and importing the models "
              "of an original GenericAgent mykey.py.",
    "acp": "Serve the Agent Client Protocol on stdin/stdout, so an editor (Zed, JetBrains, "
           "Neovim, Emacs) runs GenericAgent as its agent. Options apply to every session.",
    "mcp": "The session's MCP servers (mcp_servers: in config.yaml, --mcp-config FILE): "
           "their state and tools, and what each tool adds to every request; or call one.",
}
ACTIONS = {
    "sessions": {
        "list": ("list saved sessions, newest first (the default)",
                 [(("-n", "--limit"), {"type": positive_int, "default": argparse.SUPPRESS,
                                       "help": "how many to list"})]),
        "show": ("print a session as a readable transcript",
                 [(("id",), {"help": "session id or a unique prefix"})]),
        "export": ("write a session's conversation as JSON (reload it with --history FILE)",
                   [(("id",), {"help": "session id or a unique prefix"}),
                    (("file",), {"nargs": "?", "help": "target file (default or -: stdout)"})]),
    },
    "memory": {
        "show": ("print the L1 index (the default)", []),
        "sops": ("list the SOPs with their read counts", []),
        "lint": ("check that the index and the files agree and that no secret was stored",
                 [(("--fix",), {"action": "store_true",
                                "help": "repair index and duplicate problems"})]),
        "path": ("print the memory folder", []),
    },
    "config": {
        "path": ("print the path of the config file ga reads", []),
        "check": ("validate the config and list its profiles, keys as set/unset "
                  "(the default); exit 2 when it finds a problem", []),
        "import": ("read an original GenericAgent mykey.py without running it and write its "
                   "sessions as profiles, keys included, to the config file (mode 600)",
                   [(("mykey",), {"metavar": "MYKEY.py", "help": "the original's mykey.py"}),
                    (("--out",), {"metavar": "FILE",
                                  "help": "write here (default: the config file ga reads)"}),
                    (("--force",), {"action": "store_true",
                                    "help": "replace the file when it exists"})]),
    },
    "mcp": {
        "list": ("start the servers, list their state and tools with each tool's cost in "
                 "tokens (the default); no model is asked", []),
        "call": ("start one server and call one of its tools",
                 [(("server",), {"help": "the server's name"}),
                  (("tool",), {"help": "the tool's name on that server (or mcp__SERVER__TOOL)"}),
                  (("arguments",), {"nargs": "?", "metavar": "JSON",
                                    "help": "the arguments as a JSON object (default {})"})]),
    },
}


def run_command(name: str, argv: list[str], opener: Callable[..., Any] | None = None) -> int:
    """Run ``ga NAME ARGV``; ``argv`` may hold global options from before the word.
    ``opener`` opens a run's session (``ga acp`` opens one per editor session)."""
    try:
        args = command_parser(name, argv).parse_args(argv)
    except SystemExit as e:  # --help, or a usage error argparse already printed
        return e.code if isinstance(e.code, int) else 2
    action = getattr(args, "action", None) or DEFAULT_ACTION.get(name)
    home = resolve_home(args.home)
    if name == "sessions":
        from . import sessions_cmd

        return sessions_cmd.run(action, args, home)
    if name == "memory":
        from memory.cli import memory_command

        return memory_command(action, home, fix=getattr(args, "fix", False),
                              config_path=args.config, out=echo)
    if name == "tools":
        return tools_command(args, home)
    if name == "acp":
        from .acp import serve

        return serve(args, home, opener)
    if name == "mcp":
        from . import mcp_cmd

        return mcp_cmd.run(action, args, home)
    return config_command(action, args, home)


# ---- ga tools ----------------------------------------------------------------------------
def tools_command(args: argparse.Namespace, home: Path) -> int:
    from tools.spec import schema_tokens, tool_specs

    from .runner import load_tools, make_agent

    api = load_tools(args, home)
    agent = make_agent(args, home, None, api)
    specs = {spec.name: spec.description for spec in tool_specs(agent.handler_cls)}
    offered = {s["function"]["name"]: s for s in agent.tools_schema()}
    rows = []
    for name in sorted(set(specs) | set(agent.unavailable)):
        reason = agent.unavailable.get(name)
        schema = offered.get(name)
        rows.append({"name": name, "offered": reason is None, "reason": reason,
                     "source": api.sources.get(name, "built-in"),
                     "tokens": schema_tokens(schema) if schema else 0,
                     "description": specs.get(name, "")})
    rows += mcp_rows(agent.mcp)
    agent.close()
    if args.json:
        print(json_line(json.dumps(rows, ensure_ascii=False, indent=1)))
        return EXIT_OK
    print_tool_rows(rows, args.verbose)
    return EXIT_OK


def mcp_rows(hub) -> list[dict]:
    """``ga tools`` rows of the MCP servers' tools, and of each server that did not start."""
    if hub is None:
        return []
    rows = [{"name": t.name, "offered": True, "reason": None, "source": f"mcp server {t.server}",
             "tokens": t.tokens, "description": t.schema["function"]["description"]}
            for t in hub.tools()]
    return rows + [{"name": f"mcp__{name}__*", "offered": False, "source": f"mcp server {name}",
                    "reason": f"the server did not start: {why}", "tokens": 0,
                    "description": ""} for name, why in hub.failed.items()]


def print_tool_rows(rows: list[dict], verbose: bool) -> None:
    """One line per tool: name, source, what it adds to every request, offered or why not."""
    width = max(len(r["name"]) for r in rows)
    source_width = max(len(r["source"]) for r in rows)
    for r in rows:
        status = "offered" if r["offered"] else f"not offered: {r['reason']}"
        cost = f"{r['tokens']:>5} tokens" if r["offered"] else " " * 12
        echo(f"{r['name'].ljust(width)}  {r['source'].ljust(source_width)}  {cost}  {status}")
        if verbose and r["description"]:
            echo(f"{' ' * width}  {r['description']}")
    offered = [r for r in rows if r["offered"]]
    total = sum(r["tokens"] for r in offered)
    echo(f"{len(offered)} of {len(rows)} tools offered to the model, {total:,} tokens "
         "in every request (JSON chars / 4)", sys.stderr)


# ---- ga config ---------------------------------------------------------------------------
def config_command(action: str, args: argparse.Namespace, home: Path) -> int:
    from llmcore.config import config_file, config_source, open_config

    path = config_file(args.config, home)
    source = config_source(args.config) or "the home's default"
    if action == "path":
        print(path)  # a value for scripts, the user's own: as it is
        if not path.exists():
            echo(f"ga: no file there yet ({source})", sys.stderr)
        return EXIT_OK
    if action == "import":
        return import_command(args, path)
    cfg = open_config(args.config, home)
    state = "" if path.exists() else ", not found: models come from -m or $GA_MODEL"
    echo(f"config: {path} ({source}{state})")
    if cfg.path:
        from llmcore.config import tools_settings
        from memory.working import Settings

        Settings.from_dict(cfg.agent, cfg.path)
        tools_settings(cfg)
    print_sandbox(cfg)
    problems = print_browser(cfg)
    problems += [line for line in print_profiles(cfg, args.model) if line]
    from .mcp_cmd import config_problems

    problems += config_problems(cfg, args.mcp_config)
    for line in short_keys(cfg):
        echo(f"note: {line}")
    for line in problems:
        echo(f"problem: {line}")
    echo("ok" if not problems else f"{len(problems)} problem(s)")
    return EXIT_CONFIG_PROBLEMS if problems else EXIT_OK


def import_command(args: argparse.Namespace, config_path: Path) -> int:
    from .config_import import import_mykey

    target = Path(args.out).expanduser() if args.out else config_path
    import_mykey(args.mykey, target, force=args.force)
    where = "" if target == config_path else f" --config {shlex.quote(str(target))}"
    echo(f"next: ga{where} config check, then ga{where} \"TASK\" (-m PROFILE for another "
         "profile)", sys.stderr)
    return EXIT_OK


def print_sandbox(cfg: Config) -> None:
    """The sandbox and approval modes a run starts with, and the mechanism's warning."""
    from tools.sandbox import Sandbox, Settings

    from .approve import mechanism_warning

    settings = Settings.from_dict(cfg.agent, cfg.path)
    sandbox = Sandbox(settings.sandbox, settings.writable_roots, settings.network)
    approval = settings.approval or "on-request at a terminal, else never"
    echo(f"sandbox: {sandbox.describe()}, approval: {approval}")
    if settings.writable_roots:
        echo(f"  also writable: {', '.join(settings.writable_roots)}")
    if not settings.network:
        echo("  network: off for code_run")
    warning = mechanism_warning(sandbox)
    if warning:
        echo(f"warning: {warning}")


def print_browser(cfg: Config) -> list[str]:
    """The browser the web tools would use, or why there is none (bad keys: ConfigError);
    returns the problems: a browser named (``browser.executable``, $GA_CHROMIUM) but missing."""
    from llmcore.secrets import mask_userinfo
    from tools.web import BrowserConfig, BrowserUnavailable, unavailable_reason

    browser = BrowserConfig.from_dict(cfg.browser, cfg.path)
    reason = unavailable_reason(browser)
    if reason:
        echo(f"browser: none, the web tools are not offered: {reason}")
    elif browser.attach:
        echo(f"browser: attach to {mask_userinfo(browser.cdp_url or 'http://127.0.0.1:9222')}")
        return []
    try:
        exe = browser.find_executable()
    except BrowserUnavailable as e:
        if not reason:
            echo(f"browser: {browser.executable} cannot start: the web tools are offered "
                 f"and answer with an install hint")
        return [str(e)] if browser.named_executable() else []
    if not reason:
        echo(f"browser: launch {exe}")
    return []


def print_profiles(cfg: Config, model: str | None) -> list[str]:
    """One line per profile (keys only as set/unset); returns the problems found."""
    from llmcore.config import select
    from llmcore.secrets import mask_userinfo

    profiles = dict(cfg.profiles)
    try:
        chosen = select(cfg, model)
    except ConfigError as e:
        chosen = None
        problems = [e.message]
    else:
        problems = []
        profiles.setdefault(chosen.name, chosen)
    echo("profiles:" if profiles else "profiles: none")
    label = " (-m)" if model else " (default)"
    for name, prof in profiles.items():
        mark = label if chosen is not None and name == chosen.name else ""
        if prof.mixin:
            echo(f"  {name}{mark}: mixin of {', '.join(prof.mixin)}")
            continue
        key, problem = key_status(prof, cfg.path)
        where = f" at {mask_userinfo(prof.base_url)}" if prof.base_url else ""
        echo(f"  {name}{mark}: {prof.provider} {prof.model}{where}, key {key}")
        problems += [problem, script_problem(prof)]
    return problems


def short_keys(cfg: Config) -> list[str]:
    """A line for each profile whose key is too short to be masked in text (SPEC §4)."""
    from llmcore.config import resolve_key
    from llmcore.secrets import KEY_MIN_CHARS

    lines = []
    for prof in cfg.profiles.values():
        try:
            key = resolve_key(prof, cfg.path) if prof.provider != "scripted" else None
        except ConfigError:  # reported as the profile's problem
            continue
        if key and len(key) < KEY_MIN_CHARS:
            lines.append(f"{prof.name}: its key has fewer than {KEY_MIN_CHARS} characters, so "
                         "it is not masked in output, logs or sessions (a local server's "
                         "placeholder such as 'ollama' is fine; a real key this short would "
                         "show wherever it is printed)")
    return lines


def script_problem(prof: Profile) -> str:
    """The problem of a scripted profile's script file (read and checked as a run would), or ""."""
    from llmcore.scripted import load_script

    if prof.provider != "scripted":
        return ""
    try:
        load_script(prof.script)
    except ConfigError as e:
        return f"{prof.name}: {e}"
    return ""


def key_status(prof: Profile, path: str | None) -> tuple[str, str]:
    """(``set (from …)`` | ``unset`` | ``none (not needed)``, problem or "") — never the key."""
    from llmcore.config import resolve_key

    if prof.provider == "scripted":
        return "not needed", ""
    try:
        key = resolve_key(prof, path)
    except ConfigError as e:
        return "unset", f"{prof.name}: {e.message}"
    if not key:
        return "none (not needed)", ""
    origin = "api_key in the file" if prof.api_key else f"${prof.api_key_env or default_env(prof)}"
    return f"set (from {origin})", ""


def default_env(prof: Profile) -> str:
    from llmcore.config import DEFAULT_KEY_ENV

    return DEFAULT_KEY_ENV[prof.provider]
