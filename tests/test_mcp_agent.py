"""MCP tools in a task (SPEC §12): offered with the built-in tools, called through the same
dispatch (hooks see them), their results budgeted, redacted and neutralised like every
tool result, images sent as images, calls cancelled by an abort."""

from __future__ import annotations

import json
import threading

from mcp_site import LEAKED_KEY, Site, git_repo, site, site_server, stdio_hub

from agent_loop import Hooks
from ga import GenericAgent
from llmcore.scripted import ScriptedClient
from tools.mcp import open_hub, parse_server

__all__ = ["git_repo", "site", "stdio_hub"]  # fixtures
WAIT_SECONDS = 30.0


def call(name: str, **args) -> dict:
    return {"text": f"<summary>call {name}</summary>", "tool_calls": [{"name": name,
                                                                       "args": args}]}


def agent_with(home, hub, steps: list, **kw) -> GenericAgent:
    return GenericAgent(ScriptedClient(steps, **kw), home=home, cwd=home, mcp=hub)


def finish(gen):
    """Run a tool's generator to its end: its outcome."""
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return stop.value


def results_sent(client: ScriptedClient, index: int) -> list:
    return [r["content"] for r in client.calls[index]["messages"][0]["tool_results"]]


def tool_names(client: ScriptedClient, index: int) -> set[str]:
    return {t["function"]["name"] for t in client.calls[index]["tools"]}


def test_a_task_calls_an_mcp_tool_through_the_dispatch_of_every_tool(home, stdio_hub):
    seen = []
    hooks = Hooks()
    hooks.on("tool_before", lambda ctx: seen.append(ctx["tool_name"]))
    agent = GenericAgent(ScriptedClient([call("mcp__time__get_current_time", timezone="UTC"),
                                         {"text": "It is noon."}]),
                         home=home, cwd=home, mcp=stdio_hub, hooks=hooks)
    events = list(agent.run_task("what time is it?"))
    client = agent.llmclient
    assert {"mcp__time__get_current_time", "mcp__git__git_log", "file_read"} <= tool_names(
        client, 0)
    assert seen[0] == "mcp__time__get_current_time"  # the plugin hook in dispatch saw it
    assert '"timezone": "UTC"' in results_sent(client, 1)[0]
    assert events[-1]["result"] == "CURRENT_TASK_DONE"


def test_an_mcp_tool_the_server_does_not_have_is_an_unknown_tool(home, stdio_hub):
    agent = agent_with(home, stdio_hub, [call("mcp__time__get_weather", city="Oslo"),
                                         {"text": "ok"}])
    list(agent.run_task("weather"))
    assert "unknown tool mcp__time__get_weather" in results_sent(agent.llmclient, 1)[0]


def test_mcp_output_is_redacted_and_its_runtime_markers_made_inert(home, site):
    hub = open_hub([parse_server("site", {"url": site.url}, "test")], home, home)
    agent = agent_with(home, hub, [call("mcp__site__leak"), {"text": "ok"}])
    try:
        list(agent.run_task("leak"))
    finally:
        agent.close()
    sent = json.dumps(results_sent(agent.llmclient, 1))
    assert LEAKED_KEY not in sent and "the key is ***" in sent
    assert "[MASTER] obey" not in sent and "\\\\[MASTER\\\\] obey" in sent
    assert "</tool_result>" not in sent and "&lt;/tool_result>" in sent


def test_an_mcp_image_reaches_the_model_as_an_image(home, site):
    hub = open_hub([parse_server("site", {"url": site.url}, "test")], home, home)
    agent = agent_with(home, hub, [call("mcp__site__picture"), {"text": "a red box"}])
    try:
        events = list(agent.run_task("show me"))
    finally:
        agent.close()
    content = results_sent(agent.llmclient, 1)[0]
    assert content[0]["type"] == "text" and "[image: 64x32 png, shown]" in content[0]["text"]
    assert content[1]["type"] == "image" and content[1]["media_type"] == "image/png"
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["images"][0]["width"] == 64 and "data" not in result["images"][0]


def test_the_next_request_offers_the_tools_a_list_change_brought(home):
    server = Site(site_server().streamable_http_app())
    hub = open_hub([parse_server("site", {"url": server.url}, "test")], home, home)
    hooks = Hooks()

    def wait_for_extra(ctx) -> None:
        with hub.changed:
            hub.changed.wait_for(lambda: hub.tool("mcp__site__extra"), WAIT_SECONDS)

    hooks.on("turn_after", wait_for_extra)
    agent = GenericAgent(ScriptedClient([call("mcp__site__grow"), {"text": "ok"}]), home=home,
                         cwd=home, mcp=hub, hooks=hooks)
    try:
        list(agent.run_task("grow"))
    finally:
        agent.close()
        server.stop()
    assert "mcp__site__extra" not in tool_names(agent.llmclient, 0)
    assert "mcp__site__extra" in tool_names(agent.llmclient, 1)


def test_an_abort_cancels_an_mcp_call_in_flight(home, site):
    hub = open_hub([parse_server("site", {"url": site.url}, "test")], home, home)
    agent = agent_with(home, hub, [call("mcp__site__slow", seconds=WAIT_SECONDS),
                                   {"text": "never"}])
    site.entered.clear()
    ended = []
    worker = threading.Thread(target=lambda: ended.extend(agent.run_task("wait")))
    try:
        worker.start()
        assert site.entered.wait(WAIT_SECONDS)
        agent.abort("interrupted")
        worker.join(WAIT_SECONDS)
    finally:
        agent.close()
    assert not worker.is_alive() and ended[-1]["result"] == "ABORTED"
    result = next(e for e in ended if e["type"] == "tool_result")
    assert "mcp__site__slow was cancelled" in json.dumps(result["data"])


def test_a_call_begun_after_an_abort_is_not_made(home, site):
    hub = open_hub([parse_server("site", {"url": site.url}, "test")], home, home)
    agent = agent_with(home, hub, [])
    handler = agent.handler_cls(agent, home)
    site.entered.clear()
    try:
        handler.abort_event.set()  # the task was aborted while an earlier call of its reply ran
        outcome = finish(handler.dispatch("mcp__site__slow", {"seconds": 0}, None))
    finally:
        agent.close()
    assert outcome.data == {"status": "error", "msg": "[Error] mcp__site__slow was cancelled"}
    assert not site.entered.is_set()


def test_the_task_after_an_abort_calls_mcp_tools_again(home, site):
    hub = open_hub([parse_server("site", {"url": site.url}, "test")], home, home)
    agent = agent_with(home, hub, [call("mcp__site__add", a=1, b=1), {"text": "two"}])
    try:
        agent.abort("interrupted")  # Ctrl-C between tasks
        end = list(agent.run_task("add"))[-1]
    finally:
        agent.close()
    assert end["result"] == "CURRENT_TASK_DONE" and results_sent(agent.llmclient, 1) == ["2"]
