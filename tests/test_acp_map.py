"""The ACP mapping's cases that a scripted run does not reach (SPEC §13): every stop reason,
markup split across streamed pieces, provider events, long live output, repeated call ids,
the prompt blocks that are refused, approval answers an editor garbles, and the MCP server
entries an editor may send."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from frontends.acp_input import mcp_servers, read_prompt
from frontends.acp_map import (
    PROGRESS_CHARS,
    MarkupSplitter,
    Updates,
    failure_line,
    fenced,
    permission_answer,
    permission_options,
    stop_reason,
)
from ga import GenericAgent
from llmcore.base import ConfigError
from llmcore.scripted import ScriptedClient
from tools.approval import ApprovalRequest


@pytest.fixture
def updates(home) -> Updates:
    return Updates(GenericAgent(ScriptedClient([]), home=home, cwd=Path.cwd()))


@pytest.mark.parametrize("result, reason", [
    ("CURRENT_TASK_DONE", "end_turn"), ("EXITED", "end_turn"),
    ("MAX_TURNS_EXCEEDED", "max_turn_requests"), ("NO_PROGRESS", "max_turn_requests"),
    ("BUDGET_EXCEEDED", "max_tokens"), ("ABORTED", "cancelled"), ("FAILED", None)])
def test_each_end_of_a_task_has_its_stop_reason(result, reason):
    assert stop_reason({"result": result}) == reason


def test_a_failure_is_one_line():
    end = {"result": "FAILED", "error": "openai: 500: upstream\nbroke\n  badly"}
    assert failure_line(end) == "failed: openai: 500: upstream broke badly"


def test_thinking_and_summary_tags_split_across_pieces_are_still_found():
    split = MarkupSplitter()
    pieces = ["<summ", "ary>s</sum", "mary>A <thi", "nking>hm", "m</thinking", "> B <", "x"]
    out = [u for piece in pieces for u in split.split(piece)] + split.rest()
    said = [(u["sessionUpdate"], u["content"]["text"]) for u in out]
    assert "".join(t for k, t in said if k == "agent_message_chunk") == "» s\nA  B <x"
    assert "".join(t for k, t in said if k == "agent_thought_chunk") == "hmm"


def test_provider_events_and_notices_are_thought(updates):
    said = [*updates({"type": "text", "delta": "half a rep"}),
            *updates({"type": "model_switch", "from": "a", "to": "b", "reason": "429"}),
            *updates({"type": "notice", "text": "file_read was called 3 turns in a row"})]
    thoughts = [u["content"]["text"] for u in said if u["sessionUpdate"] == "agent_thought_chunk"]
    assert "switching model a -> b (429) — the reply starts over" in thoughts[0]
    assert "called 3 turns in a row" in thoughts[1]


def test_live_output_keeps_its_end_and_repeated_call_ids_stay_unique(updates):
    call = {"type": "tool_call", "name": "code_run", "args": {"script": "yes"}, "id": "c1"}
    first = updates(call)[0]["toolCallId"]
    *_, last = [u for _ in range(3) for u in updates({"type": "progress",
                                                       "text": "x" * PROGRESS_CHARS})]
    assert len(last["content"][0]["content"]["text"]) == PROGRESS_CHARS
    updates({"type": "tool_result", "name": "code_run", "id": "c1", "data": "ok"})
    second = updates(call)[0]["toolCallId"]
    (done,) = updates({"type": "tool_result", "name": "code_run", "id": "c1",
                       "data": {"status": "error", "msg": "boom"}})
    assert (first, second, done["toolCallId"], done["status"]) == ("c1", "c1#2", "c1#2",
                                                                   "failed")


def test_text_resources_and_links_join_the_task_in_their_place():
    task, images = read_prompt([
        {"type": "text", "text": "compare"},
        {"type": "resource_link", "name": "a.py", "uri": "file:///w/my%20a.py"},
        {"type": "text", "text": "with"},
        {"type": "resource_link", "name": "b", "uri": "https://example.org/b"}])
    assert (task, images) == ("compare /w/my a.py with https://example.org/b", [])


@pytest.mark.parametrize("block, words", [
    ({"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}, "audio content is not"),
    ({"type": "resource", "resource": {"uri": "file:///w/x.pdf", "blob": "AAAA",
                                       "mimeType": "application/pdf"}}, "application/pdf"),
    ({"type": "image", "data": "not base64!", "mimeType": "image/png"}, "not base64"),
    ({"type": "text", "text": "  "}, "the prompt is empty"),
])
def test_content_ga_cannot_read_is_refused_naming_it(block, words):
    with pytest.raises(ConfigError, match=words):
        read_prompt([{"type": "text", "text": " "}, block])


def test_an_embedded_image_resource_takes_the_image_route():
    blob = base64.b64encode(b"\x89PNG fake").decode()
    task, images = read_prompt([{"type": "resource", "resource": {
        "uri": "file:///w/shot.png", "blob": blob, "mimeType": "image/png"}}])
    assert (task, images) == ("/w/shot.png", [b"\x89PNG fake"])


# ---- approval --------------------------------------------------------------------------
def test_code_holding_a_fence_gets_a_longer_one():
    assert fenced("a\n```\nb ````` c", "md") == "``````md\na\n```\nb ````` c\n``````"
    assert fenced("x = 1", "python") == "```python\nx = 1\n```"


def test_always_for_inline_eval_allows_inline_eval_not_all_of_code_run():
    request = ApprovalRequest("code_run", "c1", "inline_eval", "1", why="inline_eval")
    assert [o["name"] for o in permission_options(request)] == [
        "Allow", "Always allow inline_eval", "Reject"]


@pytest.mark.parametrize("response, answer", [
    ({"result": {"outcome": {"outcome": "selected", "optionId": "allow_always"}}},
     ("always", "")),
    ({"result": {"outcome": {"outcome": "cancelled"}}}, None),
    ({"error": {"code": -32601, "message": "Method not found"}},
     ("no", "the editor could not ask (Method not found)")),
    ({"result": {"outcome": {"outcome": "selected", "optionId": ["allow_once"]}}},
     ("no", "the editor's answer could not be read (outcome 'selected')")),
    ({"result": "yes"}, ("no", "the editor's answer could not be read (outcome None)")),
])
def test_an_editors_answer_is_a_decision_and_a_garbled_one_declines(response, answer):
    assert permission_answer(response) == answer


# ---- MCP servers an editor sends ---------------------------------------------------------
def test_editor_servers_take_codex_keys_and_names_fit_tool_names():
    stdio, http = mcp_servers([
        {"name": "My Files!", "command": "files-server", "args": ["--ro"],
         "env": [{"name": "ROOT", "value": "/w"}]},
        {"type": "http", "name": "docs", "url": "https://docs.example/mcp",
         "headers": [{"name": "Authorization", "value": "Bearer t"}]}], "session/new")
    assert (stdio.name, stdio.command, stdio.args, stdio.env, stdio.required) == (
        "My_Files_", "files-server", ("--ro",), {"ROOT": "/w"}, False)
    assert (http.name, http.url, http.http_headers) == (
        "docs", "https://docs.example/mcp", {"Authorization": "Bearer t"})
    assert mcp_servers(None, "session/load") == []


@pytest.mark.parametrize("entries, words", [
    ({"name": "x"}, "session/new: mcpServers: expected a list of servers"),
    ([{"command": "x"}], r"mcpServers\[0\].name: expected the server's name"),
    ([{"name": "t", "command": "x", "env": {"A": "1"}}],
     r"mcpServers.t.env: expected a list of \{name, value\} objects"),
    ([{"name": "t", "command": "x", "env": [{"name": "A", "value": True}]}],
     "mcpServers.t.env: must be a mapping of names to strings"),
    ([{"type": "http", "name": "t", "url": "https://x", "headers": [{"value": "v"}]}],
     "mcpServers.t.headers: expected a list"),
    ([{"type": "acp", "name": "t", "serverId": "s"}], "'acp' servers are not supported"),
])
def test_a_bad_editor_server_is_named(entries, words):
    with pytest.raises(ConfigError, match=words):
        mcp_servers(entries, "session/new")
