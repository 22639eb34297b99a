"""Canonical history upkeep: sizes, repair before each call, squeezing old messages.

Messages are ``{"role": "user"|"assistant", "content": [block, ...]}`` (see ``llmcore.base``).
A message in a history is never changed in place: a function that changes one returns a new
dict and leaves the rest as they are. So per-message work (sizes, wire forms, journal
records) is done once per message and found again by identity (``MessageMemo``), and a
request's prefix stays byte-identical until a trim rewrites it.

Trimming to a budget (``llmcore.trim``) uses these pieces: an old message's squeezed form
(``squeeze_message``: already squeezed messages squeeze to themselves, so squeezed turns
stay a stable prefix), a message's size (an image counts as what it costs the model: its
pixels in tokens, not its base64 length) and the mark on the current task's first message
(``mark_task``), which trimming never drops.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

from . import images

CHARS_PER_TOKEN = 3
MESSAGE_OVERHEAD_CHARS = 40  # per-message extras a provider format adds (cache markers…)
SQUEEZE_TOOL_OUTPUT = 600  # old tool output, tool input or reply text longer than this …
SQUEEZE_HEAD = 300  # … keeps this many leading …
SQUEEZE_TAIL = 150  # … and trailing characters
TASK_KEY = "task"  # marks the first message of the current task (``mark_task``)
MISSING_RESULT = "(no result: the tool call was interrupted)"
SQUEEZE_TAGS = ("history", "key_info", "earlier_context")  # working-memory parts
MEMO_SLACK = 64  # a memo holds at most twice the live messages plus this many


class MessageMemo:
    """A value computed once per message object (messages are never changed in place)."""

    def __init__(self, make: Callable[[dict], Any]):
        self._make = make
        self._items: dict[int, tuple[dict, Any]] = {}
        self._last: tuple[tuple[dict, ...], list[Any]] = ((), [])  # the last ``values`` call

    def __call__(self, msg: dict) -> Any:
        hit = self._items.get(id(msg))
        if hit is not None and hit[0] is msg:
            return hit[1]
        value = self._make(msg)
        self._items[id(msg)] = (msg, value)
        return value

    def values(self, messages: list[dict]) -> list[Any]:
        """The values of ``messages``, in order. The part that begins as in the last call
        (the very same objects) takes them from that call: a history that grows costs what
        was added, not a look-up per message."""
        before, got = self._last
        same = 0
        for a, b in zip(messages, before, strict=False):
            if a is not b:
                break
            same += 1
        out = got[:same] + [self(m) for m in messages[same:]]
        self._last = (tuple(messages), out)
        return out

    def keep_only(self, messages: list[dict]) -> None:
        """Forget messages that left the history (cheap: runs only when the memo has grown)."""
        if len(self._items) <= 2 * len(messages) + MEMO_SLACK:
            return
        live = {id(m) for m in messages}
        self._items = {k: v for k, v in self._items.items() if k in live}


def block_text(block: dict) -> str:
    """A block's text: a tool call's input as JSON, an image as its short note."""
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
        return "\n".join(block_text(b) for b in content)  # a result's text and images
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def message_chars(msg: dict) -> int:
    """Size of a message as sent: its JSON form, so quoting and structure count too; an
    image counts as what it costs the model (its pixels in tokens), not its base64 length."""
    extra = MESSAGE_OVERHEAD_CHARS
    if images.has_images(msg):
        extra += sum(map(image_chars, images.iter_images([msg])))
        msg = images.map_images([msg], images.meta)[0]
    return len(json.dumps(msg, ensure_ascii=False)) + extra


def image_chars(block: dict) -> int:
    """An image's share of the budget: its token cost in characters."""
    return images.token_estimate(block) * CHARS_PER_TOKEN


def mark_task(msg: dict) -> dict:
    """The first message of a task, marked so that trimming keeps it."""
    return {**msg, TASK_KEY: True}


def task_index(messages: list[dict]) -> int | None:
    """Index of the current task's first message (the last marked one), if any."""
    return next((i for i in range(len(messages) - 1, -1, -1)
                 if messages[i].get(TASK_KEY)), None)


def history_chars(messages: list[dict], size: Callable[[dict], int] = message_chars) -> int:
    if isinstance(size, MessageMemo):
        return sum(size.values(messages))
    return sum(map(size, messages))


# ---- repair ----------------------------------------------------------------------------
def repair(messages: list[dict], valid: list[dict] | tuple[dict, ...] = ()) -> list[dict]:
    """A valid history: paired tool calls, no empty text, alternating roles, user first.
    Messages that need no change are kept as they are (the same objects).

    ``valid``: a history made valid before (the last one sent). The part of ``messages`` that
    begins as it did (the very same objects) is kept up to its last assistant message, and
    only what follows is repaired again: a history that grows costs what was added."""
    start = _valid_start(messages, valid)
    seen = {b["id"] for m in messages[:start] if m["role"] == "assistant"
            for b in m["content"] if b["type"] == "tool_use"}
    out = _merge_roles([_clean(m) for m in messages[start:]])
    out = _pair_tools(out, seen)
    out = _merge_roles(out)
    if start:  # the kept part begins with a user message; the rest with an assistant's
        return [*messages[:start], *out]
    first = next((i for i, m in enumerate(out) if m["role"] == "user"), len(out))
    return out[first:]


def _valid_start(messages: list[dict], valid: list[dict] | tuple[dict, ...]) -> int:
    """Where ``messages`` needs repair again: the last assistant message of the part that
    is the same as ``valid`` (that message is checked again, what follows pairs with it);
    0 when there is none."""
    same = 0
    for a, b in zip(messages, valid, strict=False):
        if a is not b:
            break
        same += 1
    return next((i for i in range(same - 1, 0, -1) if messages[i]["role"] == "assistant"), 0)


def since_last_reply(messages: list[dict]) -> list[dict]:
    """The messages after the model's last reply: what a request adds to the conversation."""
    last = next((i for i in range(len(messages) - 1, -1, -1)
                 if messages[i]["role"] == "assistant"), -1)
    return messages[last + 1:]


def _clean(msg: dict) -> dict:
    blocks = [b for b in msg["content"]
              if not (b["type"] == "text" and not b.get("text", "").strip())]
    return msg if len(blocks) == len(msg["content"]) else {**msg, "content": blocks}


def _merge_roles(messages: list[dict]) -> list[dict]:
    out: list[dict] = []
    for m in messages:
        if not m["content"]:
            continue
        if out and out[-1]["role"] == m["role"]:
            out[-1] = {**m, **out[-1], "content": out[-1]["content"] + m["content"]}
        else:
            out.append(m)
    return out


def with_blocks(msg: dict, blocks: list[dict]) -> dict:
    """``msg`` with ``blocks`` as content: the very same message when they are its own."""
    old = msg["content"]
    if len(blocks) == len(old) and all(a is b for a, b in zip(blocks, old, strict=True)):
        return msg
    return {**msg, "content": blocks}


def _pair_tools(messages: list[dict], seen: set[str]) -> list[dict]:
    """Every tool_use answered by exactly one tool_result in the next user message. A call
    id used before (in ``seen``, or earlier here: some servers repeat ids) is renamed in the
    call and its result."""
    out: list[dict] = []
    renames: dict[str, list[str]] = {}
    for m in messages:
        if m["role"] == "assistant":
            blocks, renames = _unique_calls(m["content"], seen)
            out.append(with_blocks(m, blocks))
            continue
        blocks = _renamed_results(m["content"], renames) if renames else m["content"]
        renames = {}
        out.append(with_blocks(m, _answer(_asked(out), blocks)))
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
            rest.append({"type": "text", "text": f"[tool result]\n{block_text(b)}"})
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
        content = squeeze_text(block_text(b))
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
    return with_blocks(msg, blocks)


def retire_working_memory(messages: list[dict]) -> list[dict]:
    """Empty the working-memory tags of the user message before the newest one: the block
    rides only at the end of the newest user message, never in the cached prefix."""
    i = _previous_user(messages)
    if i is None:
        return messages
    blocks = [b if b["type"] != "text" else _squeeze_block(b, "user")
              for b in messages[i]["content"]]
    retired = with_blocks(messages[i], blocks)
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
