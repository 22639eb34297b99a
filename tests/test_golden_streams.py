"""Golden streams: what real servers sent, replayed byte for byte through the real SDK.

Each fixture in tests/data/golden/ is a whole recorded HTTP response (see the README there
for the server, model and request). The local test server sends it as it was; the official
SDK parses it; ``llmcore`` and the loop must make of it what a user expects.
"""

from __future__ import annotations

import json
from pathlib import Path

from llm_server import Reply, client_for, llm_server, run_chat, tool_schema, write_config

from frontends.cli import main

__all__ = ["llm_server"]
GOLDEN = Path(__file__).parent / "data" / "golden"
ASK_USER = tool_schema("ask_user", question="string")


def golden(name: str) -> Reply:
    return Reply(raw=(GOLDEN / f"{name}.http").read_bytes())



def test_llamacpp_text_reply_streams_and_ends_the_turn(home, llm_server):
    client = client_for(home, llm_server, model="smollm2")
    llm_server.queue(golden("llamacpp_text"))
    chunks, resp = run_chat(client, [{"role": "user", "content": "Say hello."}])
    assert resp.content == "I'm here to help with any creative writing project."
    assert len(chunks) > 5 and resp.stop_reason == "end_turn" and not resp.tool_calls
    assert resp.usage.estimated and resp.usage.input > 0 and resp.usage.output > 0  # none sent


def test_llamacpp_tool_name_repeated_in_every_chunk_is_taken_once(home, llm_server):
    raw = (GOLDEN / "llamacpp_tool_call.http").read_bytes()
    assert raw.count(b'"name": "ask_user"') > 10  # the server repeats it in every chunk
    client = client_for(home, llm_server, model="smollm2")
    llm_server.queue(golden("llamacpp_tool_call"))
    _, resp = run_chat(client, [{"role": "user", "content": "Ask me."}], [ASK_USER])
    assert [tc.function.name for tc in resp.tool_calls] == ["ask_user"]
    assert json.loads(resp.tool_calls[0].function.arguments) == {
        "question": "Which colour do you prefer?"}
    assert resp.stop_reason == "tool_use"


def test_llamacpp_tool_call_runs_the_named_tool(home, llm_server, capsys):
    cfg = write_config(home, llm_server, p={"model": "smollm2"})
    llm_server.queue(golden("llamacpp_tool_call"))
    code = main(["--json", "-m", "p", "--config", cfg, "Ask me which colour I like best."])
    out, err = capsys.readouterr()
    assert code == 3, err  # stopped on ask_user, not "unknown tool ask_userask_user…"
    end = [json.loads(line) for line in out.splitlines()][-1]
    assert end["type"] == "task_end" and end["question"] == "Which colour do you prefer?"


def test_llamacpp_max_tokens_stop_is_reported_as_such(home, llm_server, capsys):
    client = client_for(home, llm_server, model="smollm2")
    llm_server.queue(golden("llamacpp_max_tokens"))
    _, resp = run_chat(client, [{"role": "user", "content": "Count."}])
    assert resp.stop_reason == "max_tokens" and resp.content == "1. 1\n2. 2\n3."
    cfg = write_config(home, llm_server, p={"model": "smollm2"})  # ga: three cut replies
    llm_server.default = golden("llamacpp_max_tokens")
    assert main(["-m", "p", "--config", cfg, "Count from 1 to 100."]) == 1
    err = capsys.readouterr().err
    assert "max_tokens" in err and "empty repl" not in err


def test_llamacpp_empty_200_is_a_dropped_stream_retried_then_a_hint(home, llm_server, capsys):
    raw = (GOLDEN / "llamacpp_context_overflow.http").read_bytes()
    assert raw.endswith(b"\r\n\r\n0\r\n\r\n")  # headers, then an empty chunked body
    cfg = write_config(home, llm_server, p={"model": "smollm2", "max_retries": 2})
    llm_server.default = golden("llamacpp_context_overflow")
    assert main(["-m", "p", "--config", cfg, "Summarise this long text."]) == 1
    err = capsys.readouterr().err
    assert len(llm_server.requests) >= 3  # retried
    assert "empty repl" not in err and "Traceback" not in err
    assert "context" in err.lower()  # the hint: the server's context may be too small


def test_llamacpp_connection_closed_after_an_empty_200_is_not_reused(home, llm_server):
    client = client_for(home, llm_server, model="smollm2", max_retries=1)
    dead = Reply(raw=(GOLDEN / "llamacpp_context_overflow.http").read_bytes(), linger=0.3)
    llm_server.queue(dead, Reply(text="ok"))  # uvicorn closes it a moment after, unasked
    _, resp = run_chat(client, [{"role": "user", "content": "go"}])
    assert resp.content == "ok" and len(llm_server.requests) == 2


def test_llamacpp_auto_tool_choice_stream_failure_is_not_an_empty_reply(home, llm_server,
                                                                         capsys):
    cfg = write_config(home, llm_server, p={"model": "smollm2", "max_retries": 1})
    llm_server.default = golden("llamacpp_auto_tool_choice_stream")
    assert main(["-m", "p", "--config", cfg, "Ask me which colour I like best."]) == 1
    err = capsys.readouterr().err
    assert "empty repl" not in err and len(llm_server.requests) >= 2


# ----- llama.cpp's own llama-server (Chat Completions and Messages) ------------------
def test_llamaserver_text_reply_with_usage(home, llm_server):
    client = client_for(home, llm_server, model="smollm2")
    llm_server.queue(golden("llamaserver_text"))
    chunks, resp = run_chat(client, [{"role": "user", "content": "Say hello."}])
    assert resp.content == "I'm here to help with any creative writing project."
    assert len(chunks) > 5 and resp.stop_reason == "end_turn"
    assert (resp.usage.input, resp.usage.output, resp.usage.estimated) == (27, 12, False)


def test_llamaserver_max_tokens_stop(home, llm_server):
    client = client_for(home, llm_server, model="smollm2")
    llm_server.queue(golden("llamaserver_max_tokens"))
    _, resp = run_chat(client, [{"role": "user", "content": "Count."}])
    assert resp.stop_reason == "max_tokens" and resp.content == "1. 1\n2. 2\n3."


def test_llamaserver_context_error_trims_once_then_names_the_context_size(home, llm_server,
                                                                          capsys):
    cfg = write_config(home, llm_server, p={"model": "smollm2", "max_retries": 2})
    llm_server.default = golden("llamaserver_context_overflow")
    assert main(["-m", "p", "--config", cfg, "Summarise this long text."]) == 1
    err = capsys.readouterr().err
    assert len(llm_server.requests) == 2  # one retry after trimming the history, no more
    assert "exceeds the available context size (512 tokens)" in err and "Traceback" not in err


def test_llamaserver_messages_stream_through_the_anthropic_sdk(home, llm_server):
    client = client_for(home, llm_server, model="smollm2", provider="anthropic")
    llm_server.queue(golden("llamaserver_messages_text"), golden("llamaserver_messages_max_tokens"))
    chunks, resp = run_chat(client, [{"role": "user", "content": "Say hello."}])
    assert resp.content == "I'm here to help with any creative writing project."
    assert len(chunks) > 5 and resp.stop_reason == "end_turn"
    assert (resp.usage.input, resp.usage.output) == (27, 12)
    _, resp = run_chat(client, [{"role": "user", "content": "Count."}])
    assert resp.stop_reason == "max_tokens" and resp.content == "1. 1\n2. 2\n3."
