"""Scripted provider: replays model turns from a YAML/JSON file or a list.

Each entry is one model turn: ``text``, optional ``thinking``, optional ``tool_calls``
(``{name, args}`` or ``{name, raw_args}`` for raw, possibly invalid, JSON), optional
``stop_reason``, ``usage`` ({input, cached, output}) and ``chunk`` (characters per streamed
piece, default 8). An entry ``{raise: MESSAGE}``
(optionally with ``status``) makes that call fail with ``LLMError``. When the script runs
out the model answers ``(script exhausted)`` with no tool call.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

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
)

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
    if not isinstance(data, list) or not all(isinstance(s, dict) for s in data):
        raise ConfigError(str(p), None, "a script is a list of turns (mappings)")
    return data


def _chunks(text: str, size: int = CHUNK_CHARS):
    for i in range(0, len(text), size):
        yield text[i : i + size]


class ScriptedClient:
    """A model that replays a script and records every call it receives."""

    def __init__(self, script: list[dict] | str | Path, name: str = "scripted",
                 vision: bool = True):
        self.vision = vision  # whether the scripted "model" takes images (profile ``vision:``)
        self.steps = list(script) if isinstance(script, list) else load_script(script)
        for i, step in enumerate(self.steps):
            size = step.get("chunk", CHUNK_CHARS)
            if not isinstance(size, int) or isinstance(size, bool) or size < 1:
                where = None if isinstance(script, list) else str(script)
                raise ConfigError(where, f"[{i}].chunk", "must be a whole number of at least 1")
        self.name = name
        self.model = name
        self.pos = 0
        self.calls: list[dict[str, Any]] = []
        self.system: str | None = None
        self.history: list[dict] = []
        self._abort = threading.Event()
        self.total_usage = Usage()
        self.on_event = None

    def profiles(self) -> list[str]:
        return [self.name]

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
        self.total_usage.add(resp.usage)
        self.history.append(response_to_blocks(resp))
        return resp
