"""The one small interface between the loop and every provider.

A client is anything with ``chat(messages, tools)``: a generator that yields text
chunks (``str``) and thinking chunks (``ThinkingChunk``) as they stream, and returns
an ``LLMResponse``. The client keeps the full conversation; the loop sends only the
new messages of each turn:

* first turn: ``[{"role": "system", "content": str}, {"role": "user", "content": str}]``
* later turns: ``[{"role": "user", "content": str, "tool_results": [
  {"tool_use_id": str, "content": str}, ...]}]``

``tools`` is a list of OpenAI-style function schemas
(``{"type": "function", "function": {"name", "description", "parameters"}}``).

History inside a session is kept in one canonical block format (Anthropic-like):
``{"role": "user"|"assistant", "content": [block, ...]}`` with blocks
``{"type": "text", "text"}``, ``{"type": "thinking", "thinking", "signature"?}``,
``{"type": "tool_use", "id", "name", "input"}`` and
``{"type": "tool_result", "tool_use_id", "content", "is_error"?}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Generator, Iterable, Protocol

CLOSE_MATCH_CUTOFF = 0.6  # difflib ratio at which a misspelt config key names its match
COST_DIGITS = 10  # USD rounded to this many decimals: sums stay free of float noise


class ThinkingChunk(str):
    """A streamed piece of model reasoning (as opposed to answer text)."""


@dataclass
class FunctionCall:
    name: str
    arguments: str  # JSON text exactly as the model produced it


@dataclass
class ToolCall:
    id: str
    function: FunctionCall

    @classmethod
    def make(cls, id: str, name: str, arguments: str | dict) -> ToolCall:
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        return cls(id=id, function=FunctionCall(name=name, arguments=arguments))


def add_cost(total: float | None, cost: float | None) -> float | None:
    """``total`` plus ``cost`` in USD; None while neither is known (nothing was priced)."""
    if cost is None:
        return total
    return round((total or 0.0) + cost, COST_DIGITS)


@dataclass
class Usage:
    """Tokens of one request; ``input`` counts all input, cache reads (``cached``) and cache
    writes (``cache_write``) included."""

    input: int = 0
    cached: int = 0
    output: int = 0
    estimated: bool = False  # the server reported none: counted from characters (shown "≈")
    cache_write: int = 0
    cost: float | None = None  # USD, when the profile that served it has a price

    def add(self, other: Usage) -> None:
        self.input += other.input
        self.cached += other.cached
        self.output += other.output
        self.cache_write += other.cache_write
        self.estimated = self.estimated or other.estimated
        self.cost = add_cost(self.cost, other.cost)

    @property
    def total(self) -> int:
        return self.input + self.output


@dataclass
class LLMResponse:
    content: str = ""
    thinking: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    # "end_turn" | "tool_use" | "max_tokens" | "refusal" | "error" | provider-specific
    stop_reason: str = "end_turn"
    usage: Usage = field(default_factory=Usage)
    # provider-made canonical thinking blocks (e.g. with Anthropic signatures) kept in history
    thinking_blocks: list[dict] = field(default_factory=list)


ChatStream = Generator["str", None, LLMResponse]


class Client(Protocol):
    name: str

    def chat(self, messages: list[dict], tools: list[dict] | None = None) -> ChatStream: ...

    def abort(self) -> None: ...


class LLMError(Exception):
    """A provider failed for good (after retries). One line: provider, status, message.
    ``usage``: what the turn's broken attempts spent before it failed, if anything."""

    def __init__(self, provider: str, status: int | str | None, message: str):
        self.provider = provider
        self.status = status
        self.message = message
        self.usage: Usage | None = None
        super().__init__(f"{provider}: {status or 'error'}: {message}")


class ConfigError(Exception):
    """A bad config or usage value, reported as one line naming file and field (exit 2)."""

    def __init__(self, path: str | None, field: str | None, message: str):
        self.path = path
        self.field = field
        self.message = message
        where = ": ".join(p for p in (path, field) if p)
        super().__init__(f"{where}: {message}" if where else message)


def unknown_key(path: str | None, where: str, key: str, known: Iterable[str],
                what: str = "field") -> ConfigError:
    """A misspelt key: the close match when there is one, else the names allowed."""
    import difflib

    known = list(known)
    close = difflib.get_close_matches(key, known, n=1, cutoff=CLOSE_MATCH_CUTOFF)
    if close:
        return ConfigError(path, where, f"unknown {what}; did you mean {close[0]}?")
    return ConfigError(path, where, f"unknown {what}; allowed: {', '.join(known)}")


def new_messages_to_blocks(messages: list[dict]) -> tuple[str | None, list[dict]]:
    """Turn the loop's new messages into (system prompt or None, canonical messages)."""
    system = None
    out: list[dict] = []
    for m in messages:
        if m["role"] == "system":
            system = m["content"]
            continue
        blocks: list[dict] = [
            {"type": "tool_result", "tool_use_id": r["tool_use_id"], "content": r["content"]}
            for r in m.get("tool_results") or []
        ]
        content = m.get("content")
        if isinstance(content, list):
            blocks.extend(content)
        elif content:
            blocks.append({"type": "text", "text": content})
        out.append({"role": m["role"], "content": blocks})
    return system, out


def response_to_blocks(resp: LLMResponse) -> dict:
    """The canonical assistant message for a response."""
    blocks: list[dict] = []
    if resp.thinking:
        blocks.append({"type": "thinking", "thinking": resp.thinking})
    if resp.content:
        blocks.append({"type": "text", "text": resp.content})
    for tc in resp.tool_calls:
        try:
            args: Any = json.loads(tc.function.arguments or "{}", strict=False)
        except (json.JSONDecodeError, RecursionError):  # invalid, or nested past the limit
            args = {"_raw": tc.function.arguments}
        blocks.append({"type": "tool_use", "id": tc.id, "name": tc.function.name, "input": args})
    return {"role": "assistant", "content": blocks}
