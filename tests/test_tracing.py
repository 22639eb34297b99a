"""OpenTelemetry traces (SPEC §15), in process with the SDK's in-memory exporter: when tracing
is on, the spans of a task (names, kinds, parents, GenAI attributes), errors, retries, and
message content only when asked for, redacted."""

from __future__ import annotations

import json
import sys

import pytest
from llm_server import Reply, llm_server, write_config
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import llmcore
from frontends import tracing
from frontends.cli import main
from frontends.spans import Tracer
from ga import GenericAgent
from llmcore.scripted import ScriptedClient
from llmcore.secrets import Redactor

__all__ = ["llm_server"]
SESSION = "20250101-120000-abcd"
SECRET = "hunter2-very-secret-value"
STEPS = [{"text": "<summary>read</summary>", "usage": {"input": 120, "cached": 40, "output": 12},
          "tool_calls": [{"name": "update_working_checkpoint", "args": {"key_info": "k"}},
                         {"name": "file_read", "args": {"path": "missing.txt"}}]},
         {"text": "all done", "usage": {"input": 300, "cached": 100, "cache_write": 50,
                                        "output": 7}}]


def traced(home, client, capture: bool = False, **kw):
    """An agent whose tasks are traced into memory: (agent, spans of the tasks run so far)."""
    exporter = InMemorySpanExporter()
    tracer = Tracer([exporter], capture=capture)
    agent = GenericAgent(client, home=home, cwd=".", **kw)
    agent.session_id = SESSION
    tracer.watch(agent)

    def spans():
        tracer.close()
        return list(exporter.get_finished_spans())

    return agent, spans


def by_name(spans, name):
    return [s for s in spans if s.name == name]


@pytest.mark.parametrize("env, exporters", [
    ({}, []),
    ({"OTEL_SERVICE_NAME": "x", "OTEL_EXPORTER_OTLP_HEADERS": "a=b"}, []),
    ({"OTEL_TRACES_EXPORTER": "console"}, ["console"]),
    ({"OTEL_TRACES_EXPORTER": "otlp, console"}, ["otlp", "console"]),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, ["otlp"]),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, ["otlp"]),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318"}, []),
    ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "console"}, []),
    ({"OTEL_SDK_DISABLED": "TRUE", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318"}, []),
])
def test_tracing_is_on_only_when_the_otel_variables_ask(env, exporters):
    assert tracing.wanted(env) == exporters


def test_off_a_session_registers_no_hook_and_no_listener(home):
    from frontends.journal import Journal
    from frontends.runner import Session

    agent = GenericAgent(ScriptedClient([{"text": "ok"}]), home=home, cwd=".")
    session = Session(agent, home, Journal(home, agent))
    assert session.tracer is None
    assert not any(agent.hooks._callbacks.values())
    assert agent.listeners == [session._journal_event]
    session.close()


def test_the_spans_of_a_task(home):
    agent, spans = traced(home, ScriptedClient(STEPS))
    events = list(agent.run_task("go"))
    found = spans()
    assert [s.name for s in found] == [
        "chat scripted", "execute_tool update_working_checkpoint", "execute_tool file_read",
        "chat scripted", "invoke_agent GenericAgent"]
    task = by_name(found, "invoke_agent GenericAgent")[0]
    assert task.parent is None and task.kind is SpanKind.INTERNAL
    assert {s.context.trace_id for s in found} == {task.context.trace_id}
    assert all(s.parent.span_id == task.context.span_id for s in found if s is not task)
    assert dict(task.attributes) == {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "GenericAgent",
        "gen_ai.provider.name": "scripted", "gen_ai.request.model": "scripted",
        "gen_ai.conversation.id": SESSION, "gen_ai.usage.input_tokens": 420,
        "gen_ai.usage.output_tokens": 19, "gen_ai.usage.cache_read.input_tokens": 140,
        "gen_ai.usage.cache_creation.input_tokens": 50,
        "genericagent.task.result": "CURRENT_TASK_DONE", "genericagent.task.turns": 2}
    first, second = by_name(found, "chat scripted")
    assert first.kind is SpanKind.CLIENT
    assert dict(second.attributes) == {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "scripted", "gen_ai.conversation.id": SESSION,
        "gen_ai.usage.input_tokens": 300, "gen_ai.usage.output_tokens": 7,
        "gen_ai.usage.cache_read.input_tokens": 100,
        "gen_ai.usage.cache_creation.input_tokens": 50, "gen_ai.response.model": "scripted",
        "gen_ai.response.finish_reasons": ("end_turn",)}
    assert first.attributes["gen_ai.response.finish_reasons"] == ("tool_use",)
    calls = [e["id"] for e in events if e["type"] == "tool_call"]
    tools = [s for s in found if s.name.startswith("execute_tool")]
    assert [s.attributes["gen_ai.tool.call.id"] for s in tools] == calls
    assert dict(tools[0].attributes) == {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "update_working_checkpoint",
        "gen_ai.tool.type": "function", "gen_ai.tool.call.id": calls[0],
        "gen_ai.conversation.id": SESSION}
    assert tools[0].status.status_code is StatusCode.UNSET
    assert tools[1].attributes["error.type"] == "ToolError"  # the file is missing
    assert tools[1].status.status_code is StatusCode.ERROR
    assert all("gen_ai.input.messages" not in s.attributes for s in found)  # not asked for


def test_each_task_is_its_own_trace(home):
    agent, spans = traced(home, ScriptedClient([{"text": "one"}, {"text": "two"}]))
    list(agent.run_task("first"))
    list(agent.run_task("second"))
    tasks = by_name(spans(), "invoke_agent GenericAgent")
    assert len(tasks) == 2 and tasks[0].context.trace_id != tasks[1].context.trace_id


def test_a_model_that_fails_marks_its_request_and_task(home):
    agent, spans = traced(home, ScriptedClient([{"raise": "overloaded", "status": 529}]))
    end = list(agent.run_task("go"))[-1]
    assert end["result"] == "FAILED"
    chat, task = spans()
    assert chat.name == "chat scripted" and chat.attributes["error.type"] == "529"
    assert chat.status.status_code is StatusCode.ERROR
    assert "overloaded" in chat.status.description
    assert "gen_ai.usage.input_tokens" not in chat.attributes
    assert task.attributes["error.type"] == "529"
    assert task.attributes["genericagent.task.result"] == "FAILED"


def test_an_error_holding_a_secret_reaches_no_span_unredacted(home):
    from pathlib import Path

    Path("settings.env").write_text(f"A=1\nAPI_KEY={SECRET}\n")
    patch = {"path": "settings.env", "old_content": "API_KEY=hunter2-typo", "new_content": "x"}
    steps = [{"text": "<summary>p</summary>",
              "tool_calls": [{"name": "file_patch", "args": patch}]},
             {"raise": f"upstream echoed {SECRET}", "status": 500}]
    agent, spans = traced(home, ScriptedClient(steps), redactor=Redactor([SECRET]))
    assert list(agent.run_task("patch it"))[-1]["result"] == "FAILED"
    found = spans()
    tool = by_name(found, "execute_tool file_patch")[0]
    assert "old_content was not found" in tool.status.description  # the file's lines quoted
    assert "upstream echoed" in by_name(found, "chat scripted")[1].status.description
    assert "upstream echoed" in by_name(found, "invoke_agent GenericAgent")[0].status.description
    assert all(SECRET not in (s.status.description or "") for s in found)
    assert SECRET not in json.dumps([dict(s.attributes) for s in found])


def test_retries_and_switches_are_events_of_the_request(home, llm_server):
    path = write_config(home, llm_server,
                        first={"provider": "anthropic", "model": "claude-x", "max_retries": 1},
                        second={"provider": "openai", "model": "gpt-x"},
                        both={"mixin": ["first", "second"]})
    client = llmcore.make_client("both", config_path=path, home=home)
    agent, spans = traced(home, client)
    client.on_event = agent.provider_event  # as a session wires it: live, in order
    llm_server.queue(Reply(status=429, retry_after="0"), Reply(status=500),
                     Reply(text="from second", usage=(900, 300, 33)))
    agent.start()
    events = agent.put_task("go")
    while events.get(timeout=30)["type"] != "task_end":
        pass
    agent.tasks.put(None)
    chat = by_name(spans(), "chat claude-x")[0]
    assert [e.name for e in chat.events] == ["retry", "model_switch"]
    assert chat.events[0].attributes["status"] == 429
    assert chat.events[0].attributes["attempt"] == 1
    assert dict(chat.events[1].attributes)["to"] == "second"
    assert chat.attributes["gen_ai.provider.name"] == "anthropic"
    assert chat.attributes["gen_ai.response.model"] == "gpt-x"
    assert (chat.attributes["server.address"], chat.attributes["server.port"]) == (
        "127.0.0.1", llm_server.port)
    assert (chat.attributes["gen_ai.usage.input_tokens"],
            chat.attributes["gen_ai.usage.cache_read.input_tokens"],
            chat.attributes["gen_ai.usage.output_tokens"]) == (900, 300, 33)


def test_a_priced_model_puts_the_cost_on_its_spans(home):
    from llmcore.price import Price

    client = ScriptedClient(STEPS, price=Price(input=3.0, output=15.0))
    agent, spans = traced(home, client)
    end = list(agent.run_task("go"))[-1]
    found = spans()
    costs = [s.attributes["gen_ai.usage.cost"] for s in by_name(found, "chat scripted")]
    assert costs == [pytest.approx((120 * 3 + 12 * 15) / 1e6),
                     pytest.approx((300 * 3 + 7 * 15) / 1e6)]
    task = by_name(found, "invoke_agent GenericAgent")[0]
    assert task.attributes["gen_ai.usage.cost"] == pytest.approx(end["cost"])


def test_content_is_recorded_only_when_asked_and_redacted(home):
    steps = [{"text": f"<summary>s</summary>the key is {SECRET}", "tool_calls": [
        {"name": "update_working_checkpoint", "args": {"key_info": f"key {SECRET}"}}]},
        {"text": "done"}]
    agent, spans = traced(home, ScriptedClient(steps), capture=True,
                          redactor=Redactor([SECRET]))
    list(agent.run_task(f"use {SECRET} please"))
    found = spans()
    dumped = json.dumps([dict(s.attributes) for s in found])
    assert SECRET not in dumped
    first = by_name(found, "chat scripted")[0]
    system = json.loads(first.attributes["gen_ai.system_instructions"])
    assert system[0]["type"] == "text" and "memory" in system[0]["content"].lower()
    sent = json.loads(first.attributes["gen_ai.input.messages"])
    assert sent[0]["role"] == "user" and sent[0]["parts"][0]["content"].startswith("use ")
    assert "hunter2" not in sent[0]["parts"][0]["content"]
    reply = json.loads(first.attributes["gen_ai.output.messages"])[0]
    assert [p["type"] for p in reply["parts"]] == ["text", "tool_call"]
    assert reply["finish_reason"] == "tool_use"
    tool = by_name(found, "execute_tool update_working_checkpoint")[0]
    assert json.loads(tool.attributes["gen_ai.tool.call.arguments"])["key_info"].startswith("key ")
    assert "working key_info updated" in tool.attributes["gen_ai.tool.call.result"]
    second = by_name(found, "chat scripted")[1]
    results = json.loads(second.attributes["gen_ai.input.messages"])[0]["parts"]
    assert results[0]["type"] == "tool_call_response"


def test_asked_for_but_not_installed_says_so_once_and_the_run_goes_on(tmp_path, monkeypatch,
                                                                      capsys):
    for name in [m for m in sys.modules if m.split(".")[0] == "opentelemetry"]:
        monkeypatch.setitem(sys.modules, name, None)  # as if the package were not there
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    script = tmp_path / "s.yaml"
    script.write_text("- text: fine\n")
    assert main(["-m", f"scripted:{script}", "go"]) == 0
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if "tracing" in line]
    assert lines == ["ga: tracing was asked for (OTEL_TRACES_EXPORTER=console) but "
                     "OpenTelemetry is not installed: pip install \"genericagent[otel]\"; "
                     "the run goes on without traces"]
    assert captured.out == "fine\n"


def test_grpc_asked_for_without_its_exporter_names_the_package(capsys):
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317",
           "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    assert tracing.start(env) is None
    assert "pip install opentelemetry-exporter-otlp-proto-grpc" in capsys.readouterr().err


def test_an_unknown_exporter_is_named_and_left_out(capsys):
    assert tracing.start({"OTEL_TRACES_EXPORTER": "zipkin"}) is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'zipkin'" in err and "otlp, console and none" in err


def test_the_console_exporter_writes_to_stderr_and_json_stdout_stays_pure(tmp_path,
                                                                         monkeypatch, capsys):
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    script = tmp_path / "s.yaml"
    script.write_text("- text: fine\n")
    assert main(["-m", f"scripted:{script}", "--json", "go"]) == 0
    captured = capsys.readouterr()
    assert [json.loads(line)["type"] for line in captured.out.splitlines()][-1] == "task_end"
    assert '"name": "invoke_agent GenericAgent"' in captured.err
    assert '"name": "chat scripted:' in captured.err


def test_the_otlp_headers_are_secret_kept_from_children_and_masked():
    from llmcore.secrets import EnvPolicy

    headers = "Authorization=Basic cGstbGYtMTIzOnNrLWxmLTQ1Ng=="
    env = {"OTEL_EXPORTER_OTLP_HEADERS": headers, "OTEL_EXPORTER_OTLP_TRACES_HEADERS": headers,
           "OTEL_SERVICE_NAME": "agent", "PATH": "/bin"}
    assert EnvPolicy().child_env(env) == {"OTEL_SERVICE_NAME": "agent", "PATH": "/bin"}
    assert "cGstbGY" not in Redactor.from_config(None, environ=env)(f"env: {headers}")
