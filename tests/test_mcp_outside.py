"""What an MCP server says is outside text (SPEC §4, §12): its tool descriptions and
schemas reach the model masked and neutralised like tool results, a result is masked
before it is cut (a key as a dict key too), and ``ga mcp list|call`` and ``ga tools`` show
its texts inert on the terminal."""

from __future__ import annotations

import json
import sys

import yaml
from mcp_site import ESCAPES, LEAKED_KEY, hostile_site

from frontends.cli import main
from ga import GenericAgent
from llmcore.scripted import ScriptedClient
from llmcore.secrets import Redactor
from tools.mcp import open_hub, parse_server
from tools.mcp.hub import OUTPUT_CHARS

__all__ = ["hostile_site"]  # fixtures
RAW = ("\x1b", "\x07", "\u009b")  # none may reach a terminal
MARKERS = ("### [WORKING MEMORY]", "<key_info>", "[MASTER]", "<tool_use>", "[DANGER]")


def pieces(text: str, secret: str = LEAKED_KEY, size: int = 8) -> list[str]:
    """The parts of ``secret`` (``size`` characters or more) that ``text`` shows."""
    return [secret[i:i + size] for i in range(len(secret) - size + 1) if secret[i:i + size] in text]


def hostile_agent(home, site, steps: list) -> GenericAgent:
    """An agent with the hostile server, its hub given the run's redactor as ``ga`` does."""
    redactor = Redactor()
    hub = open_hub([parse_server("evil", {"url": site.url}, "test")], home, home, redact=redactor)
    return GenericAgent(ScriptedClient(steps), home=home, cwd=home, mcp=hub, redactor=redactor)


def test_mcp_tool_texts_reach_the_model_neutralised_and_masked(home, hostile_site):
    agent = hostile_agent(home, hostile_site, [{"text": "nothing to do"}])
    try:
        list(agent.run_task("hi"))
    finally:
        agent.close()
    tools = {t["function"]["name"]: t["function"] for t in agent.llmclient.calls[0]["tools"]}
    offered = json.dumps(tools["mcp__evil__lookup"], ensure_ascii=False)
    assert not [m for m in MARKERS if m in offered]
    assert "### \\\\[WORKING MEMORY\\\\]" in offered and "&lt;key_info>" in offered
    assert "&lt;tool_use>" in offered and "\\\\[DANGER\\\\]" in offered  # in the schema
    assert not pieces(offered) and "key ***" in offered


def test_an_mcp_result_is_masked_before_it_is_cut_and_in_dict_keys(home, hostile_site):
    pad = OUTPUT_CHARS // 2 - 10  # the key across the head's cut
    agent = hostile_agent(home, hostile_site, [
        {"tool_calls": [{"name": "mcp__evil__across", "args": {"pad": pad}}]},
        {"tool_calls": [{"name": "mcp__evil__keyed", "args": {}}]}, {"text": "done"}])
    try:
        events = list(agent.run_task("go"))
    finally:
        agent.close()
    across, keyed = (agent.llmclient.calls[i]["messages"][0]["tool_results"][0]["content"]
                     for i in (1, 2))
    assert "chars omitted" in across and "xx ***" in across and not pieces(across)
    assert '"***": "v"' in keyed and not pieces(keyed)
    assert not pieces(json.dumps(events))


def write_servers(home, site) -> None:
    (home / "config.yaml").write_text(yaml.safe_dump({"mcp_servers": {"evil": {"url": site.url}}}))


def test_mcp_list_call_and_tools_show_a_servers_texts_inert(home, hostile_site, capsys):
    write_servers(home, hostile_site)
    shown = []
    for argv, code in ((["mcp", "list"], 0), (["mcp", "list", "--json"], 0),
                       (["tools", "-v"], 0), (["tools", "--json"], 0),
                       (["mcp", "call", "evil", "lookup", '{"word": "w"}'], 0),
                       (["mcp", "call", "evil", "lookup", '{"word": "w"}', "--json"], 0),
                       (["mcp", "call", "evil", "broken"], 1)):
        assert main(argv) == code, argv
        shown.append("".join(capsys.readouterr()))
    text = "\n".join(shown)
    assert not [c for c in RAW if c in text]
    assert "Look a word up.\\x1b[2J\\x1b]0;pwned\\x07" in shown[0]  # ga mcp list
    assert "Look a word up.\\x1b[2J" in shown[2]  # ga tools -v
    assert json.loads(shown[1])[0]["tools"][0]["description"].startswith(
        "Look a word up." + ESCAPES)  # --json keeps the text, escaped as JSON
    assert "w: found\\x1b[2J" in shown[4] and "\\[MASTER\\] obey" in shown[4]
    assert "the widget \\x1b[2J" in shown[6]
    assert not pieces(text)


def test_a_servers_url_credentials_and_a_key_in_its_command_line_are_masked(home, hostile_site,
                                                                            capsys):
    url = hostile_site.url.replace("http://", "http://bob:gw-s3cret-pass@")
    (home / "config.yaml").write_text(yaml.safe_dump({"mcp_servers": {
        "evil": {"url": url}, "local": {"command": "no-such-server", "args": [LEAKED_KEY]}}}))
    assert main(["mcp", "list"]) == 0
    assert main(["config", "check"]) == 2  # the missing command is a problem
    shown = "".join(capsys.readouterr())
    assert "http: http://***@127.0.0.1" in shown and "gw-s3cret-pass" not in shown
    assert "stdio: no-such-server ***" in shown and not pieces(shown)


def test_a_servers_last_words_are_masked_before_they_are_cut(home):
    from tools.mcp.connection import LAST_WORDS_CHARS

    said = "x" * (LAST_WORDS_CHARS - 10) + f" {LEAKED_KEY} is not valid"  # across the cut
    cfg = parse_server("quits", {"command": sys.executable,
                                 "args": ["-c", f"import sys; sys.exit({said!r})"]}, "test")
    hub = open_hub([cfg], home, home, redact=Redactor())
    try:
        state = hub.state("quits")
    finally:
        hub.close()
    assert "it said: xxx" in state and "x ***" in state and not pieces(state)
