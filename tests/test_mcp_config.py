"""Which MCP servers a session has (SPEC §12): config.yaml's ``mcp_servers:`` with Codex's
key names, Claude-Code JSON files, ``${VAR}`` in values; bad ones are config errors naming
file and field. Nothing here starts a server."""

from __future__ import annotations

import json

import pytest
import yaml

from frontends.cli import main
from llmcore.base import ConfigError
from tools.mcp.config import ServerConfig, merged, parse_server, read_claude_json


def write_config(home, servers: dict) -> str:
    path = home / "config.yaml"
    path.write_text(yaml.safe_dump({"mcp_servers": servers}))
    return str(path)


def test_codex_keys_are_read_with_their_defaults():
    cfg = parse_server("git", {"command": "mcp-server-git", "args": ["--repository", "."],
                               "env": {"LEVEL": 3}, "env_vars": ["HOME"],
                               "enabled_tools": ["git_status"], "required": True}, "c.yaml")
    assert (cfg.command, cfg.args, cfg.env, cfg.env_vars) == (
        "mcp-server-git", ("--repository", "."), {"LEVEL": "3"}, ("HOME",))
    assert cfg.required and cfg.enabled and cfg.transport == "stdio"
    assert (cfg.startup_timeout_sec, cfg.tool_timeout_sec) == (10.0, 60.0)
    assert cfg.offers("git_status") and not cfg.offers("git_log")
    assert not parse_server("t", {"command": "x", "disabled_tools": ["a"]}, None).offers("a")


@pytest.mark.parametrize("raw, field, words", [
    ({"comand": "x"}, "mcp_servers.s.comand", "did you mean command?"),
    ({"command": "x", "url": "http://127.0.0.1:1/mcp"}, "mcp_servers.s", "either command"),
    ({}, "mcp_servers.s", "either command"),
    ({"url": "http://127.0.0.1:1/mcp", "env": {"A": "b"}}, "mcp_servers.s.env",
     "not a setting of an http server"),
    ({"command": "x", "bearer_token_env_var": "T"}, "mcp_servers.s.bearer_token_env_var",
     "not a setting of a stdio server"),
    ({"command": "x", "args": "--flag"}, "mcp_servers.s.args", "list of strings"),
    ({"command": "x", "tool_timeout_sec": 0}, "mcp_servers.s.tool_timeout_sec", "above 0"),
    ({"command": "x", "required": "yes"}, "mcp_servers.s.required", "true or false"),
    ({"url": "ftp://host/mcp"}, "mcp_servers.s.url", "http:// or https://"),
])
def test_a_bad_server_setting_names_its_field(raw, field, words):
    with pytest.raises(ConfigError) as err:
        parse_server("s", raw, "c.yaml")
    assert err.value.path == "c.yaml" and err.value.field == field and words in err.value.message


def test_a_server_name_must_fit_in_a_tool_name():
    with pytest.raises(ConfigError, match="letters, digits"):
        parse_server("my server", {"command": "x"}, None)


def test_variables_in_values_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("DB_HOST", "db.local")
    monkeypatch.delenv("DB_PORT", raising=False)
    cfg = parse_server("db", {"command": "${DB_BIN:-dbserver}", "args": ["--host", "${DB_HOST}"],
                              "env": {"PORT": "${DB_PORT:-5432}", "HOST": "${DB_HOST}"}}, None)
    assert cfg.command == "dbserver" and cfg.args == ("--host", "db.local")
    assert cfg.env == {"PORT": "5432", "HOST": "db.local"}
    with pytest.raises(ConfigError) as err:
        parse_server("db", {"command": "x", "env": {"PORT": "${DB_PORT}"}}, "c.yaml")
    assert err.value.field == "mcp_servers.db.env.PORT" and "DB_PORT is not set" in str(err.value)
    # a server that is off is not started: its variables need not be set
    assert not parse_server("db", {"command": "${DB_PORT}", "enabled": False}, None).enabled


def test_headers_take_their_values_from_named_variables(monkeypatch):
    monkeypatch.setenv("DOCS_TOKEN", "tok-123")
    monkeypatch.setenv("TEAM", "blue")
    cfg = parse_server("docs", {"url": "http://127.0.0.1:1/mcp", "bearer_token_env_var":
                                "DOCS_TOKEN", "http_headers": {"X-A": "1"},
                                "env_http_headers": {"X-Team": "TEAM"}}, None)
    assert cfg.headers() == {"X-A": "1", "X-Team": "blue", "Authorization": "Bearer tok-123"}
    monkeypatch.delenv("DOCS_TOKEN")
    with pytest.raises(ConfigError, match="DOCS_TOKEN is not set") as err:
        cfg.headers()
    assert err.value.field == "mcp_servers.docs.bearer_token_env_var"


def test_claude_code_json_servers_read_as_the_same_servers(tmp_path):
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {
        "time": {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"],
                 "env": {"A": "1"}},
        "docs": {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"X-K": "v"}}}}))
    servers = read_claude_json(path)
    assert servers["time"].args == ("--local-timezone", "UTC") and servers["time"].env == {
        "A": "1"}
    assert servers["docs"].url == "http://127.0.0.1:9/mcp"
    assert servers["docs"].http_headers == {"X-K": "v"} and servers["docs"].source == str(path)


@pytest.mark.parametrize("entry, field, words", [
    ({"type": "sse", "url": "http://127.0.0.1:9/sse"}, "mcpServers.s.type", "not supported"),
    ({"command": "x", "headerz": {}}, "mcpServers.s.headerz", "did you mean headers?"),
    ({"url": "http://127.0.0.1:9/mcp", "env": {"A": "b"}}, "mcpServers.s.env", "http server"),
])
def test_a_bad_claude_code_entry_names_its_field(tmp_path, entry, field, words):
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"s": entry}}))
    with pytest.raises(ConfigError) as err:
        read_claude_json(path)
    assert err.value.path == str(path) and err.value.field == field and words in err.value.message


def test_a_later_definition_replaces_an_earlier_one_of_its_name():
    a, b, c = (ServerConfig("x", command="a"), ServerConfig("y", command="b"),
               ServerConfig("x", command="c"))
    assert [(s.name, s.command) for s in merged([a, b], [c])] == [("y", "b"), ("x", "c")]


def test_a_bad_mcp_config_exits_2_naming_file_and_field(home, tmp_path, capsys):
    path = write_config(home, {"time": {"comand": "mcp-server-time"}})
    (tmp_path / "s.yaml").write_text("- text: hi\n")
    assert main(["-m", f"scripted:{tmp_path / 's.yaml'}", "hello"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: mcp_servers.time.comand: unknown setting; did you mean command?" in err
    assert "Traceback" not in err


def test_a_missing_mcp_config_file_exits_2(home, tmp_path, capsys):
    assert main(["mcp", "--mcp-config", str(tmp_path / "nope.json")]) == 2
    assert "nope.json: --mcp-config: cannot read it" in capsys.readouterr().err


def test_config_check_lists_mcp_servers_and_their_problems(home, monkeypatch, capsys):
    monkeypatch.delenv("DOCS_TOKEN", raising=False)
    write_config(home, {
        "time": {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"]},
        "gone": {"command": "no-such-mcp-server-here", "required": True},
        "docs": {"url": "http://127.0.0.1:9/mcp", "bearer_token_env_var": "DOCS_TOKEN"},
        "off": {"command": "whatever", "enabled": False}})
    assert main(["config", "check", "-m", "scripted:x.yaml"]) == 2
    out = capsys.readouterr().out
    assert "  time: stdio: mcp-server-time --local-timezone UTC" in out
    assert "  gone (required): stdio: no-such-mcp-server-here" in out
    assert "  off (disabled): stdio: whatever" in out
    assert "problem: MCP server gone: command not found: no-such-mcp-server-here" in out
    assert "problem: MCP server docs: mcp_servers.docs.bearer_token_env_var: environment " \
           "variable DOCS_TOKEN is not set" in out
    assert "problem: MCP server time" not in out and "problem: MCP server off" not in out


def test_readme_server_examples_are_valid(tmp_path, monkeypatch):
    from test_readme import readme_block

    from tools.mcp.config import parse_servers

    monkeypatch.setenv("DOCS_TOKEN", "t")
    servers = parse_servers(yaml.safe_load(readme_block("mcp_servers:"))["mcp_servers"], None)
    assert servers["git"].env == {"GIT_PAGER": "cat", "LEVEL": "1"}
    assert servers["docs"].transport == "http" and servers["time"].transport == "stdio"
    path = tmp_path / "mcp.json"
    path.write_text(readme_block('{"mcpServers"'))
    claude = read_claude_json(path)
    assert claude["docs"].http_headers == {"Authorization": "Bearer t"}
