"""Mixin profiles: failover, staying, spring-back, attempt cap, /model switches."""

from __future__ import annotations

import pytest
from llm_server import GO, Reply, llm_server, run_chat, write_config

import llmcore

__all__ = ["llm_server"]


def failover_client(home, server, spring_back=300.0, max_turn_attempts=12):
    cfg = write_config(
        home, server,
        first={"provider": "anthropic", "model": "claude-x", "max_retries": 1},
        second={"provider": "openai", "model": "gpt-x", "max_retries": 1},
        both={"mixin": ["first", "second"], "spring_back": spring_back,
              "max_turn_attempts": max_turn_attempts})
    client = llmcore.make_client("both", config_path=cfg, home=home)
    client.events = []
    client.on_event = client.events.append
    return client


def test_failover_moves_to_next_and_stays(home, llm_server):
    client = failover_client(home, llm_server)
    llm_server.queue(Reply(status=500), Reply(status=500), Reply(text="from second"),
                     Reply(text="second again"))
    _, resp = run_chat(client, [{"role": "system", "content": "S"}, *GO])
    assert resp.content == "from second" and client.name == "second"
    assert [r["path"] for r in llm_server.requests] == ["/v1/messages"] * 2 + [
        "/v1/chat/completions"]
    switch = [e for e in client.events if e["type"] == "model_switch"][0]
    assert switch["from"] == "first" and switch["to"] == "second"
    _, resp = run_chat(client, [{"role": "user", "content": "more"}])
    assert llm_server.requests[-1]["path"] == "/v1/chat/completions"
    body = llm_server.bodies()[-1]
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "user"]


def test_spring_back_to_first_after_quiet_period(home, llm_server):
    client = failover_client(home, llm_server, spring_back=0.0)
    llm_server.queue(Reply(status=500), Reply(status=500), Reply(text="second"),
                     Reply(text="first again"))
    run_chat(client, GO)
    assert client.name == "second"
    _, resp = run_chat(client, [{"role": "user", "content": "more"}])
    assert client.name == "first" and resp.content == "first again"
    assert llm_server.requests[-1]["path"] == "/v1/messages"
    sent = llm_server.bodies()[-1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]  # history carried over


def test_all_profiles_failing_raises_without_ping_pong(home, llm_server):
    client = failover_client(home, llm_server)
    llm_server.queue(*[Reply(status=503)] * 10)
    with pytest.raises(llmcore.LLMError) as err:
        run_chat(client, GO)
    assert len(llm_server.requests) == 4 and err.value.status == 503


def test_turn_attempt_cap_across_profiles(home, llm_server):
    client = failover_client(home, llm_server, max_turn_attempts=3)
    llm_server.queue(*[Reply(status=503)] * 10)
    with pytest.raises(llmcore.LLMError):
        run_chat(client, GO)
    assert len(llm_server.requests) == 3


def test_model_switch_keeps_history_and_moves_everything(home, llm_server, monkeypatch):
    monkeypatch.setenv("KEY_B", "sk-b-profile-key-123456")
    cfg = write_config(home, llm_server, a={"provider": "openai", "model": "ma"},
                       b={"provider": "anthropic", "model": "mb", "api_key_env": "KEY_B"})
    client = llmcore.make_client("a", config_path=cfg, home=home)
    events = []
    client.on_event = events.append
    llm_server.queue(Reply(text="one"), Reply(text="two"))
    run_chat(client, GO)
    client.switch("b")
    run_chat(client, [{"role": "user", "content": "again"}])
    last = llm_server.requests[-1]
    assert last["path"] == "/v1/messages" and last["body"]["model"] == "mb"
    assert "sk-b-profile-key-123456" in str(last["headers"])  # b's own key went along
    assert [m["role"] for m in last["body"]["messages"]] == ["user", "assistant", "user"]
    assert events == [{"type": "model_switch", "from": "a", "to": "b", "reason": "user"}]


def test_history_assignment_resumes_a_session(home, llm_server):
    cfg = write_config(home, llm_server, a={"provider": "openai", "model": "ma"})
    client = llmcore.make_client("a", config_path=cfg, home=home)
    client.history = [{"role": "user", "content": [{"type": "text", "text": "old q"}]},
                      {"role": "assistant", "content": [{"type": "text", "text": "old a"}]}]
    llm_server.queue(Reply(text="new"))
    run_chat(client, GO)
    assert [m["content"] for m in llm_server.bodies()[-1]["messages"]] == ["old q", "old a", "go"]
