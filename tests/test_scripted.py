"""The scripted provider (SPEC §5) and language selection."""

from __future__ import annotations

import pytest
from genutil import drain

from frontends.cli import main
from llmcore.base import ConfigError, LLMError, ThinkingChunk
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


@pytest.mark.parametrize("content, field, words", [
    ("- text: 1\n", "[0].text", "must be a string"),
    ("- {text: hi, tool_calls: [{args: {path: x}}]}\n", "[0].tool_calls[0].name", "missing"),
    ("- {text: hi}\n- {tool_calls: [{name: a}, {args: {}}]}\n", "[1].tool_calls[1].name",
     "missing"),
    ("- {text: hi, tool_calls: x}\n", "[0].tool_calls", "must be a list"),
    ("- {text: hi, tool_call: [{name: file_read}]}\n", "[0].tool_call",
     "unknown field; did you mean tool_calls?"),
    ("- {tool_calls: [{name: file_read, args: [1, 2]}]}\n", "[0].tool_calls[0].args",
     "must be a mapping"),
    ("- {tool_calls: [{name: f, raw_args: {a: 1}}]}\n", "[0].tool_calls[0].raw_args",
     "must be the arguments as JSON text"),
    ("- {tool_calls: [{name: f, arg: {}}]}\n", "[0].tool_calls[0].arg", "unknown field"),
    ("- {tool_calls: [7]}\n", "[0].tool_calls[0]", "expected a mapping"),
    ("- hello\n", "[0]", "expected a mapping"),
    ("- {raise: boom, status: high}\n", "[0].status", "whole number"),
    ("- {text: a, usage: {input: 1, outptu: 2}}\n", "[0].usage.outptu", "unknown field"),
    ("- {text: a, chunk: 0}\n", "[0].chunk", "at least 1"),
])
def test_a_malformed_script_is_a_config_error_naming_file_and_field(tmp_path, capsys, content,
                                                                    field, words):
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    assert main(["-m", f"scripted:{path}", "hi"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: {field}: " in err and words in err and "Traceback" not in err


def test_an_inline_script_is_checked_too():
    with pytest.raises(ConfigError, match=r"\[0\]\.tool_calls\[0\]\.name: missing"):
        ScriptedClient([{"tool_calls": [{"args": {}}]}])


@pytest.mark.parametrize("env, expect", [
    ({"GA_LANG": "zh"}, "zh"), ({"GA_LANG": "en", "LANG": "zh_CN.UTF-8"}, "en"),
    ({"GA_LANG": "", "LANG": "zh_CN.UTF-8"}, "zh"), ({"GA_LANG": "", "LANG": "de_DE"}, "en"),
])
def test_language_from_ga_lang_else_locale(monkeypatch, env, expect):
    monkeypatch.delenv("LC_ALL", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert lang_from_env() == expect
