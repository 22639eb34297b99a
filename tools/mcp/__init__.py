"""MCP servers as tools (SPEC §12): every Model Context Protocol server a session has becomes
tools the model calls as ``mcp__SERVER__TOOL``, dispatched like every other tool.

``config`` reads which servers a session has (config.yaml's ``mcp_servers:``, Claude-Code
JSON files, a front end's own); ``loop`` is the event-loop thread the clients live on;
``connection`` is one server's long-lived client task, its stdio process started by
``stdio`` tied to the runtime; ``hub`` holds a session's servers, their tools and calls;
``results`` turns a call's result into tool output.

Importing this package (or ``config``) imports nothing of the ``mcp`` package: only a
session that has servers loads it, in ``open_hub``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from llmcore.base import ConfigError

from .config import ServerConfig, parse_server, read_claude_json, session_servers
from .spawn import log_file, spawn, stop

if TYPE_CHECKING:
    from .hub import McpHub

log = logging.getLogger("ga.mcp")

INSTALL_HINT = 'pip install "genericagent[mcp]"'
MISSING = "MCP servers ({names}) are configured, but the mcp package is not installed: {hint}"

__all__ = ["INSTALL_HINT", "ServerConfig", "open_hub", "parse_server", "read_claude_json",
           "session_servers"]


def open_hub(servers: Iterable[ServerConfig], cwd: Path, home: Path,
             report: bool = True, names: Iterable[str] | None = None,
             redact: Callable[[str], str] = str) -> McpHub | None:
    """Start the enabled ``servers`` (or those ``names``) in parallel: a hub with their tools,
    or None when there are none. A server that does not start is one warning line and its
    tools are left out (``report=False``: no line, the hub says why); one that is
    ``required`` stops the run (``ConfigError``, exit 2). ``redact``: the run's redactor,
    for what the servers say."""
    enabled = [s for s in servers if s.enabled and (names is None or s.name in names)]
    if not enabled:
        return None
    logs = log_dir(home)
    spawned = spawn_all(enabled, cwd, logs)  # they boot while the mcp package loads
    try:
        from .hub import McpHub
    except ImportError:
        for process in spawned.values():
            if not isinstance(process, Exception):
                stop(process)
        message = MISSING.format(names=", ".join(s.name for s in enabled), hint=INSTALL_HINT)
        if any(s.required for s in enabled) or not report:
            raise ConfigError(None, "mcp_servers", message) from None
        log.warning("%s; their tools are left out", message)
        return None
    hub = McpHub(servers, cwd, logs, redact)
    failed = hub.start([s.name for s in enabled], spawned)
    for name, why in failed.items():
        cfg = hub.servers[name]
        if cfg.required:
            hub.close()
            raise ConfigError(cfg.source, f"mcp_servers.{name}",
                              f"the required MCP server did not start: {why}")
        if report:
            where = hub.log_path(name) if cfg.command else None
            log.warning("MCP server %s did not start: %s; its tools are left out%s", name, why,
                        f" (its log: {where})" if where else "")
    return hub


def spawn_all(servers: list[ServerConfig], cwd: Path, logs: Path | None) -> dict:
    """The stdio servers' processes, started now: ``{name: Popen or the OSError}``."""
    started: dict = {}
    for cfg in servers:
        if cfg.command:
            try:
                started[cfg.name] = spawn(cfg, cwd, log_file(logs, cfg.name))
            except OSError as e:  # a missing command: reported as that server's failure
                started[cfg.name] = e
    return started


def log_dir(home: Path) -> Path | None:
    """``<home>/logs``, where each stdio server's stderr goes; None when it cannot be made
    (a read-only home): the servers' stderr is then dropped, said once."""
    path = Path(home) / "logs"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        log.warning("cannot create %s (%s): MCP servers' stderr is not kept", path, e.strerror)
        return None
    return path
