"""Anthropic Messages API (and compatible endpoints) through the official SDK."""

from __future__ import annotations

from typing import Any, Iterator

import anthropic
import httpx2
from anthropic.types import Message, RawMessageStreamEvent

from . import images
from .base import LLMResponse, ThinkingChunk, ToolCall, Usage
from .history import MessageMemo
from .provider import (
    Events,
    ListMemo,
    Request,
    close_stream,
    compact,
    json_body,
    json_list,
    result_text,
    sdk_options,
    tool_input_json,
)
from .retry import BadResponse, StreamFailure

STOP = {"stop_sequence": "end_turn", "model_context_window_exceeded": "max_tokens",
        "pause_turn": "end_turn"}
DELTA_FIELDS = {"thinking_delta": "thinking", "signature_delta": "signature",
                "input_json_delta": "json"}  # the block field each delta adds to
EFFORT = {"minimal": "low"}  # our reasoning_effort values → Anthropic effort levels
CACHE = {"type": "ephemeral"}
UNMARKABLE = ("thinking", "redacted_thinking")  # blocks the API takes no cache_control on
PATH = "/v1/messages"


class AnthropicMessages:
    """One streamed Messages call per ``stream``.

    The body is built here, each message's wire form once (``MessageMemo``), and sent through
    the SDK's lower-level ``post`` with the path, errors and stream types ``create`` uses.
    Cache markers sit on the stable prefix: the system prompt, the tool list, and the newest
    block that later requests will repeat unchanged (see ``cache_point``).
    """

    errors: tuple[type[BaseException], ...] = (anthropic.APIError, httpx2.TransportError,
                                               httpx2.StreamError, BadResponse, StreamFailure)

    def __init__(self, profile: Any, api_key: str | None):
        opts = sdk_options(profile, api_key, anthropic)
        if opts.get("base_url", "").rstrip("/").endswith("/v1"):
            opts["base_url"] = opts["base_url"].rstrip("/")[: -len("/v1")]
        self.client = anthropic.Anthropic(**opts)
        self._current: Any = None
        self._wire = MessageMemo(self.wire_message)
        self._tools = ListMemo(lambda tools: compact(wire_tools(tools)))

    def cancel(self) -> None:
        close_stream(self._current)

    def wire_message(self, m: dict) -> str:
        """One canonical message in its wire form (serialised), without a cache marker."""
        return _compact_message(m["role"], _blocks(m))

    def body(self, req: Request) -> bytes:
        msgs = req.messages
        at, block = cache_point(msgs) or (len(msgs), None)
        marked = [] if block is None else [_compact_message(msgs[at]["role"], _blocks(msgs[at]),
                                                            block)]  # only its marked form
        items = [*self._wire.values(msgs[:at]), *marked, *map(self._wire, msgs[at + 1:])]
        self._wire.keep_only(msgs)
        built = {"tools": self._tools(req.tools)} if req.tools else {}
        built["messages"] = json_list(items)
        return json_body(self.params(req), built)

    def params(self, req: Request) -> dict[str, Any]:
        """Everything of the body but the tools and the messages."""
        prof = req.profile
        kw: dict[str, Any] = {"model": prof.model, "max_tokens": prof.max_tokens, "stream": True}
        if req.system:
            kw["system"] = [{"type": "text", "text": req.system, "cache_control": CACHE}]
        thinking = _thinking(prof)
        if thinking:
            kw["thinking"] = thinking
        if prof.reasoning_effort:
            effort = EFFORT.get(prof.reasoning_effort, prof.reasoning_effort)
            kw["output_config"] = {"effort": effort}
        if prof.temperature is not None and prof.thinking in (None, "disabled"):
            kw["temperature"] = prof.temperature  # the body is ours: no SDK argument needed
        return kw

    def stream(self, req: Request, resp: LLMResponse) -> Iterator[str]:
        self._current = self.client.post(PATH, cast_to=Message, content=self.body(req),
                                         stream=True,
                                         stream_cls=anthropic.Stream[RawMessageStreamEvent])
        events = Events(self._current)
        state = _State(events)
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


def wire_tools(tools: list[dict]) -> list[dict]:
    """The tool list in the API's form, its cache marker on the last tool."""
    out = [{"name": t["function"]["name"], "description": t["function"].get("description", ""),
            "input_schema": t["function"].get("parameters") or {"type": "object"}}
           for t in tools]
    out[-1]["cache_control"] = CACHE
    return out


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

    def __init__(self, events: Events) -> None:
        self.events = events
        self.blocks: dict[int, dict] = {}
        self.stopped = False
        self.usage = Usage()

    def handle(self, ev: Any, resp: LLMResponse, req: Request) -> Iterator[str]:
        kind = ev.type
        if kind == "message_start":
            u = ev.message.usage
            cached = u.cache_read_input_tokens or 0
            written = u.cache_creation_input_tokens or 0
            resp.usage = Usage(input=(u.input_tokens or 0) + written + cached, cached=cached,
                               cache_write=written, output=u.output_tokens or 0)
        elif kind == "content_block_start":
            self.blocks[ev.index] = _start_block(ev.content_block, req)
        elif kind == "content_block_delta":
            yield from _delta(self._block(ev.index, ev.delta.type), ev.delta)
        elif kind == "message_delta":
            stop = ev.delta.stop_reason or "end_turn"
            resp.stop_reason = STOP.get(stop, stop)
            resp.usage.output = ev.usage.output_tokens or resp.usage.output
        elif kind == "message_stop":
            self.stopped = True

    def _block(self, index: int, delta: str) -> dict:
        """The started block a delta adds to; a delta that has none is a malformed stream."""
        block = self.blocks.get(index)
        if block is None:
            raise self.events.malformed(f"a content_block_delta for block {index}, "
                                        "which never started")
        if DELTA_FIELDS.get(delta, "type") not in block:
            raise self.events.malformed(f"a {delta} for a {block['type']} block")
        return block


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


def cache_point(messages: list[dict]) -> tuple[int, int] | None:
    """(message, wire block) for the history's cache marker: the last tool result of the
    newest user message (its text, the working memory, changes next turn), else the last
    block of the message before it that can carry one (no thinking block can): none if no
    block can. A later request repeats everything up to it, so the cache written here is
    read back then."""
    if not messages:
        return None
    i = len(messages) - 1
    blocks = _blocks(messages[i])
    results = [n for n, b in enumerate(blocks) if b["type"] == "tool_result"]
    if messages[i]["role"] == "user" and results:
        return i, results[-1]
    if i == 0:
        return None
    marks = [n for n, b in enumerate(_blocks(messages[i - 1])) if b["type"] not in UNMARKABLE]
    return (i - 1, marks[-1]) if marks else None


def _blocks(m: dict) -> list[dict]:
    return [c for b in m["content"] if (c := _block(b))]


def _compact_message(role: str, blocks: list[dict], marked: int | None = None) -> str:
    if not blocks:
        return ""
    if marked is not None:
        blocks = [*blocks[:marked], {**blocks[marked], "cache_control": CACHE},
                  *blocks[marked + 1:]]
    return compact({"role": role, "content": blocks})


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
    if kind == "image":
        return images.anthropic_block(b)
    if kind == "tool_result":
        out = {"type": "tool_result", "tool_use_id": b["tool_use_id"], "content": result_text(b)}
        if images.result_images(b):  # the image rides inside the result, after its text
            out["content"] = images.content_parts(b["content"], _text_block,
                                                  images.anthropic_block)
        if b.get("is_error"):
            out["is_error"] = True
        return out
    return None


def _text_block(text: str) -> dict:
    return {"type": "text", "text": text}
