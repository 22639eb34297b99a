"""The spans of a traced agent (SPEC §15), on the OpenTelemetry GenAI conventions: one
``invoke_agent GenericAgent`` span per task, each task its own trace; under it a
``chat {model}`` CLIENT span per model request (its retries and model switches as events)
and an ``execute_tool {name}`` span per tool call. Imported only when tracing is on
(``frontends.tracing.start``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Mapping
from urllib.parse import urlsplit

from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

from llmcore.base import add_cost
from llmcore.secrets import Redactor

SERVICE_NAME = "genericagent"
AGENT_NAME = "GenericAgent"
EXIT_FLUSH_SECONDS = 1.5  # at exit, at most this long to send what is left
PROVIDER_NAMES = {"openai-responses": "openai"}  # our provider kinds in the conventions' words
OFFICIAL_SERVERS = {"openai": "https://api.openai.com",
                    "openai-responses": "https://api.openai.com",
                    "anthropic": "https://api.anthropic.com"}
TOOL_ERROR = "tool_error"  # error.type of a tool that answered with an error result
ERROR_STATUSES = ("error", "failed", "FAILED")


@dataclass
class TaskSpans:
    """The open spans of one running task, and its usage so far."""

    task: Any
    context: Any  # the task span's context: the parent of the others
    chat: Any = None
    tools: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)
    cost: float | None = None


class Tracer:
    """Spans for the tasks of the agents it watches, sent by ``exporters`` (OpenTelemetry span
    exporters) in batches; ``close()`` sends what is left, waiting ``EXIT_FLUSH_SECONDS`` at
    most."""

    def __init__(self, exporters: list[Any], capture: bool = False) -> None:
        resource = Resource.create()
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
        self.provider = TracerProvider(resource=resource, shutdown_on_exit=False)
        for exporter in exporters:
            self.provider.add_span_processor(BatchSpanProcessor(exporter))
        self.tracer = self.provider.get_tracer(SERVICE_NAME)
        self.capture = capture
        self.open: dict[Any, TaskSpans] = {}  # handler -> its task's spans
        self.closed = False

    def watch(self, agent: Any) -> None:
        """Trace ``agent``'s tasks: its hooks, and its retry and model-switch events."""
        redact = getattr(agent, "redactor", None) or Redactor()
        hooks = {"agent_before": self.task_started, "llm_before": self.chat_started,
                 "llm_after": self.chat_ended, "tool_before": self.tool_started,
                 "tool_after": self.tool_ended, "agent_after": self.task_ended}
        for event, fn in hooks.items():
            agent.hooks.on(event, lambda ctx, fn=fn: fn(ctx, redact))
        agent.listeners.append(lambda event: self.provider_event(agent, event))

    def close(self) -> None:
        """Send the spans left; an endpoint that does not answer delays this a little only."""
        if self.closed:
            return
        self.closed = True
        # the SDK's shutdown may wait 30 s for an export: it runs aside, and exit goes on
        flush = threading.Thread(target=self.provider.shutdown, name="ga-trace-flush",
                                 daemon=True)
        flush.start()
        flush.join(EXIT_FLUSH_SECONDS)

    # ---- hook callbacks -------------------------------------------------------------
    def task_started(self, ctx: Mapping[str, Any], redact: Any) -> None:
        handler, client = ctx["handler"], ctx["client"]
        attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": AGENT_NAME,
                 **_model_attrs(client), **_conversation(handler)}
        span = self.tracer.start_span(f"invoke_agent {AGENT_NAME}", context=Context(),
                                      attributes=attrs)  # a new trace for every task
        self.open[handler] = TaskSpans(span, set_span_in_context(span))

    def chat_started(self, ctx: Mapping[str, Any], redact: Any) -> None:
        spans = self.open.get(ctx["handler"])
        if spans is None:
            return
        client = ctx["client"]
        attrs = {"gen_ai.operation.name": "chat", **_model_attrs(client),
                 **_server_attrs(client), **_conversation(ctx["handler"])}
        if self.capture:
            attrs.update(_input_content(ctx["messages"], redact))
        model = attrs.get("gen_ai.request.model", "")
        spans.chat = self.tracer.start_span(f"chat {model}".strip(), context=spans.context,
                                            kind=SpanKind.CLIENT, attributes=attrs)

    def chat_ended(self, ctx: Mapping[str, Any], redact: Any) -> None:
        spans = self.open.get(ctx["handler"])
        if spans is None or spans.chat is None:
            return
        span, spans.chat = spans.chat, None
        response = ctx.get("response")
        if response is None:
            _failed(span, redact, ctx.get("error"))
            span.end()
            return
        usage = _usage_attrs(getattr(response, "usage", None))
        for key, value in usage.items():
            spans.usage[key] = spans.usage.get(key, 0) + value
        cost = getattr(getattr(response, "usage", None), "cost", None)
        if cost is not None:
            spans.cost = add_cost(spans.cost, cost)
            usage["gen_ai.usage.cost"] = cost
        span.set_attributes({**usage, "gen_ai.response.model": _model(ctx["client"]),
                             "gen_ai.response.finish_reasons": [response.stop_reason or ""]})
        if self.capture:
            span.set_attribute("gen_ai.output.messages", redact.dumps([_output(response)]))
        span.end()

    def tool_started(self, ctx: Mapping[str, Any], redact: Any) -> None:
        spans = self.open.get(ctx.get("handler"))
        if spans is None:
            return
        name = ctx["tool_name"]
        attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                 "gen_ai.tool.type": "function", "gen_ai.tool.call.id": ctx["call_id"],
                 **_conversation(ctx["handler"])}
        if self.capture:
            args = {k: v for k, v in ctx["args"].items() if not k.startswith("_")}
            attrs["gen_ai.tool.call.arguments"] = redact.dumps(args)
        spans.tools[ctx["call_id"]] = self.tracer.start_span(
            f"execute_tool {name}", context=spans.context, attributes=attrs)

    def tool_ended(self, ctx: Mapping[str, Any], redact: Any) -> None:
        spans = self.open.get(ctx.get("handler"))
        span = spans.tools.pop(ctx["call_id"], None) if spans is not None else None
        if span is None:
            return
        data = getattr(ctx.get("outcome"), "data", None)
        if ctx.get("error") is not None:
            _failed(span, redact, ctx["error"])
        elif isinstance(data, dict) and data.get("status") in ERROR_STATUSES:
            _failed(span, redact, None, TOOL_ERROR,
                    str(data.get("msg") or data.get("error") or ""))
        if self.capture:
            span.set_attribute("gen_ai.tool.call.result", redact.dumps(data))
        span.end()

    def task_ended(self, ctx: Mapping[str, Any], redact: Any) -> None:
        spans = self.open.pop(ctx["handler"], None)
        if spans is None:
            return
        for span in [spans.chat, *spans.tools.values()]:  # left open by a failure
            if span is not None:
                _failed(span, redact, ctx.get("error"))
                span.end()
        attrs: dict[str, Any] = dict(spans.usage)
        if spans.cost is not None:
            attrs["gen_ai.usage.cost"] = spans.cost
        result = _result(ctx.get("exit_reason") or {})
        attrs.update({"genericagent.task.result": result if not ctx.get("error") else "FAILED",
                      "genericagent.task.turns": int(ctx.get("turn") or 0)})
        spans.task.set_attributes(attrs)
        if ctx.get("error") is not None:
            _failed(spans.task, redact, ctx["error"])
        elif result == "FAILED":
            _failed(spans.task, redact, None, "FAILED", _result_error(ctx["exit_reason"]))
        spans.task.end()

    def provider_event(self, agent: Any, event: dict) -> None:
        """A retry or a model switch: an event of the request it happened in."""
        kind = event.get("type")
        if kind not in ("retry", "model_switch"):
            return
        spans = self.open.get(getattr(agent, "handler", None))
        if spans is None:
            return
        attrs = {k: v for k, v in event.items()
                 if k != "type" and isinstance(v, (str, int, float))}
        (spans.chat or spans.task).add_event(kind, attrs)


# ---- attributes --------------------------------------------------------------------------
def _model(client: Any) -> str:
    return str(getattr(client, "model", "") or getattr(client, "name", ""))


def _kind(client: Any) -> str:
    profile = getattr(client, "profile", None)
    return str(getattr(profile, "provider", "") or getattr(client, "provider", "scripted"))


def _model_attrs(client: Any) -> dict[str, Any]:
    kind = _kind(client)
    return {"gen_ai.provider.name": PROVIDER_NAMES.get(kind, kind),
            "gen_ai.request.model": _model(client)}


def _server_attrs(client: Any) -> dict[str, Any]:
    """``server.address`` and ``server.port`` of the endpoint the request goes to."""
    profile = getattr(client, "profile", None)
    url = getattr(profile, "base_url", None) or OFFICIAL_SERVERS.get(_kind(client))
    if not url:
        return {}
    parts = urlsplit(url)
    if not parts.hostname:
        return {}
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return {"server.address": parts.hostname, "server.port": port}


def _conversation(handler: Any) -> dict[str, str]:
    session = getattr(handler, "session_id", None)
    return {"gen_ai.conversation.id": session} if session else {}


def _usage_attrs(usage: Any) -> dict[str, int]:
    if usage is None:
        return {}
    return {"gen_ai.usage.input_tokens": usage.input,
            "gen_ai.usage.output_tokens": usage.output,
            "gen_ai.usage.cache_read.input_tokens": usage.cached,
            "gen_ai.usage.cache_creation.input_tokens": getattr(usage, "cache_write", 0)}


def _failed(span: Any, redact: Any, error: BaseException | None, kind: str | None = None,
            message: str = "") -> None:
    """Mark ``span`` failed: ``error.type`` and the status, its message through the redactor
    (an error may quote a file, a command or a reply that holds a key)."""
    if error is not None:  # a provider's status (429, timeout) or the exception's type
        status = getattr(error, "status", None)
        kind = str(status) if status else type(error).__qualname__
        message = str(error)
    span.set_attribute("error.type", kind or "_OTHER")
    span.set_status(Status(StatusCode.ERROR, redact(message) or None))


def _result(reason: Mapping[str, Any]) -> str:
    data = reason.get("data")
    if isinstance(data, dict) and data.get("status") == "FAILED":
        return "FAILED"
    return str(reason.get("result") or "MAX_TURNS_EXCEEDED")


def _result_error(reason: Mapping[str, Any]) -> str:
    data = reason.get("data")
    return str(data.get("error") or "") if isinstance(data, dict) else ""


def _input_content(messages: list[dict], redact: Any) -> dict[str, str]:
    """The messages of this request as the conventions write them (the provider keeps the
    rest of the conversation): ``gen_ai.system_instructions`` and ``gen_ai.input.messages``."""
    out: dict[str, str] = {}
    turns = []
    for m in messages:
        if m["role"] == "system":
            out["gen_ai.system_instructions"] = redact.dumps(
                [{"type": "text", "content": m["content"]}])
            continue
        parts = [{"type": "tool_call_response", "id": r["tool_use_id"],
                  "response": r["content"]} for r in m.get("tool_results") or []]
        content = m.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        parts += [{"type": "text", "content": b["text"]} for b in blocks
                  if b.get("type") == "text" and b.get("text")]
        turns.append({"role": m["role"], "parts": parts})
    out["gen_ai.input.messages"] = redact.dumps(turns)
    return out


def _output(response: Any) -> dict[str, Any]:
    parts: list[dict] = []
    if response.thinking:
        parts.append({"type": "reasoning", "content": response.thinking})
    if response.content:
        parts.append({"type": "text", "content": response.content})
    parts += [{"type": "tool_call", "id": tc.id, "name": tc.function.name,
               "arguments": tc.function.arguments} for tc in response.tool_calls]
    return {"role": "assistant", "parts": parts, "finish_reason": response.stop_reason}
