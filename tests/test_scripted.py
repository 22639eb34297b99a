"""The scripted provider (SPEC §5) and language selection."""

from __future__ import annotations

import pytest
from genutil import drain

from llmcore.base import LLMError, ThinkingChunk
from llmcore.scripted import EXHAUSTED, ScriptedClient
from tools.texts import lang_from_env

consume = drain


def test_streams_text_in_small_chunks_and_records_calls():
    client = ScriptedClient([{"text": "a fairly long reply text", "thinking": "why"}])
    chunks, resp = consume(client.chat([{"role": "system", "content": "S"},
                                        {"role": "user", "content": "hi"}], [{"t": 1}]))
    texts = [c for c in chunks if not isinstance(c, ThinkingChunk)]
    assert len(texts) > 2 and "".join(texts) == "a fairly long reply text"
    assert "".join(c for c in chunks if isinstance(c, ThinkingChunk)) == "why"
    assert resp.content == "a fairly long reply text" and resp.thinking == "why"
    assert client.calls[0]["system"] == "S" and client.calls[0]["tools"] == [{"t": 1}]
    client.assert_complete()


def test_tool_calls_raw_args_and_exhaustion():
    client = ScriptedClient([{"tool_calls": [{"name": "x", "args": {"a": 1}},
                                             {"name": "y", "raw_args": "{bad"}]}])
    _, resp = consume(client.chat([{"role": "user", "content": "go"}]))
    assert [tc.function.name for tc in resp.tool_calls] == ["x", "y"]
    assert resp.tool_calls[0].function.arguments == '{"a": 1}'
    assert resp.tool_calls[1].function.arguments == "{bad"
    assert resp.stop_reason == "tool_use"
    _, resp = consume(client.chat([{"role": "user", "content": "more"}]))
    assert resp.content == EXHAUSTED and not resp.tool_calls


def test_assert_complete_fails_when_turns_are_left():
    client = ScriptedClient([{"text": "a"}, {"text": "b"}])
    consume(client.chat([{"role": "user", "content": "go"}]))
    with pytest.raises(AssertionError, match="1 scripted turn"):
        client.assert_complete()


def test_a_step_may_raise():
    client = ScriptedClient([{"raise": "server on fire", "status": 503}])
    with pytest.raises(LLMError, match="server on fire"):
        consume(client.chat([{"role": "user", "content": "go"}]))


@pytest.mark.parametrize("env, expect", [
    ({"GA_LANG": "zh"}, "zh"), ({"GA_LANG": "en", "LANG": "zh_CN.UTF-8"}, "en"),
    ({"GA_LANG": "", "LANG": "zh_CN.UTF-8"}, "zh"), ({"GA_LANG": "", "LANG": "de_DE"}, "en"),
])
def test_language_from_ga_lang_else_locale(monkeypatch, env, expect):
    monkeypatch.delenv("LC_ALL", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert lang_from_env() == expect
