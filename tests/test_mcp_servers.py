"""MCP servers as tools (SPEC §12), against real servers: mcp-server-time and mcp-server-git
from PyPI over stdio, and a streamable-HTTP server built here with the SDK's own server
class. A missing server package fails these tests; none is skipped."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from pathlib import Path

import pytest
from mcp_site import (
    LONG_TOOL,
    Site,
    gated,
    git_repo,
    never_answers,
    site,
    site_server,
    stdio_hub,
)

from tools.mcp import open_hub, parse_server
from tools.mcp.hub import NAME_MAX, tool_name

__all__ = ["git_repo", "site", "stdio_hub"]  # fixtures
RAW = str(Path(__file__).resolve().parent / "mcp_raw.py")
WAIT_SECONDS = 30.0  # a bound on waits for a server's answer; never reached when it works


def raw_hub(home, mode: str):
    """A hub with the hand-written server of mcp_raw.py in ``mode``."""
    return open_hub([parse_server("raw", {"command": sys.executable, "args": [RAW, mode]},
                                  "test")], home, home)


def http_hub(home, url: str, **settings):
    return open_hub([parse_server("site", {"url": url, **settings}, "test")], home, home)


def is_error(data) -> bool:
    return isinstance(data, dict) and data.get("status") == "error"


# ---- stdio servers from PyPI -----------------------------------------------------------
def test_stdio_servers_offer_their_tools_named_for_the_server(stdio_hub):
    names = {t.name for t in stdio_hub.tools()}
    assert names == {"mcp__time__get_current_time", "mcp__time__convert_time",
                     "mcp__git__git_status", "mcp__git__git_log"}  # enabled_tools holds
    assert stdio_hub.state("time") == stdio_hub.state("git") == "ready"
    schema = stdio_hub.tool("mcp__time__get_current_time").schema["function"]
    assert schema["parameters"]["required"] == ["timezone"]  # the server's schema as it is
    assert schema["description"] == "Get current time in a specific timezone"


def test_a_call_returns_the_servers_text_and_an_error_as_an_error_result(stdio_hub):
    data, images = stdio_hub.call("mcp__time__get_current_time", {"timezone": "Asia/Tokyo"})
    assert '"timezone": "Asia/Tokyo"' in data and "+09:00" in data and images == []
    data, _ = stdio_hub.call("mcp__time__get_current_time", {"timezone": "Nowhere/Land"})
    assert is_error(data) and "Invalid timezone" in data["msg"]
    assert data["msg"].startswith("[Error] mcp__time__get_current_time: ")


def test_the_git_server_reads_the_repository(stdio_hub, git_repo):
    data, _ = stdio_hub.call("mcp__git__git_log", {"repo_path": str(git_repo)})
    assert "the first commit" in data


def test_a_servers_stderr_goes_to_its_log_in_the_home(stdio_hub):
    stdio_hub.call("mcp__time__get_current_time", {"timezone": "Atlantis/Capital"})
    log = (stdio_hub.home / "logs" / "mcp-time.log").read_text()
    assert "starting time" in log and "Atlantis/Capital" in log


def test_a_server_gets_the_safe_environment_plus_its_own_never_the_runtimes_keys(
        home, monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-abcdefgh-12345678")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-runtime-key-0123456789abcdef")
    monkeypatch.setenv("PLAIN_SETTING", "plain")
    monkeypatch.setenv("PASSED_THROUGH", "wanted")
    cfg = parse_server("time", {"command": "mcp-server-time", "env_vars": ["PASSED_THROUGH"],
                                "env": {"MODE": "${MCP_MODE:-quiet}"}}, "test")
    hub = open_hub([cfg], home, home)
    try:
        pid = hub.connections["time"].process.pid
        raw = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        env = dict(item.decode().split("=", 1) for item in raw if b"=" in item)
    finally:
        hub.close()
    assert env["MODE"] == "quiet" and env["PASSED_THROUGH"] == "wanted"
    assert env["PATH"] == os.environ["PATH"]  # the SDK's safe default set
    for name in ("MY_SERVICE_TOKEN", "OPENAI_API_KEY", "PLAIN_SETTING", "GA_HOME"):
        assert name not in env
    assert "tok-abcdefgh-12345678" not in str(raw) and "sk-runtime-key" not in str(raw)


def test_the_safe_environment_is_the_sdks():
    """Servers start before the SDK is loaded, with its list of variables safe to pass on."""
    from mcp.client.stdio import DEFAULT_INHERITED_ENV_VARS

    from tools.mcp.spawn import SAFE_ENV_VARS

    assert list(SAFE_ENV_VARS) == DEFAULT_INHERITED_ENV_VARS


def test_a_dead_server_is_restarted_once_at_its_next_call(home, caplog):
    hub = open_hub([parse_server("time", {"command": "mcp-server-time"}, "test")], home, home)
    try:
        for _ in range(2):
            process = hub.connections["time"].process
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
            data, _ = hub.call("mcp__time__get_current_time", {"timezone": "UTC"})
            if hub.restarted == {"time"} and not is_error(data):
                first = data
                continue
        assert '"timezone": "UTC"' in first  # the first death: restarted, the call answered
        assert is_error(data) and "stopped again after its restart" in data["msg"]
        assert "MCP server time stopped" in caplog.text and "restarting it" in caplog.text
    finally:
        hub.close()


def test_a_server_that_cannot_start_is_left_out_with_one_warning(home, stdio_hub, caplog):
    hub = open_hub([parse_server("nope", {"command": "no-such-mcp-server"}, "test")], home, home)
    try:
        assert hub.tools() == [] and hub.state("nope") == \
            "failed: command not found: no-such-mcp-server"
    finally:
        hub.close()
    lines = [r.getMessage() for r in caplog.records if "nope" in r.getMessage()]
    assert lines == ["MCP server nope did not start: command not found: no-such-mcp-server; its "
                     f"tools are left out (its log: {home / 'logs' / 'mcp-nope.log'})"]


def test_a_server_that_exits_at_start_says_its_exit_code_and_last_words(home):
    quits = [sys.executable, "-c", "print('loading'); import sys; sys.exit('no API_URL set')"]
    cfg = parse_server("quits", {"command": quits[0], "args": quits[1:]}, "test")
    hub = open_hub([cfg], home, home)
    try:
        assert hub.state("quits") == ("failed: the server closed the connection (exit code 1; "
                                      "it said: no API_URL set)")
    finally:
        hub.close()


def test_an_error_minus_32000_from_a_live_server_is_its_answer_and_spends_no_restart(home):
    hub = raw_hub(home, "error")  # -32000 is also the SDK's code for a closed connection
    try:
        for _ in range(2):
            data, _ = hub.call("mcp__raw__t", {})
            assert data == {"status": "error", "msg": "[Error] mcp__raw__t: the server answered "
                                                      "error -32000: the quota is used up"}
        assert hub.state("raw") == "ready" and hub.restarted == set()
    finally:
        hub.close()


def test_a_server_that_ends_during_a_call_is_restarted_at_the_next(home):
    hub = raw_hub(home, "exit")
    try:
        data, _ = hub.call("mcp__raw__t", {})
        assert data["msg"] == ("[Error] MCP server raw stopped during the call (its connection "
                               "closed); it is restarted at its next call")
        hub.call("mcp__raw__t", {})
        assert hub.restarted == {"raw"}
    finally:
        hub.close()


def test_a_server_refusing_to_start_with_minus_32000_is_said_to_have_answered_so(home):
    hub = raw_hub(home, "init_error")
    try:
        assert hub.state("raw").startswith(
            "failed: the server answered error -32000: the licence has expired")
    finally:
        hub.close()


def test_a_tool_list_repeating_its_cursor_is_read_once_and_each_name_offered_once(home):
    hub = raw_hub(home, "pages")  # page 2 holds t again and u, and points at itself
    try:
        tools = {t.name: t.schema["function"]["description"] for t in hub.tools()}
        listed = hub.log_path("raw").read_text().count("tools/list")
    finally:
        hub.close()
    assert tools == {"mcp__raw__t": "The first t.", "mcp__raw__u": "The u tool."}
    assert listed == 2


def test_a_server_folder_that_does_not_exist_is_named_as_such(home):
    cfg = parse_server("time", {"command": "mcp-server-time", "cwd": "no-such-folder"}, "test")
    hub = open_hub([cfg], home, home)
    try:
        assert hub.state("time") == ("failed: NotADirectoryError: its folder (cwd) is not a "
                                     f"folder: {home / 'no-such-folder'}")
    finally:
        hub.close()


# ---- a streamable-HTTP server built with the SDK's server class ------------------------
def test_results_text_structured_content_images_and_errors(home, site):
    hub = http_hub(home, site.url)
    try:
        assert hub.call("mcp__site__add", {"a": 2, "b": 3}) == ("5", [])
        assert hub.call("mcp__site__structured_only", {}) == ('{"answer": 42}', [])
        data, blocks = hub.call("mcp__site__picture", {}, vision=True)
        assert data == "a red box\n[image: 64x32 png, shown]"
        assert [(b["type"], b["media_type"], b["width"]) for b in blocks] == [
            ("image", "image/png", 64)]
        data, blocks = hub.call("mcp__site__picture", {}, vision=False)
        assert "not shown: this model cannot see images" in data and blocks == []
        data, _ = hub.call("mcp__site__fail", {})
        assert is_error(data) and "the widget is broken" in data["msg"]
        data, _ = hub.call("mcp__site__big", {}, budget=1_000)
        assert len(data) < 1_100 and "chars omitted" in data
    finally:
        hub.close()


def test_names_stay_within_64_characters_unique_and_descriptions_are_capped(home, site):
    hub = http_hub(home, site.url)
    try:
        long = next(t for t in hub.tools() if t.tool == LONG_TOOL)
    finally:
        hub.close()
    assert len(long.name) == NAME_MAX and long.name.startswith("mcp__site__a_tool_whose")
    text = long.schema["function"]["description"]
    assert len(text) == 1_000 and text.endswith("…")
    taken: set[str] = set()
    first = tool_name("srv", "read.file", taken)
    taken.add(first)
    assert first == "mcp__srv__read_file"  # characters the providers refuse are replaced
    second = tool_name("srv", "read_file", taken)
    assert second != first and len(second) <= NAME_MAX


def test_headers_and_the_bearer_token_reach_an_http_server(home, site, monkeypatch):
    monkeypatch.setenv("SITE_TOKEN", "tok-site-777")
    monkeypatch.setenv("SITE_TEAM", "blue")
    site.requests.clear()
    hub = http_hub(home, site.url, bearer_token_env_var="SITE_TOKEN",
                   http_headers={"X-Client": "ga-test"}, env_http_headers={"X-Team": "SITE_TEAM"})
    hub.close()
    assert site.requests and all(r.get("authorization") == "Bearer tok-site-777" and
                                 r.get("x-client") == "ga-test" and r.get("x-team") == "blue"
                                 for r in site.requests)


def test_a_call_past_tool_timeout_sec_is_cancelled_and_the_next_call_works(home, site):
    hub = http_hub(home, site.url, tool_timeout_sec=1)
    try:
        data, _ = hub.call("mcp__site__slow", {"seconds": WAIT_SECONDS})
        assert is_error(data) and "did not answer within 1 s (tool_timeout_sec)" in data["msg"]
        assert hub.call("mcp__site__add", {"a": 1, "b": 1}) == ("2", [])
    finally:
        hub.close()


def test_cancelling_calls_ends_a_call_in_flight(home, site):
    hub = http_hub(home, site.url)
    site.entered.clear()
    got = []
    caller = threading.Thread(target=lambda: got.append(
        hub.call("mcp__site__slow", {"seconds": WAIT_SECONDS})))
    try:
        caller.start()
        assert site.entered.wait(WAIT_SECONDS)
        hub.cancel_calls()
        caller.join(WAIT_SECONDS)
        assert got and is_error(got[0][0]) and "was cancelled" in got[0][0]["msg"]
    finally:
        hub.close()


def test_a_cancel_just_before_a_call_begins_is_not_lost(home, site):
    """An abort that lands between a call's start and its being in flight cancels it too;
    calls are made again once the next task allows them."""
    hub = http_hub(home, site.url)
    site.entered.clear()
    try:
        hub.cancel_calls()
        data, _ = hub.call("mcp__site__slow", {"seconds": 0})
        assert is_error(data) and "was cancelled" in data["msg"] and not site.entered.is_set()
        hub.allow_calls()
        assert hub.call("mcp__site__slow", {"seconds": 0}) == ("finally", [])
    finally:
        hub.close()


@pytest.mark.parametrize("legacy", [False, True])  # 2026: subscriptions/listen; 2025: notices
def test_a_tool_list_change_refreshes_the_tools(home, legacy):
    server = Site(site_server(legacy=legacy).streamable_http_app())
    hub = http_hub(home, server.url)
    try:
        assert hub.tool("mcp__site__extra") is None
        assert hub.call("mcp__site__grow", {}) == ("grown", [])
        with hub.changed:
            assert hub.changed.wait_for(lambda: hub.tool("mcp__site__extra"), WAIT_SECONDS)
        assert hub.call("mcp__site__extra", {"text": "hi"}) == ("hi", [])
    finally:
        hub.close()
        server.stop()


def test_servers_start_in_parallel(home):
    """Server a answers its first request only once b has had one: started one after the
    other, a would wait for b for good (and fail); started together, both are ready."""
    b_seen = threading.Event()

    async def after_b() -> None:
        if not await asyncio.to_thread(b_seen.wait, WAIT_SECONDS):
            raise RuntimeError("b was never started while a was starting")

    async def mark_b() -> None:
        b_seen.set()

    a = Site(gated(site_server().streamable_http_app(), after_b))
    b = Site(gated(site_server().streamable_http_app(), mark_b))
    hub = open_hub([parse_server("a", {"url": a.url, "startup_timeout_sec": 2 * WAIT_SECONDS},
                                 "test"), parse_server("b", {"url": b.url}, "test")], home, home)
    try:
        assert hub.state("a") == hub.state("b") == "ready"
    finally:
        hub.close()
        a.stop()
        b.stop()


def test_a_server_past_its_startup_timeout_is_left_out(home):
    hung = Site(never_answers)
    hub = http_hub(home, hung.url, startup_timeout_sec=1)
    try:
        assert hub.state("site") == "failed: it did not start within 1 s" and hub.tools() == []
    finally:
        hub.close()
        hung.stop()
