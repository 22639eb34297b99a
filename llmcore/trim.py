"""Trimming a history to a character budget, in large, rare steps so prompt caches stay warm.

While the history fits the budget it is only appended to; once it does not, old images
become short notes, and if that is not enough everything older than the newest exchange is
squeezed at once (``llmcore.history.squeeze_message``); only when that is not enough are
the oldest turns dropped, well below the budget. The newest exchange — the last assistant
message and the tool results answering it — is never dropped, split or turned into text;
when it alone is over budget its tool output is cut only as far as needed, with a note
telling the model to ask for less. The current task's first message (``mark_task``) is never
dropped either: it stays right after the kept prefix, its text cut to a share of the budget
when it is huge, so every request says what the task is; its images (what the user asked
about) stay unless they alone would take half the budget.
"""

from __future__ import annotations

from typing import Callable

from . import images
from .history import (
    block_text,
    history_chars,
    message_chars,
    repair,
    squeeze_message,
    task_index,
    with_blocks,
)

KEEP_AFTER_SQUEEZE = 0.8  # squeezed history above this share of the budget: drop old turns …
DROP_TO = 0.4  # … down to this share, so drops (which rewrite the whole prefix) stay rare
NEWEST_MIN_KEEP = 600  # the newest tool output keeps at least this many characters …
CUT_HEAD_SHARE = 2 / 3  # … of which this share from its start, the rest from its end
LINE_SNAP = 0.2  # a cut moves to a line break when that loses at most this share of it
TASK_SHARE = 0.25  # the pinned task message's text is cut to this share of the budget …
TASK_IMAGES_SHARE = 0.5  # … and its images stay while they take at most this share
TRIMMED_NOTE = "(earlier turns trimmed)"
OUTPUT_CUT_NOTE = ("…[{lines} lines ({chars} chars) cut here: the output is too long for the "
                   "context window. Ask for less at a time: fewer lines, a narrower search, "
                   "shorter output]…")
TASK_CUT_NOTE = "…[{lines} lines ({chars} chars) of the task cut to fit the context window]…"


def cut_text(text: str, keep: int, note: str) -> str:
    """``text`` cut to about ``keep`` characters: its head and tail, at line breaks when that
    loses little, with ``note`` (fields ``lines``, ``chars``) where the middle was."""
    if len(text) <= keep:
        return text
    head = int(keep * CUT_HEAD_SHARE)
    end = text.rfind("\n", 0, head) + 1
    end = end if end >= head * (1 - LINE_SNAP) else head
    start = len(text) - (keep - head)
    nl = text.find("\n", start, start + int((keep - head) * LINE_SNAP))
    start = nl + 1 if nl >= 0 else start
    middle = text[end:start]
    cut = note.format(lines=f"{middle.count(chr(10)):,}", chars=f"{len(middle):,}")
    if len(cut) + 2 >= len(middle):  # the note would take more room than it saves
        return text
    return f"{text[:end]}\n{cut}\n{text[start:]}"


def _cut_part(b: dict, keep: int, note: str, pictures: bool) -> dict:
    if images.is_image(b):
        return b if pictures else images.removed_note(b)
    if b["type"] != "text":
        return b
    text = cut_text(b["text"], keep, note)
    return b if text == b["text"] else {**b, "text": text}


def _cut_block(b: dict, keep: int, note: str, pictures: bool, output_only: bool) -> dict:
    if b["type"] != "tool_result":
        return b if output_only and b["type"] == "text" else _cut_part(b, keep, note, pictures)
    content = b.get("content")
    if isinstance(content, list):
        return {**b, "content": [_cut_part(x, keep, note, pictures) for x in content]}
    text = cut_text(block_text(b), keep, note)
    return b if text == content else {**b, "content": text}


def _cut_message(msg: dict, keep: int, note: str, pictures: bool, output_only: bool) -> dict:
    """A user message with its tool output (and, unless ``output_only``, its text) cut to
    ``keep`` characters a block; its images notes unless ``pictures``."""
    if msg["role"] != "user":
        return msg
    return with_blocks(msg, [_cut_block(b, keep, note, pictures, output_only)
                       for b in msg["content"]])


def _longest_text(messages: list[dict]) -> int:
    return max((len(block_text(b)) for m in messages for b in m["content"]), default=0)


def fit(messages: list[dict], room: int, note: str = OUTPUT_CUT_NOTE,
        output_only: bool = True) -> list[dict]:
    """``messages`` within ``room`` characters by cutting their user messages' tool output
    (and text, unless ``output_only``) only as far as needed: one cap for every block,
    found by bisection, never under ``NEWEST_MIN_KEEP``. Images stay unless even the
    smallest cut leaves no room for them; then they become notes."""
    if history_chars(messages) <= room:
        return messages

    def cut(keep: int, pictures: bool) -> list[dict]:
        return [_cut_message(m, keep, note, pictures, output_only) for m in messages]

    for pictures in (True, False):
        lo, hi = NEWEST_MIN_KEEP, max(_longest_text(messages), NEWEST_MIN_KEEP)
        if history_chars(cut(lo, pictures)) > room:
            continue
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if history_chars(cut(mid, pictures)) <= room else (lo, mid - 1)
        return cut(lo, pictures)
    return cut(NEWEST_MIN_KEEP, False)


def _without_images(msg: dict) -> dict:
    return images.map_images([msg], images.removed_note)[0]


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

    Over budget: old images become short notes first; if still over, squeeze everything
    older than the newest exchange; cut the newest exchange's tool output if it alone (with
    the kept prefix and the task) is over; if the rest leaves more than
    ``KEEP_AFTER_SQUEEZE`` of the budget, drop the oldest turns down to ``DROP_TO``. The
    first ``keep_prefix`` messages and the task's first message are never dropped (its text
    cut to ``TASK_SHARE`` of the budget, see ``_fit_task``).
    """
    if history_chars(messages, size) <= budget_chars:
        return messages
    start = newest_exchange_start(messages)
    keep = min(keep_prefix, start)
    task = task_index(messages)
    out = list(messages)
    if task is not None and task >= keep:  # in the newest exchange too: a huge first request
        out[task] = _fit_task(out[task], budget_chars)
    task = task if task is not None and keep <= task < start else None
    old = [i for i in range(keep, start) if i != task]
    _apply(out, old, _without_images)
    if history_chars(out, size) <= budget_chars:  # old images go first: each a short note
        return out
    _apply(out, old, squeeze_message)
    pinned = [*out[:keep], *([out[task]] if task is not None else [])]
    room = budget_chars - history_chars(pinned, size) - 2 * message_chars(_note("user"))
    out[start:] = fit(out[start:], room)
    if history_chars(out, size) > budget_chars * KEEP_AFTER_SQUEEZE:
        out = _drop_oldest(out, keep, task, start, int(budget_chars * DROP_TO), size)
    return out


def _fit_task(msg: dict, budget_chars: int) -> dict:
    """The task's message with its text cut to ``TASK_SHARE`` of the budget; its images
    kept while they take at most ``TASK_IMAGES_SHARE`` (else all become notes)."""
    bare = _without_images(msg)
    pictures = message_chars(msg) - message_chars(bare)
    if pictures > budget_chars * TASK_IMAGES_SHARE:
        msg, pictures = bare, 0
    return fit([msg], int(budget_chars * TASK_SHARE) + pictures, TASK_CUT_NOTE, False)[0]


def _apply(out: list[dict], indices: list[int], fn: Callable[[dict], dict]) -> None:
    for i in indices:
        out[i] = fn(out[i])


def _note(role: str) -> dict:
    return {"role": role, "content": [{"type": "text", "text": TRIMMED_NOTE}]}


def _drop_oldest(out: list[dict], keep: int, task: int | None, newest_at: int, target: int,
                 size: Callable[[dict], int]) -> list[dict]:
    """Drop whole turns after the kept prefix, oldest first, never the task's first message
    nor the newest exchange; a note stands where roles would not alternate."""
    total = history_chars(out, size)
    kept = out[:keep]
    lo = keep
    for hi in [*([task] if task is not None else []), newest_at]:
        cut = lo
        while cut < hi and total > target:
            total -= size(out[cut])
            cut += 1
            while cut < hi and out[cut]["role"] != "user":
                total -= size(out[cut])
                cut += 1
        _join(kept, out[cut:hi + 1] if hi == task else out[cut:hi])
        lo = hi + 1
    _join(kept, out[newest_at:])
    return repair(kept)


def _join(kept: list[dict], more: list[dict]) -> None:
    """Append ``more`` to ``kept``, with a note between two messages of the same role."""
    before = kept[-1]["role"] if kept else "assistant"  # a history starts with a user turn
    if more and more[0]["role"] == before:
        kept.append(_note("assistant" if before == "user" else "user"))
    kept.extend(more)
