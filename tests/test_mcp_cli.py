"""`ga mcp list|call`, MCP servers in `ga tools` and in runs (SPEC §12): a server that does
not start is one stderr line (exit 2 when required), `--mcp-config` adds servers, the
`mcp` package is imported only when a server is configured, and no server outlives a
killed `ga`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import yaml
from mcp_site import site
from test_signals import (
    CHILDREN_GONE_SECONDS,
    START_SECONDS,
    code_step,
    finish,
    mark,
    pids_with,
    start_ga,
    tmpdir_env,
    wait_until,
)

from frontends.cli import main

__all__ = ["mark", "site", "tmpdir_env"]  # fixtures
ROOT = Path(__file__).resolve().parent.parent
RAW = str(ROOT / "tests" / "mcp_raw.py")
INSTALL = 'pip install "genericagent[mcp]"'


def write_servers(home: Path, servers: dict) -> None:
    (home / "config.yaml").write_text(yaml.safe_dump({"mcp_servers": servers}))


def script(tmp_path: Path, steps: list) -> str:
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(steps))
    return f"scripted:{path}"


def test_mcp_list_shows_servers_state_and_each_tools_cost_without_a_model(home, site, capsys):
    write_servers(home, {"site": {"url": site.url},
                         "gone": {"command": "no-such-mcp-server"},
                         "off": {"command": "whatever", "enabled": False}})
    assert main(["mcp", "list"]) == 0  # no model configured: none is needed
    out, err = capsys.readouterr()
    assert f"site  ready  http: {site.url}  ({home / 'config.yaml'})" in out
    assert "gone  failed: command not found: no-such-mcp-server  stdio: no-such-mcp-server" in out
    assert "off  disabled  stdio: whatever" in out
    _, tokens, unit, first_word, *_ = next(
        line for line in out.splitlines() if "mcp__site__add " in line).split()
    assert (unit, first_word) == ("tokens", "Add") and int(tokens) > 0
    assert "tools from 1 of 3 servers" in err and "did not start" not in err
    assert main(["mcp", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    tools = {t["tool"]: t for t in rows["site"]["tools"]}
    assert tools["add"]["name"] == "mcp__site__add" and tools["add"]["tokens"] == int(tokens)


def test_mcp_call_prints_what_the_model_would_get(home, site, capsys):
    write_servers(home, {"site": {"url": site.url}})
    assert main(["mcp", "call", "site", "add", '{"a": 20, "b": 22}']) == 0
    assert capsys.readouterr().out.strip() == "42"
    assert main(["mcp", "call", "site", "fail"]) == 1
    assert "the widget is broken" in capsys.readouterr().err
    assert main(["mcp", "call", "site", "add", "[1, 2]"]) == 2
    assert "must be a JSON object" in capsys.readouterr().err
    assert main(["mcp", "call", "nosuch", "add"]) == 2
    assert "no MCP server 'nosuch'; configured: site" in capsys.readouterr().err
    assert main(["mcp", "call", "site", "subtract"]) == 2
    assert "MCP server site offers no tool 'subtract'" in capsys.readouterr().err


def test_mcp_call_reports_a_result_breaking_the_tools_output_schema(home, capsys):
    write_servers(home, {"raw": {"command": sys.executable, "args": [RAW, "schema"]}})
    assert main(["mcp", "call", "raw", "t"]) == 1
    out, err = capsys.readouterr()
    assert err == ("[Error] mcp__raw__t failed: RuntimeError: Tool t has an output schema but "
                   "did not return structured content\n") and out == ""


def test_ga_tools_includes_mcp_tools_and_servers_that_did_not_start(home, site, capsys):
    write_servers(home, {"site": {"url": site.url}, "gone": {"command": "no-such-mcp-server"}})
    assert main(["tools"]) == 0
    out, err = capsys.readouterr()
    rows = {line.split()[0]: line for line in out.splitlines()}
    assert "mcp server site" in rows["mcp__site__add"] and rows["mcp__site__add"].endswith(
        "offered")
    assert "not offered: the server did not start: command not found" in rows["mcp__gone__*"]
    assert "MCP server gone did not start" in err


def test_a_run_leaves_out_a_server_that_did_not_start_with_one_stderr_line(home, tmp_path,
                                                                          site, capsys):
    write_servers(home, {"site": {"url": site.url}, "gone": {"command": "no-such-mcp-server"}})
    model = script(tmp_path, [{"text": "<summary>add</summary>", "tool_calls": [
        {"name": "mcp__site__add", "args": {"a": 1, "b": 2}}]}, {"text": "three"}])
    assert main(["-m", model, "add them"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "three"
    assert [line for line in err.splitlines() if "gone" in line] == [
        "ga: MCP server gone did not start: command not found: no-such-mcp-server; its tools "
        f"are left out (its log: {home / 'logs' / 'mcp-gone.log'})"]


def test_a_required_server_that_did_not_start_stops_the_run_with_exit_2(home, tmp_path,
                                                                        capsys):
    write_servers(home, {"gone": {"command": "no-such-mcp-server", "required": True}})
    assert main(["-m", script(tmp_path, [{"text": "never asked"}]), "hi"]) == 2
    err = capsys.readouterr().err
    assert f"ga: {home / 'config.yaml'}: mcp_servers.gone: the required MCP server did not " \
           "start: command not found: no-such-mcp-server" in err
    assert not (home / "sessions").exists() or not list((home / "sessions").iterdir())


def test_mcp_config_files_add_claude_code_servers_to_a_run(home, tmp_path, site, capsys):
    claude = tmp_path / "mcp.json"
    claude.write_text(json.dumps({"mcpServers": {"docs": {"type": "http", "url": site.url}}}))
    model = script(tmp_path, [{"text": "<summary>add</summary>", "tool_calls": [
        {"name": "mcp__docs__add", "args": {"a": 4, "b": 5}}]}, {"text": "nine"}])
    assert main(["-m", model, "--mcp-config", str(claude), "add"]) == 0
    assert capsys.readouterr().out.strip() == "nine"
    journal = next((home / "sessions").glob("*.jsonl")).read_text()
    assert '"name": "mcp__docs__add"' in journal and '"data": "9"' in journal


def imports_mcp(code: str, env: dict | None = None) -> tuple[bool, subprocess.CompletedProcess]:
    """Run ``code`` (which calls main) in a fresh Python; whether it imported ``mcp``."""
    probe = f"{code}\nimport sys\nprint('MCP-IMPORTED' if 'mcp' in sys.modules else 'NO-MCP')"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=120)
    return "MCP-IMPORTED" in done.stdout, done


def test_help_and_a_task_without_servers_never_import_mcp(home, tmp_path):
    found, done = imports_mcp("from frontends.cli import main\nmain(['--help'])")
    assert not found and "usage: ga" in done.stdout
    model = script(tmp_path, [{"text": "hi"}])
    write_servers(home, {"off": {"command": "mcp-server-time", "enabled": False}})
    found, done = imports_mcp(f"from frontends.cli import main\nmain(['-m', {model!r}, 'hi'])")
    assert not found and done.stdout.startswith("hi"), done.stderr


def test_a_missing_mcp_package_is_one_message_naming_the_install_command(home, tmp_path):
    write_servers(home, {"time": {"command": "mcp-server-time"}})
    model = script(tmp_path, [{"text": "hi"}])
    block = "import sys\nsys.modules['mcp'] = None\nfrom frontends.cli import main\n"
    _, done = imports_mcp(f"{block}sys.exit(main(['-m', {model!r}, 'hi']))")
    lines = [line for line in done.stderr.splitlines() if "mcp" in line]
    assert done.returncode == 0 and done.stdout.startswith("hi")
    assert lines == [f"ga: MCP servers (time) are configured, but the mcp package is not "
                     f"installed: {INSTALL}; their tools are left out"]
    write_servers(home, {"time": {"command": "mcp-server-time", "required": True}})
    _, done = imports_mcp(f"{block}sys.exit(main(['-m', {model!r}, 'hi']))")
    assert done.returncode == 2 and INSTALL in done.stderr


def server_pids(tmpdir: Path) -> list[int]:
    """mcp-server-time processes started by the ga whose temp dir is in ``tmpdir``."""
    found = []
    for pid in pids_with("mcp-server-time"):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if str(tmpdir).encode() in environ:
            found.append(pid)
    return found


def test_no_mcp_server_outlives_a_killed_ga(tmp_path, home, tmpdir_env, mark):
    """The server (and a helper process it started) end with a SIGKILLed ga: a server
    alone would also end when its stdin closes; its helper only when its session is ended."""
    helper = f"exec -a {mark}-helper sleep 300 & exec mcp-server-time"
    write_servers(home, {"time": {"command": "bash", "args": ["-c", helper]}})
    proc = start_ga(tmp_path, home, tmpdir_env, [code_step(f"exec -a {mark} sleep 300")])
    try:
        wait_until(lambda: len(pids_with(mark)) == 2, START_SECONDS, "the code and the helper")
        assert len(server_pids(tmpdir_env)) == 1  # started before the first model request
        os.kill(proc.pid, signal.SIGKILL)
        wait_until(lambda: not pids_with(mark) and not server_pids(tmpdir_env),
                   CHILDREN_GONE_SECONDS, "the server, its helper and the code gone")
    finally:
        assert finish(proc) == -signal.SIGKILL


def test_ctrl_c_cancels_an_mcp_call_in_flight(tmp_path, home, tmpdir_env, site):
    write_servers(home, {"site": {"url": site.url}})
    site.entered.clear()
    proc = start_ga(tmp_path, home, tmpdir_env, [
        {"text": "<summary>wait</summary>", "tool_calls": [
            {"name": "mcp__site__slow", "args": {"seconds": 10 * START_SECONDS}}]},
        {"text": "never"}])
    try:
        assert site.entered.wait(START_SECONDS)
        os.kill(proc.pid, signal.SIGINT)
    finally:
        assert finish(proc) == 130
    assert "did not stop in time" not in (tmp_path / "err.txt").read_text()
    journal = next((home / "sessions").glob("*.jsonl")).read_text()
    assert "mcp__site__slow was cancelled" in journal and '"result": "ABORTED"' in journal
