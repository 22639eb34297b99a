"""Canonical history upkeep: repair before each call and trimming to a character budget.

Messages are ``{"role": "user"|"assistant", "content": [block, ...]}`` (see ``llmcore.base``).
"""

from __future__ import annotations

import copy
import json
import re

CHARS_PER_TOKEN = 3
MESSAGE_OVERHEAD_CHARS = 40  # per-message extras a provider format adds (cache markers…)
TRIM_TARGET = 0.7  # after trimming, aim this far below the budget so caches stay warm
KEEP_RECENT = 4  # messages at the end that squeezing never touches
SQUEEZE_TOOL_OUTPUT = 600  # old tool output longer than this is cut to head + tail
SQUEEZE_HEAD = 300
SQUEEZE_TAIL = 150
MISSING_RESULT = "(no result: the tool call was interrupted)"
SQUEEZE_TAGS = ("history", "key_info", "earlier_context")


def _text_of(block: dict) -> str:
    if block["type"] == "text":
        return block.get("text", "")
    if block["type"] == "thinking":
        return block.get("thinking", "")
    if block["type"] == "tool_use":
        return json.dumps(block.get("input"), ensure_ascii=False)
    content = block.get("content", "")
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def message_chars(msg: dict) -> int:
    """Size of a message as sent: its JSON form, so quoting and structure count too."""
    return len(json.dumps(msg, ensure_ascii=False)) + MESSAGE_OVERHEAD_CHARS


def history_chars(messages: list[dict]) -> int:
    return sum(message_chars(m) for m in messages)


def repair(messages: list[dict]) -> list[dict]:
    """A valid copy: paired tool calls, no empty text, alternating roles, user first."""
    out = _merge_roles([_clean(m) for m in messages])
    out = _pair_tools(out)
    out = _merge_roles(out)
    while out and out[0]["role"] != "user":
        out.pop(0)
    return out


def _clean(msg: dict) -> dict:
    blocks = [b for b in msg["content"]
              if not (b["type"] == "text" and not b.get("text", "").strip())]
    return {"role": msg["role"], "content": blocks}


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


def _pair_tools(messages: list[dict]) -> list[dict]:
    """Every tool_use answered by exactly one tool_result in the next user message."""
    out: list[dict] = []
    seen: set[str] = set()
    for m in messages:
        if m["role"] == "assistant":
            blocks = []
            for b in m["content"]:
                if b["type"] == "tool_use" and b["id"] in seen:
                    continue
                if b["type"] == "tool_use":
                    seen.add(b["id"])
                blocks.append(b)
            out.append({"role": "assistant", "content": blocks})
            continue
        prev = out[-1] if out and out[-1]["role"] == "assistant" else None
        asked = [b["id"] for b in prev["content"] if b["type"] == "tool_use"] if prev else []
        out.append({"role": "user", "content": _answer(asked, m["content"])})
    if out and out[-1]["role"] == "assistant":
        asked = [b["id"] for b in out[-1]["content"] if b["type"] == "tool_use"]
        if asked:
            out.append({"role": "user", "content": _answer(asked, [])})
    return out


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


def trim(messages: list[dict], budget_chars: int, keep_prefix: int = 0) -> list[dict]:
    """A copy that fits ``budget_chars``: squeeze old messages, then drop the oldest turns."""
    if history_chars(messages) <= budget_chars:
        return messages
    target = int(budget_chars * TRIM_TARGET)
    out = copy.deepcopy(messages)
    old_end = max(len(out) - KEEP_RECENT, 0)
    for m in out[keep_prefix:old_end]:
        _squeeze(m)
    if history_chars(out) <= target:
        return out
    return _drop_oldest(out, target, keep_prefix)


def _squeeze(msg: dict) -> None:
    blocks = []
    for b in msg["content"]:
        if b["type"] == "thinking":
            continue
        if b["type"] == "tool_result":
            b = {**b, "content": squeeze_text(_text_of(b))}
        elif b["type"] == "text":
            b = {**b, "text": _squeeze_tags(b["text"])}
        blocks.append(b)
    msg["content"] = blocks or [{"type": "text", "text": "(squeezed)"}]


def squeeze_text(text: str) -> str:
    if len(text) <= SQUEEZE_TOOL_OUTPUT:
        return text
    cut = len(text) - SQUEEZE_HEAD - SQUEEZE_TAIL
    return f"{text[:SQUEEZE_HEAD]}\n…[{cut} chars squeezed]…\n{text[-SQUEEZE_TAIL:]}"


_TAG_RE = re.compile(r"<(%s)>.*?</\1>" % "|".join(SQUEEZE_TAGS), re.S)


def _squeeze_tags(text: str) -> str:
    return _TAG_RE.sub(lambda mt: f"<{mt.group(1)}>(squeezed)</{mt.group(1)}>", text)


def _drop_oldest(out: list[dict], target: int, keep_prefix: int) -> list[dict]:
    """Drop whole turns after the kept prefix; the next kept message is a plain user message."""
    prefix = out[:keep_prefix]
    rest = out[keep_prefix:]
    size = history_chars(out)
    cut = 0
    while cut < len(rest) - 1 and size > target:
        size -= message_chars(rest[cut])
        cut += 1
        while cut < len(rest) - 1 and not _is_turn_start(rest[cut]):
            size -= message_chars(rest[cut])
            cut += 1
    kept = rest[cut:]
    if prefix and kept and prefix[-1]["role"] == kept[0]["role"]:
        note = {"type": "text", "text": "(earlier turns trimmed)"}
        kept = [{"role": "assistant", "content": [note]}, *kept]
    return repair(prefix + kept)


def _is_turn_start(msg: dict) -> bool:
    return msg["role"] == "user"
