"""OpenAI Chat Completions (and every compatible endpoint) through the official SDK."""

from __future__ import annotations

import re
import uuid
from typing import Any, Iterator

import httpx2
import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from . import images
from .base import LLMResponse, ThinkingChunk, ToolCall, Usage
from .history import MessageMemo
from .provider import (
    Events,
    ListMemo,
    Request,
    close_stream,
    compact,
    is_reasoning_model,
    joined_text,
    json_body,
    json_list,
    result_text,
    sdk_options,
    tool_input_json,
)
from .retry import BadResponse, StreamFailure

FINISH = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
          "function_call": "tool_use", "content_filter": "refusal"}
# vendor temperature rules: (model pattern, rule) — "drop": only the default is accepted,
# "one": must be exactly 1, "unit": must lie in (0, 1]
TEMPERATURE_RULES = (
    (re.compile(r"^(o\d|gpt-5)"), "drop"),
    (re.compile(r"kimi-k2.*(thinking|\.5)|kimi-k2\.5"), "one"),
    (re.compile(r"glm|minimax|abab"), "unit"),
)
MIN_UNIT_TEMPERATURE = 0.01
# what the SDK's typed create() sends with every call besides the body
REQUEST_OPTIONS: dict[str, Any] = {"security": {"bearer_auth": True}}
TOOL_CHOICE_MODES = ("auto", "required", "none")  # any other tool_choice names a tool


def adjust_temperature(model: str, temperature: float | None) -> float | None:
    """The temperature a vendor accepts for ``model`` (None: leave it out)."""
    if temperature is None:
        return None
    name = model.rsplit("/", 1)[-1].lower()
    for pattern, rule in TEMPERATURE_RULES:
        if not pattern.search(name):
            continue
        if rule == "drop":
            return None
        if rule == "one":
            return 1.0
        return min(max(temperature, MIN_UNIT_TEMPERATURE), 1.0)
    return temperature


def tool_choice(value: str) -> str | dict[str, Any]:
    """The ``tool_choice`` field for a profile's setting: a mode, or one named tool."""
    if value in TOOL_CHOICE_MODES:
        return value
    return {"type": "function", "function": {"name": value}}


class OpenAIChat:
    """One streamed Chat Completions call per ``stream``.

    The body is built here, each message's wire form once (``MessageMemo``), and sent through
    the SDK's lower-level ``post`` with the path, auth, errors and stream types ``create``
    uses: ``create`` would re-walk the whole history through its param transform every call.
    """

    errors: tuple[type[BaseException], ...] = (openai.APIError, httpx2.TransportError,
                                               httpx2.StreamError, BadResponse, StreamFailure)
    path = "/chat/completions"
    items_key = "messages"

    def __init__(self, profile: Any, api_key: str | None):
        self.client = openai.OpenAI(**sdk_options(profile, api_key, openai))
        self._current: Any = None
        self._send_reasoning = bool(profile.base_url)  # DeepSeek & co. want it back
        self._wire = MessageMemo(self.wire_message)
        self._tools = ListMemo(lambda tools: compact(self.wire_tools(tools)))

    def cancel(self) -> None:
        close_stream(self._current)

    def wire_message(self, m: dict) -> str:
        """One canonical message as serialised wire items (comma-joined)."""
        return ",".join(compact(w) for w in wire_messages(m, self._send_reasoning))

    def wire_tools(self, tools: list[dict]) -> list[dict]:
        """The tool list in the API's form (Chat Completions takes ours as it is)."""
        return tools

    def system_items(self, req: Request) -> list[str]:
        return [compact({"role": "system", "content": req.system})] if req.system else []

    def body(self, req: Request) -> bytes:
        items = self.system_items(req) + self._wire.values(req.messages)
        self._wire.keep_only(req.messages)
        built = {"tools": self._tools(req.tools)} if req.tools else {}
        built[self.items_key] = json_list(items)
        return json_body(self.params(req), built)

    def post(self, req: Request, cast_to: type, stream_cls: type) -> Any:
        return self.client.post(self.path, cast_to=cast_to, content=self.body(req),
                                stream=True, stream_cls=stream_cls, options=REQUEST_OPTIONS)

    def params(self, req: Request) -> dict[str, Any]:
        """Everything of the body but the tools and the messages."""
        prof = req.profile
        kw: dict[str, Any] = {"model": prof.model, "stream": True,
                              "stream_options": {"include_usage": True}}
        if req.tools and prof.tool_choice:
            kw["tool_choice"] = tool_choice(prof.tool_choice)
        reasoning = is_reasoning_model(prof.model)
        tokens_key = "max_completion_tokens" if reasoning or not prof.base_url else "max_tokens"
        kw[tokens_key] = prof.max_tokens
        temperature = adjust_temperature(prof.model, prof.temperature)
        if temperature is not None:
            kw["temperature"] = temperature
        if prof.reasoning_effort:
            kw["reasoning_effort"] = prof.reasoning_effort
        if prof.extra_body:  # server-specific fields (e.g. a llama.cpp grammar) join the body
            kw.update(prof.extra_body)
        return kw

    def stream(self, req: Request, resp: LLMResponse) -> Iterator[str]:
        self._current = self.post(req, ChatCompletion, openai.Stream[ChatCompletionChunk])
        events = Events(self._current)
        calls: dict[int, dict[str, Any]] = {}
        finished = False
        try:
            for chunk in events:
                if chunk.usage:
                    resp.usage = _usage(chunk.usage)
                for choice in chunk.choices:
                    yield from _delta(choice.delta, calls, req)
                    if choice.finish_reason:
                        finished = True
                        resp.stop_reason = FINISH.get(choice.finish_reason, choice.finish_reason)
        finally:
            self._current = None
        if not finished:
            raise events.dropped("a finish_reason")
        resp.tool_calls = [ToolCall.make(c["id"] or f"call_{uuid.uuid4().hex[:12]}",
                                         c["name"], "".join(c["args"]))
                           for _, c in sorted(calls.items(), key=lambda kv: kv[0] or 0)]
        if resp.tool_calls and resp.stop_reason != "max_tokens":  # a cut call stays "cut"
            resp.stop_reason = "tool_use"


def _delta(delta: Any, calls: dict[int, dict[str, Any]], req: Request) -> Iterator[str]:
    reasoning = getattr(delta, "reasoning_content", None) or getattr(delta, "reasoning", None)
    if isinstance(reasoning, str) and reasoning:
        yield ThinkingChunk(reasoning)
    if delta.content:
        yield delta.content
    for tc in delta.tool_calls or []:
        req.tool_started = True
        slot = calls.setdefault(tc.index, {"id": "", "name": "", "args": []})
        if tc.id:
            slot["id"] = tc.id
        if tc.function and tc.function.name:
            slot["name"] = add_name(slot["name"], tc.function.name)
        if tc.function and tc.function.arguments:
            slot["args"].append(tc.function.arguments)


def add_name(held: str, piece: str) -> str:
    """A streamed tool name with its next piece. Some servers (llama.cpp) send the whole name
    in every chunk: a piece that repeats the name held (or extends it from its start) is
    the name again, not more of it."""
    if piece.startswith(held):
        return piece
    return held + piece


def _usage(u: Any) -> Usage:
    details = getattr(u, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", 0) or 0
    return Usage(input=u.prompt_tokens or 0, cached=cached, output=u.completion_tokens or 0)


def wire_messages(m: dict, send_reasoning: bool) -> list[dict[str, Any]]:
    """One canonical message → Chat Completions messages (tool results are their own)."""
    if m["role"] == "assistant":
        return [_assistant(m["content"], send_reasoning)]
    out: list[dict[str, Any]] = [{"role": "tool", "tool_call_id": b["tool_use_id"],
                                  "content": result_text(b)}
                                 for b in m["content"] if b["type"] == "tool_result"]
    if images.has_images(m):
        # a tool message takes no image: the results' images open the next user message
        parts = images.content_parts(m["content"], _text_part, images.chat_part, results=True)
        out.append({"role": "user", "content": parts})
        return out
    text = joined_text(m["content"])
    if text:
        out.append({"role": "user", "content": text})
    return out


def _text_part(text: str) -> dict:
    return {"type": "text", "text": text}


def _assistant(blocks: list[dict], send_reasoning: bool) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": joined_text(blocks)}
    calls = [{"id": b["id"], "type": "function",
              "function": {"name": b["name"], "arguments": tool_input_json(b)}}
             for b in blocks if b["type"] == "tool_use"]
    if calls:
        msg["tool_calls"] = calls
    thinking = "".join(b.get("thinking", "") for b in blocks if b["type"] == "thinking")
    if thinking and send_reasoning:
        msg["reasoning_content"] = thinking
    return msg
