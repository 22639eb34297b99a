"""Each provider kind × tool mode through the real SDKs against the local test server."""

from __future__ import annotations

import json

import pytest
from llm_server import (
    KIND_PATHS,
    KINDS,
    Reply,
    client_for,
    llm_server,
    run_chat,
    tool_schema,
)

import llmcore
from llmcore.base import ThinkingChunk

__all__ = ["llm_server"]
TOOLS = [tool_schema("file_read", path="string"), tool_schema("code_run", script="string")]



def native_turn(text: str = "Reading both.") -> Reply:
    return Reply(text=text, thinking="let me think",
                 tool_calls=[("file_read", '{"path": "a.txt"}'), ("code_run", '{"script": "ls"}')])


def text_turn() -> Reply:
    return Reply(text='Reading.\n<tool_use>{"name": "file_read", "arguments": {"path": "a.txt"}}'
                      '</tool_use>\n<tool_call>{"name": "code_run", "arguments": {"script": "ls"}}'
                      "</tool_call>", thinking="let me think")


@pytest.mark.parametrize("mode", ["native", "text"])
@pytest.mark.parametrize("kind", KINDS)
def test_multi_turn_tool_task(home, llm_server, kind, mode):
    client = client_for(home, llm_server, provider=kind, tool_mode=mode)
    llm_server.queue(native_turn() if mode == "native" else text_turn(), Reply(text="All done."))
    first = [{"role": "system", "content": "You are a test."}, {"role": "user", "content": "go"}]
    chunks, resp = run_chat(client, first, TOOLS)
    assert [tc.function.name for tc in resp.tool_calls] == ["file_read", "code_run"]
    assert json.loads(resp.tool_calls[0].function.arguments) == {"path": "a.txt"}
    assert resp.stop_reason == "tool_use"
    assert resp.thinking == "let me think"
    assert any(isinstance(c, ThinkingChunk) for c in chunks)
    assert len([c for c in chunks if not isinstance(c, ThinkingChunk)]) > 1  # streamed
    results = [{"tool_use_id": tc.id, "content": f"result {i}"}
               for i, tc in enumerate(resp.tool_calls)]
    _, resp2 = run_chat(client, [{"role": "user", "content": "next", "tool_results": results}],
                        TOOLS)
    assert resp2.content == "All done." and not resp2.tool_calls
    sent = json.dumps(llm_server.bodies(KIND_PATHS[kind])[-1])
    assert "result 0" in sent and "result 1" in sent
    assert client.total_usage.input == 200 and client.total_usage.cached == 40
    assert client.total_usage.output == 20
    assert [m["role"] for m in client.history] == ["user", "assistant", "user", "assistant"]


@pytest.mark.parametrize("kind", KINDS)
def test_native_mode_sends_tools_in_api_field(home, llm_server, kind):
    client = client_for(home, llm_server, provider=kind)
    llm_server.queue(Reply(text="hi"))
    run_chat(client, [{"role": "user", "content": "go"}], TOOLS)
    body = llm_server.bodies()[-1]
    assert len(body["tools"]) == 2 and "tool_use>" not in json.dumps(body)


@pytest.mark.parametrize(("setting", "sent"), [
    (None, None), ("required", "required"),
    ("file_read", {"type": "function", "function": {"name": "file_read"}})])
def test_openai_tool_choice_setting_is_sent_with_the_tools(home, llm_server, setting, sent):
    client = client_for(home, llm_server, provider="openai", tool_choice=setting)
    llm_server.queue(Reply(text="hi"), Reply(text="again"))
    run_chat(client, [{"role": "user", "content": "go"}], TOOLS)
    run_chat(client, [{"role": "user", "content": "no tools now"}])
    with_tools, without = llm_server.bodies()
    assert with_tools.get("tool_choice") == sent
    assert "tool_choice" not in without  # the API refuses a tool_choice without tools


def test_openai_extra_body_fields_reach_the_request(home, llm_server):
    client = client_for(home, llm_server, provider="openai",
                        extra_body={"grammar": 'root ::= "hi"', "top_k": 1})
    llm_server.queue(Reply(text="hi"), Reply(text="hi"))
    run_chat(client, [{"role": "user", "content": "go"}])
    client.set_option("extra_body", '{"min_p": 0.1}')
    run_chat(client, [{"role": "user", "content": "again"}])
    first, second = llm_server.bodies()
    assert first["grammar"] == 'root ::= "hi"' and first["top_k"] == 1
    assert second["min_p"] == 0.1 and "grammar" not in second


def test_anthropic_temperature_reaches_the_request(home, llm_server):
    client = client_for(home, llm_server, provider="anthropic", temperature=0.2)
    llm_server.queue(Reply(text="hi"))
    _, resp = run_chat(client, [{"role": "user", "content": "go"}])
    assert resp.content == "hi" and llm_server.bodies()[-1]["temperature"] == 0.2


def test_openai_assistant_tool_message_has_empty_string_content(home, llm_server):
    client = client_for(home, llm_server, provider="openai")
    llm_server.queue(Reply(tool_calls=[("file_read", '{"path": "a"}')]), Reply(text="ok"))
    _, resp = run_chat(client, [{"role": "user", "content": "go"}], TOOLS)
    run_chat(client, [{"role": "user", "content": "",
                       "tool_results": [{"tool_use_id": resp.tool_calls[0].id, "content": "x"}]}])
    assistant = llm_server.bodies()[-1]["messages"][1]
    assert assistant["role"] == "assistant" and assistant["content"] == ""


def test_openai_reasoning_content_round_trips_for_compatible_vendor(home, llm_server):
    client = client_for(home, llm_server, provider="openai", model="deepseek-reasoner")
    llm_server.queue(Reply(text="a", thinking="deep thought"), Reply(text="b"))
    run_chat(client, [{"role": "user", "content": "go"}])
    run_chat(client, [{"role": "user", "content": "more"}])
    assistant = llm_server.bodies()[-1]["messages"][1]
    assert assistant["reasoning_content"] == "deep thought"


def test_openai_reasoning_model_uses_max_completion_tokens(home, llm_server):
    client = client_for(home, llm_server, provider="openai", model="gpt-5.4",
                        reasoning_effort="high", temperature=0.3, max_tokens=1234)
    llm_server.queue(Reply(text="a"))
    run_chat(client, [{"role": "user", "content": "go"}])
    body = llm_server.bodies()[-1]
    assert body["max_completion_tokens"] == 1234 and "max_tokens" not in body
    assert body["reasoning_effort"] == "high" and "temperature" not in body


@pytest.mark.parametrize(("model", "given", "sent"), [
    ("kimi-k2.5", 0.3, 1.0), ("glm-4.6", 0.0, 0.01), ("glm-4.6", 1.5, 1.0), ("qwen3", 0.2, 0.2)])
def test_vendor_temperature_quirks(home, llm_server, model, given, sent):
    client = client_for(home, llm_server, provider="openai", model=model, temperature=given)
    llm_server.queue(Reply(text="a"))
    run_chat(client, [{"role": "user", "content": "go"}])
    assert llm_server.bodies()[-1]["temperature"] == sent


def test_anthropic_cache_markers_thinking_and_effort(home, llm_server):
    client = client_for(home, llm_server, provider="anthropic", thinking="enabled",
                        thinking_budget=2048, reasoning_effort="high")
    llm_server.queue(Reply(text="one"), Reply(text="two"), Reply(text="three"))
    run_chat(client, [{"role": "system", "content": "SYS"}, {"role": "user", "content": "u1"}])
    run_chat(client, [{"role": "user", "content": "u2"}])
    run_chat(client, [{"role": "user", "content": "u3"}])
    body = llm_server.bodies()[-1]
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    marked = [m["content"][-1]["text"] for m in body["messages"]
              if "cache_control" in m["content"][-1]]
    assert marked == ["two"]  # no tool result in the newest message: the reply before it
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["output_config"] == {"effort": "high"}


def test_anthropic_cache_marker_never_lands_on_a_thinking_block(home, llm_server):
    client = client_for(home, llm_server, provider="anthropic", thinking="enabled")
    llm_server.queue(Reply(thinking="only thoughts"), Reply(text="two"))
    run_chat(client, [{"role": "user", "content": "u1"}])
    run_chat(client, [{"role": "user", "content": "u2"}])
    reply = llm_server.bodies()[-1]["messages"][1]
    assert [b["type"] for b in reply["content"]] == ["thinking"]  # it went back, unmarked
    assert "cache_control" not in reply["content"][0]


def test_anthropic_thinking_signature_round_trips(home, llm_server):
    client = client_for(home, llm_server, provider="anthropic", thinking="adaptive")
    llm_server.queue(Reply(text="a", thinking="hmm"), Reply(text="b"))
    run_chat(client, [{"role": "user", "content": "go"}])
    run_chat(client, [{"role": "user", "content": "more"}])
    first = llm_server.bodies()[-1]["messages"][1]["content"][0]
    assert first == {"type": "thinking", "thinking": "hmm", "signature": "sig-3"}
    assert llm_server.bodies()[-1]["thinking"] == {"type": "adaptive"}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("stop", ["max_tokens", "refusal"])
def test_truncation_and_refusal_reach_the_loop(home, llm_server, kind, stop):
    client = client_for(home, llm_server, provider=kind)
    llm_server.queue(Reply(text="partial", stop=stop))
    _, resp = run_chat(client, [{"role": "user", "content": "go"}])
    assert resp.stop_reason == stop and resp.content == "partial"


def test_text_mode_tool_list_rides_with_the_task_and_the_newest_message_gets_a_reminder(
        home, llm_server):
    client = client_for(home, llm_server, provider="openai", tool_mode="text")
    for turn in range(6):
        llm_server.queue(Reply(text=f"turn {turn}"))
        tools = TOOLS if turn != 3 else TOOLS[:1]
        run_chat(client, [{"role": "user", "content": f"u{turn}"}], tools)
    bodies = llm_server.bodies()
    assert "tools" not in bodies[0]
    for turn, body in enumerate(bodies):
        users = [m["content"] for m in body["messages"] if m["role"] == "user"]
        assert users[0].startswith("u0") and users[0].count("Available tools") == 1
        assert sum(text.count("Available tools") for text in users) == 1
        assert ("Tools as listed" in users[-1]) == (turn > 0)
        names = '"name": "code_run"' in users[0]
        assert names == (turn != 3)  # the list as it is now: turn 3 had one tool
    assert bodies[2]["messages"][:2] == bodies[1]["messages"][:2]  # a stable prefix


def test_text_mode_json_array_and_bad_json(home, llm_server):
    client = client_for(home, llm_server, provider="openai", tool_mode="text")
    array = '<summary>Reading it</summary>[{"name": "file_read", "arguments": {"path": "x"}}]'
    broken = '<tool_use>{"name": "code_run", "arguments": {"script": </tool_use>'
    llm_server.queue(Reply(text=array), Reply(text=broken))
    _, resp = run_chat(client, [{"role": "user", "content": "go"}], TOOLS)
    assert [(t.function.name, json.loads(t.function.arguments)) for t in resp.tool_calls] == [
        ("file_read", {"path": "x"})]
    _, resp = run_chat(client, [{"role": "user", "content": "again", "tool_results": [
        {"tool_use_id": resp.tool_calls[0].id, "content": "r"}]}], TOOLS)
    assert resp.tool_calls[0].function.name == "code_run"
    with pytest.raises(json.JSONDecodeError):
        json.loads(resp.tool_calls[0].function.arguments)


def test_text_mode_call_with_raw_newlines_in_strings_keeps_its_name(home, llm_server):
    client = client_for(home, llm_server, provider="openai", tool_mode="text")
    llm_server.queue(Reply(text='<tool_use>{"name": "code_run", "arguments": '
                                '{"script": "echo a\necho b"}}</tool_use>'), Reply(text="ok"))
    _, resp = run_chat(client, [{"role": "user", "content": "go"}], TOOLS)
    call = resp.tool_calls[0]
    assert call.function.name == "code_run"
    assert json.loads(call.function.arguments) == {"script": "echo a\necho b"}
    run_chat(client, [{"role": "user", "content": "next", "tool_results": [
        {"tool_use_id": call.id, "content": "r"}]}], TOOLS)
    assert client.history[1]["content"][-1]["input"] == {"script": "echo a\necho b"}


CODE_EXAMPLES = [
    'Schemas look like this:\n```python\nname = [{"type": "string"}]\n'
    'age = [{"type": "integer", "minimum": 0}]\n```\nThat is all.',
    'Here is the data:\n```json\n[{"name": "Alice", "age": 30}]\n```',
    'To run code you would write:\n```\n<tool_use>{"name": "code_run", "arguments": '
    '{"script": "touch PWNED"}}</tool_use>\n```\nbut I will not.',
    '~~~xml\n<tool_call>{"name": "file_read", "arguments": {"path": "x"}}</tool_call>\n~~~',
    'A batch looks like:\n```json\n[{"name": "file_read", "arguments": {"path": "x"}}]\n```',
    '```python\nschema = [{"type": "string", "name": "file_read"}]\n```',
    '~~~\n[{"name": "code_run", "arguments": {"script": "ls"}}]',  # a fence never closed
    'Write `<tool_use>{"name": "code_run", "arguments": {"script": "ls"}}</tool_use>` to call.',
    'Or ``<tool_call>{"name": "file_read", "arguments": {"path": "`x`"}}</tool_call>``.',
    'An array like `[{"name": "file_read", "arguments": {"path": "x"}}]` is a batch.',
    '<pre>\n<tool_use>{"name": "code_run", "arguments": {"script": "touch PWNED"}}</tool_use>'
    '\n</pre>\nThat is the form.',
    '<PRE class="x"><code>[{"name": "file_read", "arguments": {"path": "x"}}]</code></PRE>',
    'An example:\n\n    <tool_use>{"name": "code_run", "arguments": {"script": "ls"}}'
    '</tool_use>\n\nThat is the form.',
    '    <tool_call>{"name": "file_read", "arguments": {"path": "x"}}</tool_call>',
    'A batch:\n  \n\t[{"name": "file_read", "arguments": {"path": "x"}},\n\n'
    '     {"name": "code_run", "arguments": {"script": "ls"}}]',
]


@pytest.mark.parametrize("reply", CODE_EXAMPLES)
def test_text_mode_code_examples_are_not_tool_calls(home, llm_server, reply):
    client = client_for(home, llm_server, provider="openai", tool_mode="text")
    llm_server.queue(Reply(text=reply))
    _, resp = run_chat(client, [{"role": "user", "content": "go"}], TOOLS)
    assert resp.tool_calls == [] and resp.stop_reason == "end_turn"


def test_text_mode_call_beside_a_code_example_runs_alone(home, llm_server):
    client = client_for(home, llm_server, provider="openai", tool_mode="text")
    reply = ('Example:\n```\n<tool_use>{"name": "code_run", "arguments": {"script": "rm x"}}'
             '</tool_use>\n```\nNow for real:\n<tool_use>{"name": "file_read", "arguments": '
             '{"path": "notes ```md```.txt"}}</tool_use>')
    llm_server.queue(Reply(text=reply))
    _, resp = run_chat(client, [{"role": "user", "content": "go"}], TOOLS)
    assert [(t.function.name, json.loads(t.function.arguments)) for t in resp.tool_calls] == [
        ("file_read", {"path": "notes ```md```.txt"})]


@pytest.mark.parametrize("reply", [
    'Run `ls` first, then:\n<tool_use>{"name": "code_run", "arguments": {"script": '
    '"echo `date`"}}</tool_use>',
    '<summary>With `a` and ``b`` in mind</summary>\n'
    '[{"name": "code_run", "arguments": {"script": "echo `date`"}}]',
    'Like <pre>this</pre>, then:\n<tool_use>{"name": "code_run", "arguments": {"script": '
    '"echo `date`"}}</tool_use>',
    'Example:\n\n    ls -l\n\nNow for real:\n    <tool_use>{"name": "code_run", "arguments": '
    '{"script": "echo `date`"}}</tool_use>',
    '<tool_use>{"name": "code_run", "arguments": {"script": "echo `date`"}}</tool_use>\n\n'
    '    indented notes after the call',
])
def test_text_mode_call_beside_inline_code_still_runs(home, llm_server, reply):
    client = client_for(home, llm_server, provider="openai", tool_mode="text")
    llm_server.queue(Reply(text=reply))
    _, resp = run_chat(client, [{"role": "user", "content": "go"}], TOOLS)
    assert [(t.function.name, json.loads(t.function.arguments)) for t in resp.tool_calls] == [
        ("code_run", {"script": "echo `date`"})]


@pytest.mark.parametrize("kind", KINDS)
def test_invalid_streamed_tool_arguments_are_passed_raw(home, llm_server, kind):
    client = client_for(home, llm_server, provider=kind)
    llm_server.queue(Reply(tool_calls=[("code_run", '{"script": "x"')]), Reply(text="ok"))
    _, resp = run_chat(client, [{"role": "user", "content": "go"}], TOOLS)
    assert resp.tool_calls[0].function.arguments == '{"script": "x"'
    run_chat(client, [{"role": "user", "content": "", "tool_results": [
        {"tool_use_id": resp.tool_calls[0].id, "content": "bad json"}]}], TOOLS)
    assert "bad json" in json.dumps(llm_server.bodies()[-1])


@pytest.mark.parametrize("kind", KINDS)
def test_api_key_never_leaks(home, llm_server, kind, monkeypatch, caplog):
    secret = "sk-test-SECRET-0123456789abcdef"
    monkeypatch.setenv("MY_KEY", secret)
    client = client_for(home, llm_server, provider=kind, api_key_env="MY_KEY")
    llm_server.queue(Reply(status=500, message=f"bad key {secret}"), Reply(text="fine"),
                     Reply(status=401, message=f"Incorrect API key provided: {secret}"))
    run_chat(client, [{"role": "system", "content": "s"}, {"role": "user", "content": "go"}])
    with pytest.raises(llmcore.LLMError) as err:
        run_chat(client, [{"role": "user", "content": "again"}])
    headers = json.dumps(llm_server.requests[0]["headers"])
    assert secret in headers  # the key did reach the server …
    logs = "".join(p.read_text() for p in (home / "logs").iterdir())
    assert "go" in logs and "fine" in logs
    for text in (str(err.value), logs, caplog.text, repr(client.history)):
        assert secret not in text  # … and nowhere else
    assert err.value.status == 401 and "API key" in str(err.value)


def test_log_records_prompts_and_responses(home, llm_server):
    client = client_for(home, llm_server, provider="openai")
    llm_server.queue(Reply(text="the answer", tool_calls=[("file_read", '{"path": "q"}')]))
    run_chat(client, [{"role": "system", "content": "SYSTEM"}, {"role": "user", "content": "Q?"}])
    (log,) = (home / "logs").iterdir()
    text = log.read_text()
    assert "SYSTEM" in text and "Q?" in text and "the answer" in text and "file_read" in text


def test_a_chat_tool_call_cut_at_max_tokens_keeps_that_stop_reason(home, llm_server):
    client = client_for(home, llm_server)
    llm_server.queue(Reply(tool_calls=[("file_write", '{"path": "a.txt", "content": "x')],
                           stop="max_tokens"))
    _, resp = run_chat(client, [{"role": "user", "content": "write"}], TOOLS)
    assert resp.tool_calls and resp.stop_reason == "max_tokens"
