"""The real ``ga`` sends its traces over OTLP/HTTP (SPEC §15): a receiver on 127.0.0.1 decodes
the protobuf and finds the spans of the task with the usage the model server reported; an
endpoint that does not answer costs one line on stderr, and the run goes on."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from llm_server import Reply, llm_server, write_config
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

ROOT = Path(__file__).resolve().parent.parent
RUN_TIMEOUT = 60
__all__ = ["llm_server"]


class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP trace receiver: ``spans`` holds every span sent to ``/v1/traces`` with
    its resource's attributes, decoded."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), ReceiverHandler)
        self.spans: list[tuple[dict, Span]] = []
        self.content_types: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class ReceiverHandler(BaseHTTPRequestHandler):
    server: Receiver

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.content_types.append(self.headers["Content-Type"])
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope in resource_spans.scope_spans:
                self.server.spans.extend((resource, span) for span in scope.spans)
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


@pytest.fixture(scope="session")
def receiver():
    server = Receiver()
    threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def value(v) -> object:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(item) for item in v.array_value.values]
    return getattr(v, kind)


def attributes(pairs) -> dict:
    return {kv.key: value(kv.value) for kv in pairs}


def ga(home: Path, *args: str, python: tuple[str, ...] = (), **env: str
       ) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environ.update(GA_HOME=str(home), GA_LANG="en", **env)
    return subprocess.run([sys.executable, *python, str(ROOT / "ga.py"), *args], env=environ,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT)


def imported(stderr: str) -> list[str]:
    """The modules ``python -X importtime`` says were imported."""
    return [line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines()
            if line.startswith("import time:")]


def test_without_otel_variables_ga_imports_nothing_of_opentelemetry(home, tmp_path):
    script = tmp_path / "s.yaml"
    script.write_text("- text: fine\n")
    helped = ga(home, "--help", python=("-X", "importtime"))
    run = ga(home, "-m", f"scripted:{script}", "go", python=("-X", "importtime"))
    traced = ga(home, "-m", f"scripted:{script}", "go", python=("-X", "importtime"),
                OTEL_TRACES_EXPORTER="console")
    assert helped.returncode == run.returncode == traced.returncode == 0
    assert "frontends.cli" in imported(helped.stderr)
    assert "frontends.tracing" in imported(run.stderr)  # the variables were looked at
    for done in (helped, run):
        assert not [m for m in imported(done.stderr) if m.startswith("opentelemetry")]
    assert "opentelemetry.sdk.trace" in imported(traced.stderr)


def test_ga_sends_the_spans_of_a_task_over_otlp_http(home, llm_server, receiver):
    receiver.spans.clear()
    write_config(home, llm_server, p={"provider": "openai", "model": "test-model"})
    args = json.dumps({"path": "a.txt", "content": "x"})
    llm_server.queue(Reply(text="<summary>write</summary>", tool_calls=[("file_write", args)],
                           usage=(500, 100, 20)),
                     Reply(text="written", usage=(700, 400, 9)))
    done = ga(home, "-m", "p", "--json", "write a.txt", OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url)
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]  # stdout: events only
    session = events[-1]["session_id"]
    call_id = next(e["id"] for e in events if e["type"] == "tool_call")
    assert "tracing" not in done.stderr
    assert set(receiver.content_types) == {"application/x-protobuf"}
    spans = {span.name: span for _, span in receiver.spans if span.name != "chat test-model"}
    chats = [span for _, span in receiver.spans if span.name == "chat test-model"]
    assert sorted(spans) == ["execute_tool file_write", "invoke_agent GenericAgent"]
    assert len(chats) == 2
    task, tool = spans["invoke_agent GenericAgent"], spans["execute_tool file_write"]
    assert receiver.spans[0][0]["service.name"] == "genericagent"
    assert task.parent_span_id == b"" and task.kind == Span.SPAN_KIND_INTERNAL
    for span in [*chats, tool]:
        assert span.trace_id == task.trace_id and span.parent_span_id == task.span_id
    assert [c.kind for c in chats] == [Span.SPAN_KIND_CLIENT] * 2
    first, second = (attributes(c.attributes) for c in chats)
    assert first == {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "test-model", "server.address": "127.0.0.1",
        "server.port": llm_server.port, "gen_ai.conversation.id": session,
        "gen_ai.usage.input_tokens": 500, "gen_ai.usage.output_tokens": 20,
        "gen_ai.usage.cache_read.input_tokens": 100,
        "gen_ai.usage.cache_creation.input_tokens": 0,
        "gen_ai.response.model": "test-model", "gen_ai.response.finish_reasons": ["tool_use"]}
    assert (second["gen_ai.usage.input_tokens"], second["gen_ai.usage.output_tokens"],
            second["gen_ai.usage.cache_read.input_tokens"]) == (700, 9, 400)
    assert second["gen_ai.response.finish_reasons"] == ["end_turn"]
    assert attributes(tool.attributes) == {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "file_write",
        "gen_ai.tool.type": "function", "gen_ai.tool.call.id": call_id,
        "gen_ai.conversation.id": session}
    assert attributes(task.attributes)["gen_ai.usage.input_tokens"] == 1200
    assert attributes(task.attributes)["gen_ai.conversation.id"] == session


def test_an_endpoint_that_does_not_answer_costs_one_line_and_the_run_goes_on(home, tmp_path):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # connections are taken, never answered
    endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
    script = tmp_path / "s.yaml"
    script.write_text("- text: the answer\n")
    try:
        done = ga(home, "-m", f"scripted:{script}", "go", OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    finally:
        silent.close()
    assert done.returncode == 0 and done.stdout == "the answer\n"
    lines = [line for line in done.stderr.splitlines() if "tracing" in line]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"ga: tracing: spans could not be sent to {endpoint}/v1/traces (")
    assert lines[0].endswith("check that a collector listens there (OTEL_EXPORTER_OTLP_ENDPOINT)")


def test_the_tasks_of_a_batch_worker_share_one_tracer_sent_when_it_exits(home, tmp_path,
                                                                         llm_server, receiver):
    receiver.spans.clear()
    receiver.content_types.clear()
    cfg = write_config(home, llm_server, p={"provider": "openai", "model": "test-model"})
    llm_server.queue(*[Reply(text=f"answer {n}") for n in range(3)])
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"task": f"task {n}"}) + "\n" for n in range(3)))
    done = ga(home, "batch", str(tasks), "--config", cfg, "-m", "p", "--workers", "1",
              OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
              OTEL_BSP_SCHEDULE_DELAY="600000")  # nothing sent on schedule: only at the end
    assert done.returncode == 0, done.stderr
    tasks = [span for _, span in receiver.spans if span.name == "invoke_agent GenericAgent"]
    assert len({span.trace_id for span in tasks}) == 3
    # one export, when the worker exited (a tracer per task would shut down after each)
    assert len(receiver.content_types) == 1
