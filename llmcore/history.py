"""Canonical history upkeep: repair before each call and trimming to a character budget.

Messages are ``{"role": "user"|"assistant", "content": [block, ...]}`` (see ``llmcore.base``).
A message in a history is never changed in place: a function that changes one returns a new
dict and leaves the rest as they are. So per-message work (sizes, wire forms, journal
records) is done once per message and found again by identity (``MessageMemo``), and a
request's prefix stays byte-identical until a trim rewrites it.

Trimming works in large, rare steps so prompt caches stay warm: while the history fits the
budget it is only appended to; once it does not, old images become short notes (an image
counts as its base64 length), and if that is not enough everything older than the newest
exchange is squeezed at once (already squeezed messages squeeze to themselves, so earlier squeezed
turns stay a stable prefix); only when that is not enough are the oldest turns dropped, well
below the budget. The newest exchange — the last assistant message and the tool results
answering it — is never dropped, split or turned into text.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

from . import images

CHARS_PER_TOKEN = 3
MESSAGE_OVERHEAD_CHARS = 40  # per-message extras a provider format adds (cache markers…)
KEEP_AFTER_SQUEEZE = 0.8  # squeezed history above this share of the budget: drop old turns …
DROP_TO = 0.4  # … down to this share, so drops (which rewrite the whole prefix) stay rare
SQUEEZE_TOOL_OUTPUT = 600  # old tool output, tool input or reply text longer than this …
SQUEEZE_HEAD = 300  # … keeps this many leading …
SQUEEZE_TAIL = 150  # … and trailing characters
MISSING_RESULT = "(no result: the tool call was interrupted)"
TRIMMED_NOTE = "(earlier turns trimmed)"
SQUEEZE_TAGS = ("history", "key_info", "earlier_context")  # working-memory parts
MEMO_SLACK = 64  # a memo holds at most twice the live messages plus this many


class MessageMemo:
    """A value computed once per message object (messages are never changed in place)."""

    def __init__(self, make: Callable[[dict], Any]):
        self._make = make
        self._items: dict[int, tuple[dict, Any]] = {}

    def __call__(self, msg: dict) -> Any:
        hit = self._items.get(id(msg))
        if hit is not None and hit[0] is msg:
            return hit[1]
        value = self._make(msg)
        self._items[id(msg)] = (msg, value)
        return value

    def keep_only(self, messages: list[dict]) -> None:
        """Forget messages that left the history (cheap: runs only when the memo has grown)."""
        if len(self._items) <= 2 * len(messages) + MEMO_SLACK:
            return
        live = {id(m) for m in messages}
        self._items = {k: v for k, v in self._items.items() if k in live}


def _text_of(block: dict) -> str:
    if block["type"] == "text":
        return block.get("text", "")
    if block["type"] == "thinking":
        return block.get("thinking", "")
    if block["type"] == "tool_use":
        return json.dumps(block.get("input"), ensure_ascii=False)
    if block["type"] == "image":
        return images.removed_note(block)["text"]
    content = block.get("content", "")
    if isinstance(content, list) and all(isinstance(b, dict) and "type" in b for b in content):
        return "\n".join(_text_of(b) for b in content)  # a result's text and images
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def message_chars(msg: dict) -> int:
    """Size of a message as sent: its JSON form, so quoting and structure count too."""
    return len(json.dumps(msg, ensure_ascii=False)) + MESSAGE_OVERHEAD_CHARS


def history_chars(messages: list[dict], size: Callable[[dict], int] = message_chars) -> int:
    return sum(map(size, messages))


# ---- repair ----------------------------------------------------------------------------
def repair(messages: list[dict]) -> list[dict]:
    """A valid history: paired tool calls, no empty text, alternating roles, user first.
    Messages that need no change are kept as they are (the same objects)."""
    out = _merge_roles([_clean(m) for m in messages])
    out = _pair_tools(out)
    out = _merge_roles(out)
    start = next((i for i, m in enumerate(out) if m["role"] == "user"), len(out))
    return out[start:]


def _clean(msg: dict) -> dict:
    blocks = [b for b in msg["content"]
              if not (b["type"] == "text" and not b.get("text", "").strip())]
    return msg if len(blocks) == len(msg["content"]) else {"role": msg["role"], "content": blocks}


def _merge_roles(messages: list[dict]) -> list[dict]:
    out: list[dict] = []
    for m in messages:
        if not m["content"]:
            continue
        if out and out[-1]["role"] == m["role"]:
            out[-1] = {"role": m["role"], "content": out[-1]["content"] + m["content"]}
        else:
            out.append(m)
    return out


def _same(msg: dict, blocks: list[dict]) -> dict:
    old = msg["content"]
    if len(blocks) == len(old) and all(a is b for a, b in zip(blocks, old, strict=True)):
        return msg
    return {"role": msg["role"], "content": blocks}


def _pair_tools(messages: list[dict]) -> list[dict]:
    """Every tool_use answered by exactly one tool_result in the next user message. A call
    id used before (some servers repeat ids) is renamed in the call and its result."""
    out: list[dict] = []
    seen: set[str] = set()
    renames: dict[str, list[str]] = {}
    for m in messages:
        if m["role"] == "assistant":
            blocks, renames = _unique_calls(m["content"], seen)
            out.append(_same(m, blocks))
            continue
        blocks = _renamed_results(m["content"], renames) if renames else m["content"]
        renames = {}
        out.append(_same(m, _answer(_asked(out), blocks)))
    asked = _asked(out)
    if asked and out[-1]["role"] == "assistant":
        out.append({"role": "user", "content": _answer(asked, [])})
    return out


def _unique_calls(blocks: list[dict], seen: set[str]) -> tuple[list[dict], dict]:
    """The blocks with repeated call ids renamed, and per old id the ids in call order."""
    out: list[dict] = []
    renames: dict[str, list[str]] = {}
    for b in blocks:
        if b["type"] == "tool_use":
            new = b["id"]
            n = 1
            while new in seen:
                n += 1
                new = f"{b['id']}_{n}"
            seen.add(new)
            renames.setdefault(b["id"], []).append(new)
            b = b if new == b["id"] else {**b, "id": new}
        out.append(b)
    if all(ids == [old] for old, ids in renames.items()):
        renames = {}
    return out, renames


def _renamed_results(blocks: list[dict], renames: dict[str, list[str]]) -> list[dict]:
    """Results matched to renamed calls in order: the n-th result for an id answers the
    n-th call that had it."""
    queues = {old: list(ids) for old, ids in renames.items()}
    out = []
    for b in blocks:
        ids = queues.get(b.get("tool_use_id", "")) if b["type"] == "tool_result" else None
        if ids:
            new = ids.pop(0)
            b = b if new == b["tool_use_id"] else {**b, "tool_use_id": new}
        out.append(b)
    return out


def _asked(out: list[dict]) -> list[str]:
    prev = out[-1] if out and out[-1]["role"] == "assistant" else None
    return [b["id"] for b in prev["content"] if b["type"] == "tool_use"] if prev else []


def _answer(asked: list[str], blocks: list[dict]) -> list[dict]:
    results: dict[str, dict] = {}
    rest: list[dict] = []
    for b in blocks:
        if b["type"] != "tool_result":
            rest.append(b)
        elif b["tool_use_id"] in asked and b["tool_use_id"] not in results:
            results[b["tool_use_id"]] = b
        elif b["tool_use_id"] not in results:
            rest.append({"type": "text", "text": f"[tool result]\n{_text_of(b)}"})
    paired = [results.get(i) or {"type": "tool_result", "tool_use_id": i,
                                 "content": MISSING_RESULT} for i in asked]
    return paired + rest


# ---- squeezing -------------------------------------------------------------------------
def unanswered_call(messages: list[dict], name: str) -> dict | None:
    """The ``tool_use`` block calling ``name`` in the last message, when that message is the
    assistant's (so no result has answered it yet); else None."""
    last = messages[-1] if messages else None
    if not isinstance(last, dict) or last.get("role") != "assistant":
        return None
    return next((b for b in last.get("content") or [] if isinstance(b, dict)
                 and b.get("type") == "tool_use" and b.get("name") == name), None)


def squeeze_text(text: str) -> str:
    if len(text) <= SQUEEZE_TOOL_OUTPUT:
        return text
    cut = len(text) - SQUEEZE_HEAD - SQUEEZE_TAIL
    return f"{text[:SQUEEZE_HEAD]}\n…[{cut} chars squeezed]…\n{text[-SQUEEZE_TAIL:]}"


_TAG_RE = re.compile(r"<(%s)>(?!\(squeezed\)</\1>).*?</\1>" % "|".join(SQUEEZE_TAGS), re.S)


def _squeeze_tags(text: str) -> str:
    return _TAG_RE.sub(lambda mt: f"<{mt.group(1)}>(squeezed)</{mt.group(1)}>", text)


def _squeeze_value(value: Any) -> Any:
    if isinstance(value, str):
        return squeeze_text(value)
    if isinstance(value, dict):
        return {k: _squeeze_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_squeeze_value(v) for v in value]
    return value


def _squeeze_block(b: dict, role: str) -> dict | None:
    kind = b["type"]
    if kind == "thinking":
        return None
    if kind == "image":
        return images.removed_note(b)
    if kind == "tool_result":
        content = squeeze_text(_text_of(b))
        return b if content == b.get("content") else {**b, "content": content}
    if kind == "tool_use":
        data = _squeeze_value(b.get("input"))
        return b if data == b.get("input") else {**b, "input": data}
    if kind == "text":
        text = _squeeze_tags(b["text"])
        text = squeeze_text(text) if role == "assistant" else text
        return b if text == b["text"] else {**b, "text": text}
    return b


def squeeze_message(msg: dict) -> dict:
    """An old message in its squeezed form: thinking dropped; long tool output, tool input
    and reply text cut to head + tail; working-memory tags emptied. Squeezing a squeezed
    message gives the very same object."""
    blocks = [s for b in msg["content"] if (s := _squeeze_block(b, msg["role"])) is not None]
    if not blocks:
        blocks = [{"type": "text", "text": "(squeezed)"}]
    return _same(msg, blocks)


def _squeeze_results(msg: dict) -> dict:
    """The newest exchange's tool output cut to head + tail; its images stay: they are what
    the model is about to look at."""
    blocks = [_squeeze_result_text(b) if b["type"] == "tool_result" else b
              for b in msg["content"]]
    return _same(msg, blocks)


def _squeeze_result_text(b: dict) -> dict:
    pictures = images.result_images(b)
    if not pictures:
        return _squeeze_block(b, "user")
    text = squeeze_text("\n".join(x["text"] for x in b["content"] if x["type"] == "text"))
    return {**b, "content": [{"type": "text", "text": text}, *pictures]}


def _without_images(msg: dict) -> dict:
    return images.map_images([msg], images.removed_note)[0]


def retire_working_memory(messages: list[dict]) -> list[dict]:
    """Empty the working-memory tags of the user message before the newest one: the block
    rides only at the end of the newest user message, never in the cached prefix."""
    i = _previous_user(messages)
    if i is None:
        return messages
    blocks = [b if b["type"] != "text" else _squeeze_block(b, "user")
              for b in messages[i]["content"]]
    retired = _same(messages[i], blocks)
    return messages if retired is messages[i] else [*messages[:i], retired, *messages[i + 1:]]


def _previous_user(messages: list[dict]) -> int | None:
    seen = 0
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] != "user":
            continue
        if seen:
            return i
        seen = 1
    return None


# ---- trimming --------------------------------------------------------------------------
def newest_exchange_start(messages: list[dict]) -> int:
    """Index of the last assistant message (else of the last message)."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] == "assistant":
            return i
    return max(len(messages) - 1, 0)


def trim(messages: list[dict], budget_chars: int, keep_prefix: int = 0,
         size: Callable[[dict], int] = message_chars) -> list[dict]:
    """A history that fits ``budget_chars`` if it can (the input list is not changed).

    Over budget: old images become short notes first (an image counts as its base64 length);
    if still over, squeeze everything older than the newest exchange; if that leaves more than
    ``KEEP_AFTER_SQUEEZE`` of the budget, drop the oldest turns down to ``DROP_TO``; if the
    newest exchange alone is still over, squeeze its tool output (its images stay).
    """
    if history_chars(messages, size) <= budget_chars:
        return messages
    start = newest_exchange_start(messages)
    keep = min(keep_prefix, start)
    out = [*messages[:keep], *map(_without_images, messages[keep:start]), *messages[start:]]
    if history_chars(out, size) <= budget_chars:  # old images go first: each a short note
        return out
    out = [*out[:keep], *map(squeeze_message, out[keep:start]), *out[start:]]
    if history_chars(out, size) > budget_chars * KEEP_AFTER_SQUEEZE:
        out = _drop_oldest(out, keep, start, int(budget_chars * DROP_TO), size)
    if history_chars(out, size) > budget_chars:
        newest = len(messages) - start
        out = [*out[:-newest], *map(_squeeze_results, out[-newest:])]
    return out


def _drop_oldest(out: list[dict], keep: int, newest_at: int, target: int,
                 size: Callable[[dict], int]) -> list[dict]:
    """Drop whole turns after the kept prefix, never reaching the newest exchange."""
    total = history_chars(out, size)
    cut = keep
    while cut < newest_at and total > target:
        total -= size(out[cut])
        cut += 1
        while cut < newest_at and out[cut]["role"] != "user":
            total -= size(out[cut])
            cut += 1
    head, kept = out[:keep], out[cut:]
    before = head[-1]["role"] if head else "assistant"  # a history starts with a user turn
    if kept and kept[0]["role"] == before:
        role = "assistant" if before == "user" else "user"
        kept = [{"role": role, "content": [{"type": "text", "text": TRIMMED_NOTE}]}, *kept]
    return repair(head + kept)
