"""MCP servers an editor sends (SPEC §12, §13): `session/new` and `session/load` add them
to the session's tools — the real `mcp-server-time` over stdio and the test site over
streamable HTTP — and they end with `ga acp`."""

from __future__ import annotations

import asyncio
import shutil
import threading
from pathlib import Path

import pytest
from acp import RequestError
from acp.schema import EnvVariable, HttpHeader, HttpMcpServer, McpServerStdio, SseMcpServer
from mcp_site import Site, gated, site, site_server
from test_acp import BOUND, ask, code, ga_acp, journal_of, model, new, run
from test_signals import CHILDREN_GONE_SECONDS, wait_until

from frontends.cli import main

__all__ = ["site"]  # fixtures
TIME = shutil.which("mcp-server-time")


def time_server(mark: str) -> McpServerStdio:
    """mcp-server-time as an editor sends it, its environment holding ``mark``."""
    return McpServerStdio(name="time", command=TIME, args=["--local-timezone", "UTC"],
                          env=[EnvVariable(name="GA_TEST_MARK", value=mark)])


def servers_with(mark: str) -> list[int]:
    """Live processes whose environment holds ``mark``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and mark.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def clock_call() -> dict:
    return {"text": "<summary>time</summary>", "tool_calls": [
        {"name": "mcp__time__get_current_time", "args": {"timezone": "UTC"}}]}


def test_a_stdio_server_sent_in_session_new_is_a_tool_and_ends_with_ga_acp(home, tmp_path):
    mark = f"acp-mcp-{tmp_path.name}"
    steps = [clock_call(), {"text": "it is late"}]

    async def scenario():
        async with ga_acp(home, tmp_path, "-m", model(tmp_path, steps)) as (conn, _, editor):
            session = (await conn.new_session(cwd=str(Path.cwd()),
                                              mcp_servers=[time_server(mark)])).session_id
            running = servers_with(mark)
            return session, running, await ask(conn, session, "what time is it?"), editor

    session, running, reason, editor = run(scenario())
    assert len(running) == 1  # started with the session, before its first prompt
    assert reason == "end_turn"
    (card,) = editor.of("tool_call")
    assert (card["title"], card["kind"]) == (
        'mcp__time__get_current_time({"timezone": "UTC"})', "other")
    (end,) = [u for u in editor.of("tool_call_update") if "status" in u]
    assert end["status"] == "completed"
    assert '"timezone": "UTC"' in end["content"][0]["content"]["text"]  # the server's answer
    (result,) = [r for r in journal_of(home, session) if r["type"] == "tool_result"]
    assert "datetime" in str(result["data"])
    wait_until(lambda: not servers_with(mark), CHILDREN_GONE_SECONDS, "the server ended")


def test_an_http_server_gets_the_headers_the_editor_sends(home, tmp_path, site):
    steps = [{"text": "<summary>add</summary>", "tool_calls": [
        {"name": "mcp__docs__add", "args": {"a": 2, "b": 3}}]}, {"text": "five"}]
    docs = HttpMcpServer(type="http", name="docs", url=site.url,
                         headers=[HttpHeader(name="X-Editor-Token", value="from-the-editor")])

    async def scenario():
        async with ga_acp(home, tmp_path, "-m", model(tmp_path, steps)) as (conn, _, editor):
            session = (await conn.new_session(cwd=str(Path.cwd()),
                                              mcp_servers=[docs])).session_id
            return await ask(conn, session, "add them"), editor

    site.requests.clear()
    reason, editor = run(scenario())
    assert reason == "end_turn"
    (end,) = [u for u in editor.of("tool_call_update") if "status" in u]
    assert end["status"] == "completed" and end["content"][0]["content"]["text"] == "5"
    assert site.requests and all(r.get("x-editor-token") == "from-the-editor"
                                 for r in site.requests)


def test_load_adds_the_servers_sent_and_a_bad_one_is_invalid_params(home, tmp_path):
    first = model(tmp_path, [{"text": "noted"}], "first.yaml")
    assert main(["--home", str(home), "-m", first, "remember the clock"]) == 0
    (journal,) = (home / "sessions").glob("*.jsonl")
    mark = f"acp-mcp-load-{tmp_path.name}"
    steps = [clock_call(), {"text": "read it"}]

    async def scenario():
        async with ga_acp(home, tmp_path, "-m", model(tmp_path, steps)) as (conn, _, editor):
            cwd, errors = str(Path.cwd()), []
            for bad in (SseMcpServer(type="sse", name="old", url="http://127.0.0.1:9/sse",
                                     headers=[]),
                        McpServerStdio(name="blank", command=" ", args=[], env=[])):
                with pytest.raises(RequestError) as e:
                    await conn.load_session(cwd=cwd, session_id=journal.stem,
                                            mcp_servers=[bad])
                errors.append(e.value)
            await conn.load_session(cwd=cwd, session_id=journal.stem,
                                    mcp_servers=[time_server(mark)])  # the journal is free
            return errors, await ask(conn, journal.stem, "and the time?"), editor

    (sse, blank), reason, editor = run(scenario())
    assert sse.code == blank.code == -32602
    assert "mcpServers.old.type: 'sse' servers are not supported" in str(sse)
    assert "mcpServers.blank.command: must be a non-empty string" in str(blank)
    assert reason == "end_turn"
    (end,) = [u for u in editor.of("tool_call_update") if "status" in u]
    assert end["status"] == "completed" and "datetime" in end["content"][0]["content"]["text"]
    wait_until(lambda: not servers_with(mark), CHILDREN_GONE_SECONDS, "the server ended")


def test_a_bad_server_in_session_new_names_it_and_starts_none(home, tmp_path):
    mark = f"acp-mcp-bad-{tmp_path.name}"

    async def scenario():
        async with ga_acp(home, tmp_path, "-m", model(tmp_path, [])) as (conn, _, _editor):
            with pytest.raises(RequestError) as e:
                await conn.new_session(cwd=str(Path.cwd()), mcp_servers=[
                    time_server(mark),
                    HttpMcpServer(type="http", name="docs", url="ftp://example.invalid/",
                                  headers=[])])
            return e.value, servers_with(mark)

    error, started = run(scenario())
    assert error.code == -32602 and not started
    assert "session/new: mcpServers.docs.url: must be an http:// or https:// URL" in str(error)


def test_a_session_whose_servers_are_starting_holds_up_no_other_request(home, tmp_path):
    """While session/new waits for its MCP server, a cancel of another session's prompt is
    answered; the new session is answered once its server is up."""
    asked, release = threading.Event(), threading.Event()

    async def hold() -> None:
        asked.set()
        await asyncio.to_thread(release.wait, BOUND)

    docs = Site(gated(site_server().streamable_http_app(), hold))
    steps = [code("sleep 30"), {"text": "never"}]

    async def scenario():
        async with ga_acp(home, tmp_path, "-m", model(tmp_path, steps)) as (conn, _, editor):
            busy = await new(conn)
            prompt = asyncio.ensure_future(ask(conn, busy, "sleep"))
            await editor.until(lambda u: u["sessionUpdate"] == "tool_call")
            opening = asyncio.ensure_future(conn.new_session(cwd=str(Path.cwd()), mcp_servers=[
                HttpMcpServer(type="http", name="docs", url=docs.url, headers=[])]))
            assert await asyncio.to_thread(asked.wait, BOUND)  # its server is being started
            await conn.cancel(session_id=busy)
            reason, still_opening = await prompt, not opening.done()
            release.set()
            return reason, still_opening, (await opening).session_id

    try:
        reason, still_opening, opened = run(scenario())
    finally:
        release.set()
        docs.stop()
    assert reason == "cancelled" and still_opening and opened
