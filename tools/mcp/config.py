"""Which MCP servers a session has: the ``mcp_servers:`` section of config.yaml (Codex CLI's
key names), Claude-Code JSON files (``--mcp-config FILE``) and servers a front end adds for
one session. Pure data and checks; nothing here imports the ``mcp`` package.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable

from llmcore.base import ConfigError, unknown_key
from llmcore.secrets import mask_userinfo

NAME = re.compile(r"[A-Za-z0-9_-]+")  # a server name becomes part of its tools' names
VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")  # ${VAR} or ${VAR:-default}
STDIO_KEYS = ("command", "args", "env", "env_vars", "cwd")
HTTP_KEYS = ("url", "bearer_token_env_var", "http_headers", "env_http_headers")
CLAUDE_KEYS = ("type", "command", "args", "env", "url", "headers")
CLAUDE_TYPES = ("stdio", "http")
DEFAULT_STARTUP_SECONDS = 10.0
DEFAULT_TOOL_SECONDS = 60.0


@dataclass(frozen=True)
class ServerConfig:
    """One MCP server (SPEC §12). ``source`` names where it was defined, for messages."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    env_vars: tuple[str, ...] = ()
    cwd: str | None = None
    url: str | None = None
    bearer_token_env_var: str | None = None
    http_headers: dict[str, str] = field(default_factory=dict)
    env_http_headers: dict[str, str] = field(default_factory=dict)
    startup_timeout_sec: float = DEFAULT_STARTUP_SECONDS
    tool_timeout_sec: float = DEFAULT_TOOL_SECONDS
    enabled: bool = True
    enabled_tools: tuple[str, ...] | None = None
    disabled_tools: tuple[str, ...] = ()
    required: bool = False
    source: str | None = None

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"

    def describe(self) -> str:
        """``stdio: mcp-server-time --local-timezone UTC`` or ``http: URL`` (its user-info
        masked)."""
        if self.command:
            return " ".join(["stdio:", self.command, *self.args])
        return f"http: {mask_userinfo(self.url or '')}"

    def offers(self, tool: str) -> bool:
        """Whether ``enabled_tools`` / ``disabled_tools`` let the server's ``tool`` through."""
        if self.enabled_tools is not None and tool not in self.enabled_tools:
            return False
        return tool not in self.disabled_tools

    def headers(self, environ: dict[str, str] | None = None) -> dict[str, str]:
        """The HTTP headers to send; a variable named for one that is unset is a
        ``ConfigError`` naming it (the server is then not started)."""
        env = os.environ if environ is None else environ
        headers = dict(self.http_headers)
        wanted = [(header, var, f"env_http_headers.{header}", "{}")
                  for header, var in self.env_http_headers.items()]
        if self.bearer_token_env_var:
            wanted.append(("Authorization", self.bearer_token_env_var, "bearer_token_env_var",
                           "Bearer {}"))
        for header, var, key, form in wanted:
            if not env.get(var):
                raise ConfigError(self.source, f"mcp_servers.{self.name}.{key}",
                                  f"environment variable {var} is not set")
            headers[header] = form.format(env[var])
        return headers


KNOWN_KEYS = [f.name for f in fields(ServerConfig) if f.name not in ("name", "source")]


def parse_servers(section: Any, path: str | None) -> dict[str, ServerConfig]:
    """The ``mcp_servers:`` section, checked: ``{name: {Codex keys}}``."""
    if not isinstance(section, dict):
        raise ConfigError(path, "mcp_servers", f"expected a mapping of servers, got "
                          f"{section!r:.40}")
    return {str(name): parse_server(str(name), raw, path) for name, raw in section.items()}


def parse_server(name: str, raw: Any, source: str | None) -> ServerConfig:
    """One server from Codex's keys; ``${VAR}`` / ``${VAR:-default}`` in ``command``,
    ``args``, ``env``, ``url`` and ``http_headers`` values are filled in from the
    environment (an enabled server's; an unset one without a default is an error)."""
    where = f"mcp_servers.{name}"
    if not NAME.fullmatch(name):
        raise ConfigError(source, where, "a server name may hold only letters, digits, _ and -")
    if not isinstance(raw, dict):
        raise ConfigError(source, where, f"expected a mapping of settings, got {raw!r:.40}")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in KNOWN_KEYS:
            raise unknown_key(source, f"{where}.{key}", str(key), KNOWN_KEYS, "setting")
        if value is not None:
            values[key] = _check(source, f"{where}.{key}", key, value)
    _check_transport(source, where, values)
    if values.get("enabled", True):
        values = _expanded(source, where, values)
    return ServerConfig(name=name, source=source, **values)


def _check(path: str | None, where: str, key: str, value: Any) -> Any:
    if key in ("enabled", "required"):
        if not isinstance(value, bool):
            raise ConfigError(path, where, f"must be true or false, got {value!r}")
        return value
    if key in ("startup_timeout_sec", "tool_timeout_sec"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ConfigError(path, where, f"must be a number of seconds above 0, got {value!r}")
        return float(value)
    if key in ("args", "env_vars", "enabled_tools", "disabled_tools"):
        if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
            raise ConfigError(path, where, f"must be a list of strings, got {value!r:.40}")
        return tuple(str(v) for v in value)
    if key in ("env", "http_headers", "env_http_headers"):
        if not isinstance(value, dict) or not all(
                isinstance(v, (str, int, float)) and not isinstance(v, bool)
                for v in value.values()):
            raise ConfigError(path, where, f"must be a mapping of names to strings, got "
                              f"{value!r:.40}")
        return {str(k): str(v) for k, v in value.items()}
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(path, where, f"must be a non-empty string, got {value!r}")
    if key == "url" and not value.startswith(("http://", "https://", "${")):
        raise ConfigError(path, where, f"must be an http:// or https:// URL, got {value!r}")
    return value


def _check_transport(path: str | None, where: str, values: dict) -> None:
    """Exactly one of ``command`` (stdio) and ``url`` (streamable HTTP), and only the
    keys of that transport."""
    if ("command" in values) == ("url" in values):
        raise ConfigError(path, where, "give either command (a server run over stdio) or url "
                          "(a streamable HTTP server)")
    other = HTTP_KEYS if "command" in values else STDIO_KEYS
    for key in other:
        if key in values:
            kind = "a stdio server (command)" if "command" in values else "an http server (url)"
            raise ConfigError(path, f"{where}.{key}", f"not a setting of {kind}")


def _expanded(path: str | None, where: str, values: dict) -> dict:
    out = dict(values)
    for key in ("command", "url"):
        if key in out:
            out[key] = expand(out[key], path, f"{where}.{key}")
    if "args" in out:
        out["args"] = tuple(expand(a, path, f"{where}.args") for a in out["args"])
    for key in ("env", "http_headers"):
        if key in out:
            out[key] = {k: expand(v, path, f"{where}.{key}.{k}") for k, v in out[key].items()}
    return out


def expand(text: str, path: str | None = None, where: str | None = None,
           environ: dict[str, str] | None = None) -> str:
    """``text`` with each ``${VAR}`` / ``${VAR:-default}`` replaced from the environment."""
    env = os.environ if environ is None else environ

    def value(m: re.Match) -> str:
        var, default = m.group(1), m.group(2)
        if default is not None:  # as in a shell: the default when unset or empty
            return env.get(var) or default
        if var in env:
            return env[var]
        raise ConfigError(path, where, f"environment variable {var} is not set (give a "
                          f"default with ${{{var}:-VALUE}})")

    return VAR.sub(value, text)


def read_claude_json(path: str | Path) -> dict[str, ServerConfig]:
    """The servers of a Claude-Code-style file: ``{"mcpServers": {NAME: {type, command,
    args, env, url, headers}}}``."""
    p = Path(path)
    source = str(p)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(source, "--mcp-config", f"cannot read it: {e.strerror or e}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(source, "--mcp-config", f"invalid JSON: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("mcpServers"), dict):
        raise ConfigError(source, "mcpServers", 'expected {"mcpServers": {NAME: {...}}}')
    return {str(name): claude_server(str(name), raw, source)
            for name, raw in data["mcpServers"].items()}


def claude_server(name: str, raw: Any, source: str | None) -> ServerConfig:
    """One Claude-Code server entry, read as the same server in Codex's keys."""
    where = f"mcpServers.{name}"
    if not isinstance(raw, dict):
        raise ConfigError(source, where, f"expected a mapping of settings, got {raw!r:.40}")
    for key in raw:
        if key not in CLAUDE_KEYS:
            raise unknown_key(source, f"{where}.{key}", str(key), CLAUDE_KEYS, "setting")
    kind = raw.get("type", "http" if "url" in raw else "stdio")
    if kind not in CLAUDE_TYPES:
        raise ConfigError(source, f"{where}.type", f"{kind!r} is not supported; use "
                          f"{' or '.join(CLAUDE_TYPES)} (streamable HTTP)")
    codex = {("http_headers" if k == "headers" else k): v for k, v in raw.items() if k != "type"}
    try:
        return parse_server(name, codex, source)
    except ConfigError as e:  # named as the user wrote it
        field_name = (e.field or "").replace("mcp_servers.", "mcpServers.", 1)
        raise ConfigError(source, field_name.replace(".http_headers", ".headers"),
                          e.message) from None


def merged(*groups: Iterable[ServerConfig]) -> list[ServerConfig]:
    """The servers of a session in order: a later one replaces an earlier one of its name
    (the config file, then each ``--mcp-config`` file, then a front end's)."""
    found: dict[str, ServerConfig] = {}
    for group in groups:
        for server in group:
            found.pop(server.name, None)
            found[server.name] = server
    return list(found.values())


def session_servers(section: Any, path: str | None, files: Iterable[str] = (),
                    extra: Iterable[ServerConfig] = ()) -> list[ServerConfig]:
    """Every server of a session: config.yaml's ``mcp_servers:``, the ``--mcp-config``
    files, then ``extra`` (a front end's, e.g. an editor's ``session/new``)."""
    groups = [parse_servers(section or {}, path).values()]
    groups += [read_claude_json(f).values() for f in files]
    return merged(*groups, extra)
