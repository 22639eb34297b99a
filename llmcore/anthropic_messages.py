"""Anthropic Messages API (and compatible endpoints) through the official SDK."""

from __future__ import annotations

from typing import Any, Iterator

import anthropic
import httpx2

from .base import LLMResponse, ThinkingChunk, ToolCall, Usage
from .provider import Events, Request, close_stream, result_text, sdk_options, tool_input_json
from .retry import BadResponse, StreamFailure

STOP = {"stop_sequence": "end_turn", "model_context_window_exceeded": "max_tokens",
        "pause_turn": "end_turn"}
EFFORT = {"minimal": "low"}  # our reasoning_effort values → Anthropic effort levels
CACHE = {"type": "ephemeral"}
CACHED_USER_MESSAGES = 2


class AnthropicMessages:
    """One streamed Messages call per ``stream``."""

    errors: tuple[type[BaseException], ...] = (anthropic.APIError, httpx2.TransportError,
                                               httpx2.StreamError, BadResponse, StreamFailure)

    def __init__(self, profile: Any, api_key: str | None):
        opts = sdk_options(profile, api_key, anthropic)
        if opts.get("base_url", "").rstrip("/").endswith("/v1"):
            opts["base_url"] = opts["base_url"].rstrip("/")[: -len("/v1")]
        self.client = anthropic.Anthropic(**opts)
        self._current: Any = None

    def cancel(self) -> None:
        close_stream(self._current)

    def params(self, req: Request) -> dict[str, Any]:
        prof = req.profile
        kw: dict[str, Any] = {"model": prof.model, "max_tokens": prof.max_tokens,
                              "messages": to_messages(req.messages), "stream": True}
        if req.system:
            kw["system"] = [{"type": "text", "text": req.system, "cache_control": CACHE}]
        if req.tools:
            kw["tools"] = [{"name": t["function"]["name"],
                            "description": t["function"].get("description", ""),
                            "input_schema": t["function"].get("parameters") or {"type": "object"}}
                           for t in req.tools]
        thinking = _thinking(prof)
        if thinking:
            kw["thinking"] = thinking
        if prof.reasoning_effort:
            effort = EFFORT.get(prof.reasoning_effort, prof.reasoning_effort)
            kw["output_config"] = {"effort": effort}
        if prof.temperature is not None and prof.thinking in (None, "disabled"):
            kw["temperature"] = prof.temperature
        return kw

    def stream(self, req: Request, resp: LLMResponse) -> Iterator[str]:
        self._current = self.client.messages.create(**self.params(req))
        events = Events(self._current)
        state = _State()
        try:
            for event in events:
                yield from state.handle(event, resp, req)
        finally:
            self._current = None
        if not state.stopped:
            raise events.dropped("message_stop")
        blocks = [{k: "".join(v) if isinstance(v, list) else v for k, v in b.items()}
                  for b in state.blocks.values()]
        resp.thinking_blocks = [b for b in blocks if b["type"] in ("thinking", "redacted_thinking")]
        resp.tool_calls = [ToolCall.make(b["id"], b["name"], b["json"] or "{}")
                           for b in blocks if b["type"] == "tool_use"]


def _thinking(prof: Any) -> dict | None:
    if prof.thinking == "adaptive":
        return {"type": "adaptive"}
    if prof.thinking == "enabled":
        return {"type": "enabled", "budget_tokens": prof.thinking_budget}
    if prof.thinking == "disabled":
        return {"type": "disabled"}
    return None


class _State:
    """Assembles content blocks from raw stream events."""

    def __init__(self) -> None:
        self.blocks: dict[int, dict] = {}
        self.stopped = False
        self.usage = Usage()

    def handle(self, ev: Any, resp: LLMResponse, req: Request) -> Iterator[str]:
        kind = ev.type
        if kind == "message_start":
            u = ev.message.usage
            cached = u.cache_read_input_tokens or 0
            fresh = (u.input_tokens or 0) + (u.cache_creation_input_tokens or 0)
            resp.usage = Usage(input=fresh + cached, cached=cached, output=u.output_tokens or 0)
        elif kind == "content_block_start":
            self.blocks[ev.index] = _start_block(ev.content_block, req)
        elif kind == "content_block_delta":
            yield from _delta(self.blocks[ev.index], ev.delta)
        elif kind == "message_delta":
            stop = ev.delta.stop_reason or "end_turn"
            resp.stop_reason = STOP.get(stop, stop)
            resp.usage.output = ev.usage.output_tokens or resp.usage.output
        elif kind == "message_stop":
            self.stopped = True


def _start_block(block: Any, req: Request) -> dict:
    if block.type == "tool_use":
        req.tool_started = True
        return {"type": "tool_use", "id": block.id, "name": block.name, "json": []}
    if block.type == "thinking":  # pieces are joined once, when the stream ends
        return {"type": "thinking", "thinking": [], "signature": []}
    if block.type == "redacted_thinking":
        return {"type": "redacted_thinking", "data": block.data}
    return {"type": block.type}


def _delta(block: dict, delta: Any) -> Iterator[str]:
    if delta.type == "text_delta":
        yield delta.text
    elif delta.type == "thinking_delta":
        block["thinking"].append(delta.thinking)
        yield ThinkingChunk(delta.thinking)
    elif delta.type == "signature_delta":
        block["signature"].append(delta.signature)
    elif delta.type == "input_json_delta":
        block["json"].append(delta.partial_json)


def to_messages(messages: list[dict]) -> list[dict]:
    """Canonical history → Messages API, cache markers on the last two user messages."""
    out = [{"role": m["role"], "content": [c for b in m["content"] if (c := _block(b))]}
           for m in messages]
    out = [m for m in out if m["content"]]
    users = [m for m in out if m["role"] == "user"][-CACHED_USER_MESSAGES:]
    for m in users:
        m["content"][-1] = {**m["content"][-1], "cache_control": CACHE}
    return out


def _block(b: dict) -> dict | None:
    kind = b["type"]
    if kind == "text":
        return {"type": "text", "text": b["text"]} if b["text"] else None
    if kind == "thinking":
        if not b.get("signature"):
            return None  # thinking from another provider cannot be verified: leave it out
        return {"type": "thinking", "thinking": b["thinking"], "signature": b["signature"]}
    if kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": b["data"]}
    if kind == "tool_use":
        data = b.get("input")
        if not isinstance(data, dict):
            data = {"_raw": tool_input_json(b)}
        return {"type": "tool_use", "id": b["id"], "name": b["name"], "input": data}
    if kind == "tool_result":
        out = {"type": "tool_result", "tool_use_id": b["tool_use_id"], "content": result_text(b)}
        if b.get("is_error"):
            out["is_error"] = True
        return out
    return None
