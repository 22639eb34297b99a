"""OpenAI Responses API through the official SDK."""

from __future__ import annotations

from typing import Any, Iterator

import openai
from openai.types.responses import Response, ResponseStreamEvent

from . import images
from .base import LLMResponse, ThinkingChunk, ToolCall, Usage
from .openai_chat import OpenAIChat, adjust_temperature
from .provider import (
    Events,
    Request,
    compact,
    is_reasoning_model,
    joined_text,
    result_text,
    tool_input_json,
)
from .retry import StreamFailure

INCOMPLETE = {"max_output_tokens": "max_tokens", "content_filter": "refusal"}
THINKING_EVENTS = ("response.reasoning_summary_text.delta", "response.reasoning_text.delta")


class OpenAIResponses(OpenAIChat):
    """One streamed Responses call per ``stream`` (stateless: full input each time).
    The SDK client, errors, cancelling and body building are those of Chat Completions."""

    path = "/responses"
    items_key = "input"

    def wire_message(self, m: dict) -> str:
        return ",".join(compact(item) for item in input_items(m))

    def wire_tools(self, tools: list[dict]) -> list[dict]:
        return [{"type": "function", "name": t["function"]["name"],
                 "description": t["function"].get("description", ""),
                 "parameters": t["function"].get("parameters") or {"type": "object"}}
                for t in tools]

    def system_items(self, req: Request) -> list[str]:
        return []  # the system prompt is the ``instructions`` parameter

    def params(self, req: Request) -> dict[str, Any]:
        """Everything of the body but the tools and the input items."""
        prof = req.profile
        kw: dict[str, Any] = {"model": prof.model, "stream": True, "store": False,
                              "max_output_tokens": prof.max_tokens}
        if req.system:
            kw["instructions"] = req.system
        if prof.reasoning_effort or is_reasoning_model(prof.model):
            kw["reasoning"] = {"summary": "auto"}
            if prof.reasoning_effort:
                kw["reasoning"]["effort"] = prof.reasoning_effort
        temperature = adjust_temperature(prof.model, prof.temperature)
        if temperature is not None:
            kw["temperature"] = temperature
        return kw

    def stream(self, req: Request, resp: LLMResponse) -> Iterator[str]:
        self._current = self.post(req, Response, openai.Stream[ResponseStreamEvent])
        events = Events(self._current)
        calls: dict[str, dict[str, Any]] = {}
        done = False
        try:
            for ev in events:
                yield from _event(ev, resp, calls, req)
                done = done or ev.type in ("response.completed", "response.incomplete")
        finally:
            self._current = None
        if not done:
            raise events.dropped("response.completed")
        resp.tool_calls = [ToolCall.make(c["call_id"], c["name"], "".join(c["args"]) or "{}")
                           for c in calls.values()]
        if resp.tool_calls and resp.stop_reason == "end_turn":
            resp.stop_reason = "tool_use"


def _event(ev: Any, resp: LLMResponse, calls: dict[str, dict[str, Any]],
           req: Request) -> Iterator[str]:
    kind = ev.type
    if kind == "response.output_text.delta":
        yield ev.delta
    elif kind in THINKING_EVENTS:
        yield ThinkingChunk(ev.delta)
    elif kind in ("response.output_item.added", "response.output_item.done"):
        item = ev.item
        if item.type == "function_call":
            req.tool_started = True
            slot = calls.setdefault(item.id or item.call_id, {"args": []})
            slot.update(call_id=item.call_id, name=item.name)
            if item.arguments:
                slot["args"] = [item.arguments]
    elif kind == "response.function_call_arguments.delta":
        calls.setdefault(ev.item_id, {"call_id": ev.item_id, "name": "", "args": []})
        calls[ev.item_id]["args"].append(ev.delta)
    elif kind in ("response.completed", "response.incomplete"):
        _finish(ev.response, resp)
    elif kind == "response.failed":
        err = ev.response.error
        raise StreamFailure(getattr(err, "code", None), getattr(err, "message", "response failed"))
    elif kind == "error":
        raise StreamFailure(ev.code, ev.message)


def _finish(response: Any, resp: LLMResponse) -> None:
    if response.usage:
        u = response.usage
        details = getattr(u, "input_tokens_details", None)
        resp.usage = Usage(input=u.input_tokens or 0, output=u.output_tokens or 0,
                           cached=getattr(details, "cached_tokens", 0) or 0)
    if response.status == "incomplete":
        reason = getattr(response.incomplete_details, "reason", None)
        resp.stop_reason = INCOMPLETE.get(reason or "", "incomplete")


def input_items(m: dict) -> list[dict]:
    """One canonical message → Responses input items."""
    if m["role"] == "user":
        out: list[dict] = [{"type": "function_call_output", "call_id": b["tool_use_id"],
                            "output": _output(b)}
                           for b in m["content"] if b["type"] == "tool_result"]
        if any(map(images.is_image, m["content"])):
            parts = images.content_parts(m["content"], _text_part, images.responses_part)
            out.append({"role": "user", "content": parts})
            return out
        text = joined_text(m["content"])
        if text:
            out.append({"role": "user", "content": text})
        return out
    text = joined_text(m["content"])
    out = [{"role": "assistant", "content": text}] if text else []
    out.extend({"type": "function_call", "call_id": b["id"], "name": b["name"],
                "arguments": tool_input_json(b)}
               for b in m["content"] if b["type"] == "tool_use")
    return out


def _output(b: dict) -> str | list[dict]:
    """A function call's output: its text, or text and image parts (file_read of an image)."""
    if not images.result_images(b):
        return result_text(b)
    return images.content_parts(b["content"], _text_part, images.responses_part)


def _text_part(text: str) -> dict:
    return {"type": "input_text", "text": text}
