"""Retries, idle timeouts, in-stream errors, final errors and abort, through the real SDKs."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import pytest
from llm_server import GO, KIND_PATHS, KINDS, Reply, client_for, llm_server, run_chat

import llmcore
from llmcore.retry import classify

__all__ = ["llm_server"]



@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("status", [408, 409, 425, 429, 500, 503, 529])
def test_transient_status_is_retried(home, llm_server, kind, status):
    client = client_for(home, llm_server, provider=kind)
    llm_server.queue(Reply(status=status), Reply(text="recovered"))
    _, resp = run_chat(client, GO)
    assert resp.content == "recovered" and len(llm_server.requests) == 2
    assert client.events[0]["type"] == "retry" and client.events[0]["status"] == status


@pytest.mark.parametrize("kind", KINDS)
def test_retry_after_is_honoured(home, llm_server, kind):
    client = client_for(home, llm_server, provider=kind, backoff_base=5)
    llm_server.queue(Reply(status=429, retry_after="0.05"), Reply(text="ok"))
    _, resp = run_chat(client, GO)
    assert resp.content == "ok" and client.events[0]["wait"] == pytest.approx(0.05)


def test_retry_after_as_a_past_http_date_retries_at_once(home, llm_server):
    client = client_for(home, llm_server, provider="openai", backoff_base=5)
    llm_server.queue(Reply(status=503, retry_after="Wed, 21 Oct 2015 07:28:00 GMT"),
                     Reply(text="ok"))
    _, resp = run_chat(client, GO)
    assert resp.content == "ok" and client.events[0]["wait"] == 0


def test_retry_after_as_an_http_date_above_cap_fails_fast_with_reason(home, llm_server):
    client = client_for(home, llm_server, provider="openai", retry_after_cap=5)
    later = format_datetime(datetime.now(timezone.utc) + timedelta(hours=1), usegmt=True)
    llm_server.queue(Reply(status=429, retry_after=later), Reply(text="never"))
    with pytest.raises(llmcore.LLMError) as err:
        run_chat(client, GO)
    assert err.value.status == 429 and "above the 5s cap" in str(err.value)
    assert len(llm_server.requests) == 1


def test_retry_after_above_cap_fails_fast_with_reason(home, llm_server):
    client = client_for(home, llm_server, provider="openai", retry_after_cap=5)
    llm_server.queue(Reply(status=429, retry_after="3600"), Reply(text="never"))
    with pytest.raises(llmcore.LLMError) as err:
        run_chat(client, GO)
    assert err.value.status == 429 and "3600" in str(err.value)
    assert len(llm_server.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("status", [401, 403])
def test_auth_errors_are_final_at_once(home, llm_server, kind, status):
    client = client_for(home, llm_server, provider=kind)
    llm_server.queue(Reply(status=status, message="invalid x-api-key"), Reply(text="never"))
    with pytest.raises(llmcore.LLMError) as err:
        run_chat(client, GO)
    assert err.value.status == status and "authentication failed" in str(err.value)
    assert len(llm_server.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_last_retry_gives_a_clear_error(home, llm_server, kind):
    client = client_for(home, llm_server, provider=kind, max_retries=2)
    llm_server.queue(*[Reply(status=503, message="down for maintenance")] * 3)
    with pytest.raises(llmcore.LLMError) as err:
        run_chat(client, GO)
    assert len(llm_server.requests) == 3
    url = f"http://127.0.0.1:{llm_server.port}{KIND_PATHS[kind]}"
    assert str(err.value) == f"p [{kind}]: 503: down for maintenance (at {url})"


@pytest.mark.parametrize("kind", KINDS)
def test_dropped_stream_is_retried(home, llm_server, kind):
    client = client_for(home, llm_server, provider=kind)
    llm_server.queue(Reply(text="abcdefghijkl", drop_after=3),
                     Reply(text="whole", tool_calls=[("f", "{}")]))
    _, resp = run_chat(client, GO)
    assert resp.content == "whole" and resp.tool_calls[0].function.name == "f"
    assert len(llm_server.requests) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_stream_cut_inside_a_tool_call_is_reported_not_replayed(home, llm_server, kind):
    client = client_for(home, llm_server, provider=kind)
    args = '{"path": "a-rather-long-file-name.txt"}'
    events = {"openai": 4, "openai-responses": 6, "anthropic": 7}[kind]
    llm_server.queue(Reply(text="abc", tool_calls=[("file_read", args)], drop_after=events))
    _, resp = run_chat(client, GO)
    assert resp.stop_reason == "error" and resp.tool_calls == []
    assert len(llm_server.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_silent_stream_is_cut_and_retried(home, llm_server, kind):
    client = client_for(home, llm_server, provider=kind, read_timeout=0.3)
    llm_server.queue(Reply(text="slow", stall_after=1, stall=2.0), Reply(text="fast"))
    _, resp = run_chat(client, GO)
    assert resp.content == "fast" and client.events[0]["status"] == "timeout"


@pytest.mark.parametrize("kind", KINDS)
def test_error_event_in_200_stream_is_retried_before_output(home, llm_server, kind):
    client = client_for(home, llm_server, provider=kind)
    llm_server.queue(Reply(text="xx", error_after=1, message="Overloaded"), Reply(text="ok"))
    _, resp = run_chat(client, GO)
    assert resp.content == "ok" and client.events[0]["status"] == 529


def numeric_error_event(kind: str, code: int, message: str) -> dict:
    """An error event whose code is an HTTP status (OpenRouter's form), in each API's shape."""
    if kind == "openai":
        return {"error": {"code": code, "message": message}}
    if kind == "anthropic":
        return {"type": "error", "error": {"code": code, "message": message}}
    return {"type": "error", "code": code, "message": message, "param": None,
            "sequence_number": 0}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("code", [429, 502])
def test_error_event_with_a_numeric_code_is_retried_like_that_status(home, llm_server, kind,
                                                                     code):
    client = client_for(home, llm_server, provider=kind)
    body = numeric_error_event(kind, code, "Rate limit exceeded")
    llm_server.queue(Reply(text="xx", error_after=0, body=body), Reply(text="ok"))
    _, resp = run_chat(client, GO)
    assert resp.content == "ok" and len(llm_server.requests) == 2
    assert client.events[0]["status"] == code


@pytest.mark.parametrize("kind", KINDS)
def test_error_event_with_code_401_fails_as_authentication(home, llm_server, kind):
    client = client_for(home, llm_server, provider=kind)
    body = numeric_error_event(kind, 401, "No auth credentials found")
    llm_server.queue(Reply(text="xx", error_after=0, body=body), Reply(text="never"))
    with pytest.raises(llmcore.LLMError) as err:
        run_chat(client, GO)
    assert err.value.status == 401 and "authentication failed" in str(err.value)
    assert len(llm_server.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_error_event_after_output_ends_the_reply_as_error(home, llm_server, kind):
    client = client_for(home, llm_server, provider=kind)
    skip = {"openai": 3, "openai-responses": 4, "anthropic": 5}[kind]
    llm_server.queue(Reply(text="abcdefgh", error_after=skip, message="Overloaded"))
    _, resp = run_chat(client, GO)
    assert resp.stop_reason == "error" and resp.content.startswith("abcd")
    assert len(llm_server.requests) == 1


def test_responses_failed_event_is_retried_then_final(home, llm_server):
    client = client_for(home, llm_server, provider="openai-responses", max_retries=1)
    llm_server.queue(*[Reply(stop="failed", message="server had an error")] * 2)
    with pytest.raises(llmcore.LLMError) as err:
        run_chat(client, GO)
    assert err.value.status == 500 and len(llm_server.requests) == 2


def test_responses_failed_with_bad_request_is_not_retried(home, llm_server):
    client = client_for(home, llm_server, provider="openai-responses")
    llm_server.queue(Reply(stop="failed", error_type="invalid_prompt", message="bad prompt"))
    with pytest.raises(llmcore.LLMError):
        run_chat(client, GO)
    assert len(llm_server.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_context_length_error_forces_one_trim_and_one_retry(home, llm_server, kind):
    client = client_for(home, llm_server, provider=kind, context_win=100000)
    big = "x" * 40000
    client.history = [m for i in range(6) for m in (
        {"role": "user", "content": [{"type": "text", "text": f"q{i} {big}"}]},
        {"role": "assistant", "content": [{"type": "text", "text": f"a{i}"}]})]
    too_long = Reply(status=400, error_type="invalid_request_error",
                     message="prompt is too long: 250000 tokens > 200000 maximum")
    llm_server.queue(too_long, Reply(text="fits now"))
    _, resp = run_chat(client, GO)
    assert resp.content == "fits now"
    sizes = [len(str(b)) for b in llm_server.bodies()]
    assert sizes[1] < sizes[0] / 1.5
    llm_server.queue(too_long, too_long)
    with pytest.raises(llmcore.LLMError) as err:
        run_chat(client, GO)
    assert "too long" in str(err.value)


def test_abort_stops_a_retry_wait_at_once(home, llm_server):
    client = client_for(home, llm_server, provider="openai")
    llm_server.queue(Reply(status=429, retry_after="30"), Reply(text="late"))
    threading.Timer(0.3, client.abort).start()
    _, resp = run_chat(client, GO)
    assert resp.stop_reason == "aborted" and len(llm_server.requests) == 1
    llm_server.replies.clear()
    llm_server.queue(Reply(text="works again"))
    assert run_chat(client, GO)[1].content == "works again"


@pytest.mark.parametrize("kind", ["anthropic", "openai", "openai-responses"])
def test_abort_cuts_a_stalled_stream(home, llm_server, kind):
    client = client_for(home, llm_server, provider=kind)
    llm_server.queue(Reply(text="a" * 40, stall_after=4, stall=60))
    gen = client.chat(GO)
    first = next(gen)
    rest: list = []
    reader = threading.Thread(target=lambda: rest.extend(_drain(gen)), daemon=True)
    reader.start()
    client.abort()  # from another thread, while the reader waits for the next chunk
    reader.join(timeout=15)  # the server stays silent for 60 s: only a real cut ends it
    assert not reader.is_alive(), "abort did not cut the stalled stream"
    assert first == "aaaa" and rest[-1].stop_reason == "aborted"


def _drain(gen):
    while True:
        try:
            yield next(gen)
        except StopIteration as stop:
            yield stop.value
            return


def test_classify_connection_errors_as_retryable():
    import httpx2

    fail = classify(httpx2.ReadTimeout("idle"), 60)
    assert fail.retryable and fail.status == "timeout"
    fail = classify(httpx2.RemoteProtocolError("peer closed"), 60)
    assert fail.retryable and fail.status == "connection"


@pytest.mark.parametrize("kind", KINDS)
def test_before_request_runs_before_every_request_retries_included(home, llm_server, kind):
    client = client_for(home, llm_server, provider=kind)
    seen: list[int] = []  # how many requests the server had when the hook ran
    client.before_request = lambda: seen.append(len(llm_server.requests))
    llm_server.queue(Reply(status=503), Reply(text="recovered"))
    assert run_chat(client, GO)[1].content == "recovered"
    assert seen == [0, 1]


def test_an_abort_while_before_request_waits_sends_no_request(home, llm_server):
    client = client_for(home, llm_server, provider="openai")
    client.before_request = client.abort  # the wait ends because the task was aborted
    _, resp = run_chat(client, GO)
    assert resp.stop_reason == "aborted" and llm_server.requests == []


def test_the_scripted_model_calls_before_request_per_turn():
    from llmcore.scripted import ScriptedClient

    client = ScriptedClient([{"text": "one"}, {"text": "two"}])
    calls: list[int] = []
    client.before_request = lambda: calls.append(client.pos)
    run_chat(client, GO)
    run_chat(client, GO)
    assert calls == [0, 1]
