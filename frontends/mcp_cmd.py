"""``ga mcp [list|call]`` (SPEC §12): the session's MCP servers, their state, their tools
and what each adds to every request; one tool called by hand. No model is asked.
Also the MCP lines of ``ga config check``. What a server says (tool names, descriptions,
results, why it failed) is outside text: masked, and inert on the terminal."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmcore.base import ConfigError

from .terminal import echo, json_line

if TYPE_CHECKING:
    from llmcore.secrets import Redactor

EXIT_OK = 0
EXIT_TOOL_ERROR = 1  # the tool answered with an error, or its server did not start
DESCRIPTION_CHARS = 70  # of a tool's description in the listing


def configured(args: Any, home: Path) -> tuple[list, Any]:
    """The servers a session of these options would have, and the config."""
    from llmcore.config import open_config
    from tools.mcp import session_servers

    cfg = open_config(args.config, home)
    return session_servers(cfg.mcp_servers, cfg.path, args.mcp_config or ()), cfg


def run(action: str, args: Any, home: Path) -> int:
    from llmcore.secrets import home_redactor

    from .runner import work_dir

    servers, _ = configured(args, home)
    redact = home_redactor(home, args.config)
    if action == "call":
        return call(servers, args, home, work_dir(args), redact)
    return list_servers(servers, args, home, work_dir(args), redact)


def list_servers(servers: list, args: Any, home: Path, cwd: Path, redact: Redactor) -> int:
    from tools.mcp import open_hub

    if not servers:
        print("no MCP servers configured (mcp_servers: in config.yaml, or --mcp-config FILE)")
        return EXIT_OK
    hub = open_hub(servers, cwd, home, report=False, redact=redact)
    try:
        rows = [server_row(s, hub) for s in servers]
    finally:
        if hub is not None:
            hub.close()
    rows = redact.data(rows)  # a command line may hold a key
    if args.json:
        print(json_line(json.dumps(rows, ensure_ascii=False, indent=1)))
        return EXIT_OK
    for row in rows:
        echo(f"{row['name']}  {row['state']}  {row['transport']}  ({row['source']})")
        width = max((len(t["name"]) for t in row["tools"]), default=0)
        for tool in row["tools"]:
            text = " ".join(tool["description"].split())
            text = text[:DESCRIPTION_CHARS - 1] + "…" if len(text) > DESCRIPTION_CHARS else text
            echo(f"  {tool['name'].ljust(width)}  {tool['tokens']:>5} tokens  {text}")
    tools = [t for row in rows for t in row["tools"]]
    ready = sum(row["state"] == "ready" for row in rows)
    print(f"{len(tools)} tools from {ready} of {len(rows)} servers, "
          f"{sum(t['tokens'] for t in tools):,} tokens in every request", file=sys.stderr)
    return EXIT_OK


def server_row(cfg: Any, hub: Any) -> dict:
    state = hub.state(cfg.name) if hub is not None else "disabled"
    tools = [t for t in hub.tools() if t.server == cfg.name] if hub is not None else []
    return {"name": cfg.name, "state": state, "transport": cfg.describe(),
            "source": cfg.source or "config",
            "tools": [{"name": t.name, "tool": t.tool, "tokens": t.tokens,
                       "description": t.schema["function"]["description"]} for t in tools]}


def call(servers: list, args: Any, home: Path, cwd: Path, redact: Redactor) -> int:
    """``ga mcp call SERVER TOOL [JSON]``: start that server alone, call the tool, print
    what the model would get (images described)."""
    from tools.mcp import open_hub

    cfg = next((s for s in servers if s.name == args.server), None)
    if cfg is None:
        known = ", ".join(s.name for s in servers) or "none"
        raise ConfigError(None, "SERVER", f"no MCP server {args.server!r}; configured: {known}")
    arguments = call_arguments(args.arguments)
    hub = open_hub([cfg], cwd, home, report=False, redact=redact)
    if hub is None:
        raise ConfigError(cfg.source, f"mcp_servers.{cfg.name}.enabled", "the server is off")
    try:
        return call_tool(hub, cfg.name, args.tool, arguments, args.json)
    finally:
        hub.close()


def call_arguments(text: str | None) -> dict:
    try:
        arguments = json.loads(text) if text else {}
    except json.JSONDecodeError as e:
        raise ConfigError(None, "JSON", f"the arguments are not valid JSON: {e}") from None
    if not isinstance(arguments, dict):
        raise ConfigError(None, "JSON", "the arguments must be a JSON object, e.g. '{\"a\": 1}'")
    return arguments


def call_tool(hub: Any, server: str, tool: str, arguments: dict, as_json: bool) -> int:
    from agent_loop import tool_output

    if server in hub.failed:
        echo(f"ga: MCP server {server} did not start: {hub.failed[server]}", sys.stderr)
        return EXIT_TOOL_ERROR
    offered = {t.tool: t.name for t in hub.tools() if t.server == server}
    name = offered.get(tool) or (tool if tool in offered.values() else None)
    if name is None:
        raise ConfigError(None, "TOOL", f"MCP server {server} offers no tool {tool!r}; it offers "
                          f"{', '.join(offered) or 'none'}")
    data, _ = hub.call(name, arguments, vision=False)
    data = tool_output(data, hub.redact)  # masked and neutralised, as the model gets it
    failed = isinstance(data, dict) and data.get("status") == "error"
    if as_json:
        print(json_line(json.dumps(data, ensure_ascii=False)))
        return EXIT_TOOL_ERROR if failed else EXIT_OK
    shown = data["msg"] if failed else data
    if not isinstance(shown, str):
        shown = json.dumps(shown, ensure_ascii=False, indent=1)
    echo(shown, sys.stderr if failed else sys.stdout)
    return EXIT_TOOL_ERROR if failed else EXIT_OK


def config_problems(cfg: Any, files: Any) -> list[str]:
    """``ga config check``: one line per MCP server (not started); returns the problems
    (a command not found, a header's variable unset, the mcp package missing)."""
    from importlib.util import find_spec

    from llmcore.secrets import Redactor
    from tools.mcp import INSTALL_HINT, session_servers

    servers = session_servers(cfg.mcp_servers, cfg.path, files or ())
    echo("mcp servers:" if servers else "mcp servers: none")
    problems = []
    redact = Redactor.from_config(cfg)  # a command line may hold a key
    for s in servers:
        state = "" if s.enabled else " (disabled)"
        echo(redact(f"  {s.name}{' (required)' if s.required else ''}{state}: {s.describe()}"))
        if not s.enabled:
            continue
        if s.command and shutil.which(s.command) is None:
            problems.append(f"MCP server {s.name}: command not found: {s.command}")
        try:
            s.headers()
        except ConfigError as e:
            problems.append(f"MCP server {s.name}: {e.field}: {e.message}")
    if any(s.enabled for s in servers) and find_spec("mcp") is None:
        problems.append(f"the mcp package is not installed: {INSTALL_HINT}")
    return problems
