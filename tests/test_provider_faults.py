"""Faults of real servers, through the real SDKs against the local test server: drips,
answers that are not API streams, dropped streams, missing usage, llama.cpp's repeated
tool names, refused connections, error bodies and their URLs."""

from __future__ import annotations

import json
import socket
import threading

import pytest
from llm_server import (
    GO,
    HTML_PAGE,
    KIND_PATHS,
    KINDS,
    Reply,
    anthropic_events,
    client_for,
    llm_server,
    run_chat,
    tool_schema,
)

import llmcore
from llmcore import provider
from llmcore.openai_chat import add_name

__all__ = ["llm_server"]



def url_of(server, kind: str) -> str:
    return f"http://127.0.0.1:{server.port}{KIND_PATHS[kind]}"


def fail_twice(home, server, kind: str, reply: Reply, **prof) -> llmcore.LLMError:
    client = client_for(home, server, provider=kind, max_retries=1, **prof)
    server.queue(reply, reply)
    with pytest.raises(llmcore.LLMError) as err:
        run_chat(client, GO)
    assert len(server.requests) == 2  # transient: retried once, then the one failure
    return err.value


# ----- a total deadline besides the idle timeout ---------------------------------------
DEADLINE = 1.5  # request_timeout: a dripped reply (several seconds) never makes it
@pytest.mark.parametrize("kind", KINDS)
def test_a_dripping_server_is_cut_at_request_timeout_and_retried(home, llm_server, kind):
    client = client_for(home, llm_server, provider=kind, read_timeout=5,
                        request_timeout=DEADLINE)  # a whole fast reply fits, even under load
    llm_server.queue(Reply(text="slow", drip=0.005), Reply(text="fast"))
    _, resp = run_chat(client, GO)
    assert resp.content == "fast"
    assert client.events[0]["status"] == "timeout"
    assert f"request_timeout ({DEADLINE} s)" in client.events[0]["message"]


def test_a_dripping_server_fails_naming_request_timeout(home, llm_server):
    err = fail_twice(home, llm_server, "openai", Reply(text="slow", drip=0.005),
                     read_timeout=5, request_timeout=DEADLINE)
    assert err.status == "timeout" and f"request_timeout ({DEADLINE} s)" in err.message
    assert url_of(llm_server, "openai") in err.message


def test_a_deadline_is_cut_after_the_deadline_thread_ended_for_lack_of_requests(monkeypatch):
    monkeypatch.setattr(provider, "WATCHDOG_IDLE", 0.0)
    watchdog = provider.Watchdog()
    with watchdog.deadline(30, lambda: None):
        ended = watchdog.thread
    ended.join(5)  # no request, and no idle time: it ends
    cut = threading.Event()
    with watchdog.deadline(0.01, cut.set) as deadline:
        assert cut.wait(5)
    assert deadline.expired and watchdog.thread is not ended


def test_requests_share_one_deadline_thread_instead_of_starting_one_each(home, llm_server):
    client = client_for(home, llm_server, provider="openai")
    others = set(threading.enumerate())  # other sessions' (earlier tests)
    watchers = []
    for n in range(3):
        llm_server.queue(Reply(text=f"reply {n}"))
        for _chunk in client.chat([{"role": "user", "content": f"go {n}"}]):
            watchers += [t for t in threading.enumerate()
                         if t.name == "ga-deadline" and t not in others]
    assert watchers and all(t is watchers[0] for t in watchers)


# ----- 200 answers that are no API stream ----------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_an_event_that_is_not_json_is_retried(home, llm_server, kind):
    client = client_for(home, llm_server, provider=kind)
    llm_server.queue(Reply(text="hello", bad_event_after=0), Reply(text="fine"))
    _, resp = run_chat(client, GO)
    assert resp.content == "fine" and client.events[0]["status"] == "bad response"


@pytest.mark.parametrize("kind", KINDS)
def test_an_event_that_is_not_json_fails_naming_provider_url_and_data(home, llm_server, kind):
    err = fail_twice(home, llm_server, kind, Reply(text="hello", bad_event_after=2))
    text = str(err)
    assert text.startswith(f"p [{kind}]: bad response: ")
    assert "not JSON" in text and "{not json" in text and url_of(llm_server, kind) in text


@pytest.mark.parametrize("kind", KINDS)
def test_an_html_page_with_status_200_fails_saying_what_came_back(home, llm_server, kind):
    err = fail_twice(home, llm_server, kind, Reply(page=HTML_PAGE))
    text = str(err)
    assert text.startswith(f"p [{kind}]: bad response: ")
    assert "text/html" in text and "502 Bad Gateway" in text
    assert url_of(llm_server, kind) in text and "empty" not in text


@pytest.mark.parametrize("kind", KINDS)
def test_a_plain_text_answer_with_status_200_fails_saying_what_came_back(home, llm_server, kind):
    said = "upstream connect error or disconnect/reset before headers. reset reason: overflow"
    err = fail_twice(home, llm_server, kind, Reply(page=("text/plain", said)))
    text = str(err)
    assert text.startswith(f"p [{kind}]: bad response: ")
    assert "text/plain" in text and said in text and url_of(llm_server, kind) in text
    assert "context size" not in text


@pytest.mark.parametrize("kind", KINDS)
def test_a_json_answer_with_status_200_and_an_error_code_is_that_status(home, llm_server, kind):
    body = json.dumps({"error": {"code": 401, "message": "No auth credentials found"}})
    client = client_for(home, llm_server, provider=kind)
    llm_server.queue(Reply(page=("application/json", body)), Reply(text="never"))
    with pytest.raises(llmcore.LLMError) as err:
        run_chat(client, GO)
    assert err.value.status == 401 and "No auth credentials found" in str(err.value)
    assert len(llm_server.requests) == 1


def test_an_anthropic_delta_before_its_block_start_fails_as_a_bad_response(home, llm_server):
    err = fail_twice(home, llm_server, "anthropic", Reply(text="hello",
                                                          omit="content_block_start"))
    text = str(err)
    assert text.startswith("p [anthropic]: bad response: ")
    assert "content_block_delta" in text and url_of(llm_server, "anthropic") in text


def test_an_anthropic_delta_of_another_block_kind_fails_as_a_bad_response(home, llm_server):
    events = list(anthropic_events(Reply(thinking="hmm"), "m"))
    events[2] = ("content_block_start", {"type": "content_block_start", "index": 0,
                                         "content_block": {"type": "text", "text": ""}})
    body = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)
    raw = (f"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
           f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}").encode()
    err = fail_twice(home, llm_server, "anthropic", Reply(raw=raw))
    assert str(err).startswith("p [anthropic]: bad response: ")
    assert "a thinking_delta for a text block" in str(err)


# ----- dropped streams ------------------------------------------------------------------
def test_a_chat_stream_without_finish_reason_is_retried(home, llm_server):
    client = client_for(home, llm_server, provider="openai")
    llm_server.queue(Reply(text="abcdefgh", end_after=3), Reply(text="whole"))
    _, resp = run_chat(client, GO)
    assert resp.content == "whole" and client.events[0]["status"] == "dropped stream"


@pytest.mark.parametrize("kind", KINDS)
def test_an_empty_200_stream_fails_with_a_hint_about_the_server(home, llm_server, kind):
    err = fail_twice(home, llm_server, kind, Reply(text="never", end_after=0))
    text = str(err)
    assert err.status == "dropped stream" and "the stream ended without" in text
    assert "context size" in text and "server" in text and url_of(llm_server, kind) in text


# ----- llama.cpp repeats the tool name in every chunk ------------------------------------
def test_a_tool_name_repeated_in_every_chunk_is_not_appended(home, llm_server):
    client = client_for(home, llm_server, provider="openai")
    args = json.dumps({"path": "a.txt", "content": "some text to write"})
    llm_server.queue(Reply(tool_calls=[("file_write", args)], repeat_name=True))
    _, resp = run_chat(client, GO, [tool_schema("file_write", path="string")])
    assert [tc.function.name for tc in resp.tool_calls] == ["file_write"]
    assert json.loads(resp.tool_calls[0].function.arguments)["path"] == "a.txt"
    chunks = [json.loads(d) for _, d in llm_server.sent if d.startswith("{")]
    named = [c for c in chunks if c["choices"] and "file_write" in json.dumps(c)]
    assert len(named) > 2  # the server really sent the name again and again


def test_a_tool_name_split_over_chunks_is_joined():
    assert add_name(add_name("", "file_"), "write") == "file_write"
    assert add_name("file_write", "file_write") == "file_write"
    assert add_name("file_", "file_write") == "file_write"


# ----- usage the server does not report --------------------------------------------------
@pytest.mark.parametrize("kind", ["openai", "openai-responses"])
def test_missing_usage_is_estimated_from_characters(home, llm_server, kind):
    client = client_for(home, llm_server, provider=kind)
    llm_server.queue(Reply(text="x" * 300, no_usage=True))
    _, resp = run_chat(client, [{"role": "user", "content": "y" * 3000}])
    u = resp.usage
    assert u.estimated and 900 <= u.input <= 1200 and u.output == 100
    assert client.total_usage.estimated


def test_reported_usage_is_not_marked_estimated(home, llm_server):
    client = client_for(home, llm_server, provider="openai")
    llm_server.queue(Reply(text="hi", usage=(7, 0, 3)))
    _, resp = run_chat(client, GO)
    assert (resp.usage.input, resp.usage.output, resp.usage.estimated) == (7, 3, False)


@pytest.mark.parametrize("kind", KINDS)
def test_an_attempt_that_broke_after_output_is_counted_in_the_turns_usage(home, llm_server,
                                                                          kind):
    client = client_for(home, llm_server, provider=kind)
    llm_server.queue(Reply(text="x" * 400, drop_after=51), Reply(text="ok", usage=(7, 0, 3)))
    _, resp = run_chat(client, GO)
    assert resp.content == "ok" and len(llm_server.requests) == 2
    assert resp.usage.estimated and resp.usage.input > 7 and resp.usage.output >= 3 + 60
    assert client.total_usage.output == resp.usage.output


@pytest.mark.parametrize("kind", KINDS)
def test_a_reply_cut_by_an_error_after_output_counts_its_usage(home, llm_server, kind):
    client = client_for(home, llm_server, provider=kind)
    llm_server.queue(Reply(text="x" * 400, error_after=51))
    _, resp = run_chat(client, GO)
    assert resp.stop_reason == "error" and len(llm_server.requests) == 1
    assert resp.usage.estimated and resp.usage.input > 0 and resp.usage.output >= 60
    assert client.total_usage.output == resp.usage.output


# ----- error details, URLs, hints, the session log -----------------------------------------
@pytest.mark.parametrize(("kind", "api"), [("openai-responses", "Responses"),
                                           ("anthropic", "Messages")])
def test_a_404_keeps_the_detail_the_url_and_a_hint(home, llm_server, kind, api):
    client = client_for(home, llm_server, provider=kind)
    llm_server.queue(Reply(status=404, body={"detail": "Not Found"}))
    with pytest.raises(llmcore.LLMError) as err:
        run_chat(client, GO)
    text = str(err.value)
    assert err.value.status == 404 and "Not Found" in text and url_of(llm_server, kind) in text
    assert f"may not implement the {api} API; use provider: openai" in text
    log = "".join(p.read_text() for p in (home / "logs").glob("*.log"))
    assert "error:" in log and "404" in log and "Not Found" in log


@pytest.mark.parametrize("body", [{"error": "model 'x' not found"}, {"message": "no such model"}])
def test_an_error_body_in_any_common_shape_is_shown(home, llm_server, body):
    client = client_for(home, llm_server, provider="openai")
    llm_server.queue(Reply(status=400, body=body))
    with pytest.raises(llmcore.LLMError) as err:
        run_chat(client, GO)
    assert next(iter(body.values())) in str(err.value)


def test_a_refused_connection_names_the_url_and_is_retried_twice(home, llm_server):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    base = f"http://127.0.0.1:{port}/v1"
    client = client_for(home, llm_server, provider="openai", base_url=base, max_retries=5)
    with pytest.raises(llmcore.LLMError) as err:
        run_chat(client, GO)
    text = str(err.value)
    assert "connection refused" in text and f"{base}/chat/completions" in text
    assert "is the server running" in text
    assert [e["attempt"] for e in client.events if e["type"] == "retry"] == [1, 2]


# ----- a failed call leaves no unanswered message behind -----------------------------------
@pytest.mark.parametrize("mode", ["native", "text"])
def test_a_failed_call_drops_its_unanswered_message(home, llm_server, mode):
    client = client_for(home, llm_server, provider="openai", tool_mode=mode, max_retries=0)
    tools = [tool_schema("file_read", path="string")]
    llm_server.queue(Reply(status=404, body={"detail": "Not Found"}), Reply(text="hi there"))
    with pytest.raises(llmcore.LLMError):
        run_chat(client, [{"role": "system", "content": "sys"},
                          {"role": "user", "content": "Say hi"}], tools)
    assert client.history == []
    run_chat(client, [{"role": "user", "content": "Create the file a.txt"}], tools)
    sent = llm_server.bodies()[-1]["messages"]
    users = [m for m in sent if m["role"] == "user"]
    assert len(users) == 1 and "Say hi" not in json.dumps(sent)
    assert users[0]["content"].startswith("Create the file a.txt")
    if mode == "text":  # the tool list went out with the dropped message: it is sent again
        assert "file_read" in users[0]["content"]
