"""Scripted provider: replays model turns from a YAML/JSON file or a list.

Each entry is one model turn: ``text``, optional ``thinking``, optional ``tool_calls``
(``{name, args}`` or ``{name, raw_args}`` for raw, possibly invalid, JSON), optional
``stop_reason``, ``usage`` ({input, cached, cache_write, output}) and ``chunk``
(characters per streamed piece, default 8). An entry ``{raise: MESSAGE}`` (optionally
with ``status``) makes that call fail with ``LLMError``. When the script runs out the model
answers ``(script exhausted)`` with no tool call. The whole script is checked
when loaded: an unknown field or a value of the wrong type is a ``ConfigError``.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Callable

from .base import (
    ChatStream,
    ConfigError,
    LLMError,
    LLMResponse,
    ThinkingChunk,
    ToolCall,
    Usage,
    new_messages_to_blocks,
    response_to_blocks,
    unknown_key,
)
from .price import Price

EXHAUSTED = "(script exhausted)"
CHUNK_CHARS = 8


def load_script(path: str | Path) -> list[dict]:
    import yaml

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(str(p), None, f"cannot read script: {e.strerror}") from None
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(str(p), None, f"invalid script: {first}") from None
    if not isinstance(data, list):
        raise ConfigError(str(p), None, "a script is a list of turns (mappings)")
    return check_script(data, str(p))


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _text(v: Any) -> bool:
    return v is None or isinstance(v, str)


# field: (test of its value, what it must be) — one table per mapping of the format
STEP_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "text": (_text, "a string"),
    "thinking": (_text, "a string"),
    "tool_calls": (lambda v: v is None or isinstance(v, list), "a list of {name, args} calls"),
    "raise": (lambda v: isinstance(v, str), "the error message (a string)"),
    "status": (lambda v: v is None or _whole(v), "an HTTP status (a whole number)"),
    "stop_reason": (lambda v: isinstance(v, str), "a string"),
    "usage": (lambda v: isinstance(v, dict), "a mapping {input, cached, cache_write, output}"),
    "chunk": (lambda v: _whole(v) and v >= 1, "a whole number of at least 1"),
}
CALL_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "name": (lambda v: isinstance(v, str) and bool(v), "the tool's name (a string)"),
    "args": (lambda v: isinstance(v, dict), "a mapping of argument names to values"),
    "raw_args": (lambda v: isinstance(v, str), "the arguments as JSON text (a string)"),
}
USAGE_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    k: (lambda v: _whole(v) and v >= 0, "a whole number of tokens")
    for k in ("input", "cached", "cache_write", "output")
}


def _check_fields(where: str | None, field: str, value: Any, table: dict, what: str) -> None:
    if not isinstance(value, dict):
        raise ConfigError(where, field, f"expected a mapping ({what})")
    for key, v in value.items():
        if key not in table:
            raise unknown_key(where, f"{field}.{key}", str(key), table)
        test, must = table[key]
        if not test(v):
            raise ConfigError(where, f"{field}.{key}", f"must be {must}, not {v!r}")


def check_script(steps: list, where: str | None = None) -> list[dict]:
    """``steps`` if each is a well-formed turn, else one ``ConfigError`` naming ``where`` (the
    file) and the field, e.g. ``[0].tool_calls[1].name`` — a typo never passes silently."""
    for i, step in enumerate(steps):
        _check_fields(where, f"[{i}]", step, STEP_FIELDS, "text, tool_calls, …")
        if isinstance(step.get("usage"), dict):
            _check_fields(where, f"[{i}].usage", step["usage"], USAGE_FIELDS, "token counts")
        for j, call in enumerate(step.get("tool_calls") or []):
            field = f"[{i}].tool_calls[{j}]"
            _check_fields(where, field, call, CALL_FIELDS, "name, args or raw_args")
            if "name" not in call:
                raise ConfigError(where, f"{field}.name", "missing: the tool to call")
            if "args" in call and "raw_args" in call:
                raise ConfigError(where, field, "give args or raw_args, not both")
    return steps


def _chunks(text: str, size: int = CHUNK_CHARS):
    for i in range(0, len(text), size):
        yield text[i : i + size]


class ScriptedClient:
    """A model that replays a script and records every call it receives."""

    def __init__(self, script: list[dict] | str | Path, name: str = "scripted",
                 vision: bool = True, price: Price | None = None):
        self.vision = vision  # whether the scripted "model" takes images (profile ``vision:``)
        self.price = price  # the profile's ``price:``: usage then carries a cost
        self.steps = check_script(list(script)) if isinstance(script, list) else load_script(script)
        self.name = name
        self.model = name
        self.pos = 0
        self.calls: list[dict[str, Any]] = []
        self.system: str | None = None
        self.history: list[dict] = []
        self._abort = threading.Event()
        self.total_usage = Usage()
        self.on_event = None
        self.before_request: Callable[[], None] | None = None  # as LLMSession's

    def profiles(self) -> list[str]:
        return [self.name]

    def unpriced(self) -> list[str]:
        return [] if self.price else [self.name]

    def switch(self, name: str) -> None:
        if name != self.name:
            raise ConfigError(None, "model", f"unknown profile {name!r}; known: {self.name}")

    def set_option(self, key: str, value: str) -> None:
        from .config import coerce

        coerce(None, "", key, value)

    def abort(self) -> None:
        self._abort.set()

    def assert_complete(self) -> None:
        left = len(self.steps) - self.pos
        assert left == 0, f"{left} scripted turn(s) were not used"

    def chat(self, messages: list[dict], tools: list[dict] | None = None) -> ChatStream:
        self._abort.clear()
        if self.before_request is not None:
            self.before_request()
        self.calls.append({"messages": messages, "tools": tools, "system": self.system})
        system, new = new_messages_to_blocks(messages)
        if system is not None:
            self.system = system
            self.calls[-1]["system"] = system
        step = self.steps[self.pos] if self.pos < len(self.steps) else {"text": EXHAUSTED}
        self.pos += 1
        if "raise" in step:  # like a provider: the unanswered message stays out of history
            raise LLMError(self.name, step.get("status"), str(step["raise"]))
        self.history.extend(new)
        resp = LLMResponse(stop_reason=step.get("stop_reason", "end_turn"))
        resp.thinking = step.get("thinking") or ""
        size = step.get("chunk") or CHUNK_CHARS
        for piece in _chunks(resp.thinking, size):
            yield ThinkingChunk(piece)
        text: list[str] = []
        for piece in _chunks(step.get("text") or "", size):
            if self._abort.is_set():
                resp.stop_reason = "aborted"
                break
            text.append(piece)
            yield piece
        resp.content = "".join(text)
        for i, call in enumerate(step.get("tool_calls") or []):
            raw = call.get("raw_args")
            args = raw if raw is not None else json.dumps(call.get("args", {}), ensure_ascii=False)
            resp.tool_calls.append(ToolCall.make(f"call_{self.pos}_{i}", call["name"], args))
        if resp.tool_calls and "stop_reason" not in step:
            resp.stop_reason = "tool_use"
        resp.usage = Usage(**step.get("usage", {}))
        if self.price is not None:
            resp.usage.cost = self.price.cost(resp.usage)
        self.total_usage.add(resp.usage)
        self.history.append(response_to_blocks(resp))
        return resp
