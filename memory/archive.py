"""L4: finished sessions compressed into ``L4_raw_sessions/``, one file each, plus an index.

The archive keeps what a later task needs to find and reuse a past session: the user
prompts, the model's summaries and final answers. Tool output is squeezed to a short
preview, thinking is dropped, and secret-looking strings are redacted.

``index.txt`` holds one line per session, oldest first: ``DATE ID first prompt words``,
so ``grep -ri WORD L4_raw_sessions/`` finds both the index line and the session file.
"""

from __future__ import annotations

import json
import os
import re
import time
from datetime import date
from pathlib import Path
from typing import Any, Callable

from llmcore.secrets import redact_secrets
from tools.fslock import file_lock
from tools.fsutil import atomic_write

from .store import L4_MAX_SESSIONS, MemoryStore

RAW_LOGS_KEEP = 200  # retention: newest raw provider logs (<home>/logs/*.log) kept
INDEX_NAME = "index.txt"
INDEX_PROMPT_WORDS = 12
TOOL_OUTPUT_CHARS = 240
TOOL_ARGS_CHARS = 160
ASSISTANT_CHARS = 1200
USER_CHARS = 4000
FINAL_CHARS = 4000
SESSION_ID_CHARS = 80

_THINKING_RE = re.compile(r"<thinking>.*?</thinking>", re.S | re.I)


def new_session_id() -> str:
    """A new session id: start time plus a random suffix (journal and L4 share it)."""
    return time.strftime("%Y%m%d-%H%M%S-") + os.urandom(2).hex()


def squeeze(value: Any, limit: int) -> str:
    """One line of at most ``limit`` chars (plus a marker saying how much was cut). Only the
    words that can be shown are split off (a 16 KB tool output is not split whole to keep
    240 characters); the rest counts as it stands."""
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False, default=str)
    words = value.split(None, limit)  # ``limit`` words hold more than ``limit`` characters
    flat = " ".join(words[:limit])
    cut = len(flat) - limit
    if len(words) > limit:
        cut += 1 + len(words[limit].rstrip())
    if cut <= 0:
        return flat
    return f"{flat[:limit]}... [+{cut} chars]"


def _clip(text: Any, limit: int) -> str:
    s = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False, default=str)
    s = s.strip()
    return s if len(s) <= limit else f"{s[:limit]}\n... [+{len(s) - limit} chars]"


def safe_id(session_id: str) -> str:
    return re.sub(r"[^\w.-]", "_", str(session_id))[:SESSION_ID_CHARS] or "session"


def _tool_call_line(call: Any) -> str:
    if isinstance(call, dict):
        name = call.get("name") or (call.get("function") or {}).get("name", "?")
        args = call.get("args", call.get("arguments", (call.get("function") or {}).get(
            "arguments", "")))
    else:
        fn = getattr(call, "function", call)
        name, args = getattr(fn, "name", "?"), getattr(fn, "arguments", "")
    return f"- call {name}({squeeze(args, TOOL_ARGS_CHARS)})"


def _render_event(ev: dict) -> list[str]:
    kind = ev.get("type")
    if kind == "user":
        return ["", "## User", _clip(ev.get("text", ""), USER_CHARS)]
    if kind == "assistant":
        body = _THINKING_RE.sub("", str(ev.get("text") or "")).strip()
        lines = ["", "## Assistant", _clip(body, ASSISTANT_CHARS)] if body else []
        calls = ev.get("tool_calls") or []
        return lines + [_tool_call_line(c) for c in calls if c is not None]
    if kind == "tool_call":
        return [_tool_call_line(ev)]
    if kind == "tool_result":
        data = ev.get("data", ev.get("content", ""))
        return [f"- result {ev.get('name', '?')}: {squeeze(data, TOOL_OUTPUT_CHARS)}"]
    if kind == "summary":
        return [f"- summary: {squeeze(ev.get('text', ''), ASSISTANT_CHARS)}"]
    if kind == "task_end":
        text = ev.get("text") or ev.get("data") or ""
        how = f"{ev.get('result', '?')}: {ev['reason']}" if ev.get("reason") else ev.get(
            "result", "?")
        return ["", f"## Final ({how})", _clip(text, FINAL_CHARS)]
    return []


def normalize(events: list[Any]) -> list[dict]:
    """Journal events as they are, plus the ``--json`` stream's shapes: ``task_start``
    {prompt} becomes a user event and runs of ``text`` {delta} one assistant event."""
    out: list[dict] = []
    pieces: list[str] = []  # the current run of deltas, joined once when it ends
    for ev in events + [None]:
        if isinstance(ev, dict) and ev.get("type") == "text":
            pieces.append(str(ev.get("delta") or ""))
            continue
        if pieces:
            out.append({"type": "assistant", "text": "".join(pieces)})
            pieces = []
        if not isinstance(ev, dict):
            continue
        if ev.get("type") == "task_start" and ev.get("prompt"):
            out.append({"type": "user", "text": ev["prompt"]})
        else:
            out.append(ev)
    return out


def first_prompt(events: list[Any]) -> str:
    for ev in normalize(events):
        if ev.get("type") == "user" and ev.get("text"):
            return str(ev["text"])
    return ""


def render_session(session_id: str, events: list[Any], day: date,
                   redact: Callable[[str], str] | None = None) -> str:
    lines = [f"# Session {session_id} ({day.isoformat()})"]
    for ev in normalize(events):
        lines.extend(_render_event(ev))
    text = "\n".join(lines).strip() + "\n"
    return redact_secrets(redact(text) if redact else text)


def _read_index(path: Path) -> list[str]:
    try:
        return [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    except OSError:
        return []


def _index_id(line: str) -> str:
    parts = line.split(maxsplit=2)
    return parts[1] if len(parts) > 1 else ""


def archive_session(l4_dir: Path, session_id: str, events: list[dict], *,
                    keep: int = L4_MAX_SESSIONS, today: date | None = None,
                    redact: Callable[[str], str] | None = None) -> Path:
    """Write ``<l4_dir>/<id>.md``, update the index, prune beyond ``keep`` sessions.
    ``redact`` (the runtime's redactor) masks known keys; key shapes are always masked."""
    day = today or date.today()
    sid = safe_id(session_id)
    path = l4_dir / f"{sid}.md"
    atomic_write(path, render_session(sid, events, day, redact))
    prompt = first_prompt(events)
    words = " ".join(redact_secrets(redact(prompt) if redact else prompt).split()
                     [:INDEX_PROMPT_WORDS])
    index_path = l4_dir / INDEX_NAME
    with file_lock(index_path):
        lines = [ln for ln in _read_index(index_path) if _index_id(ln) != sid]
        lines.append(f"{day.isoformat()} {sid} {words}".rstrip())
        excess = max(0, len(lines) - max(1, keep))
        for old in lines[:excess]:
            (l4_dir / f"{safe_id(_index_id(old))}.md").unlink(missing_ok=True)
        atomic_write(index_path, "\n".join(lines[excess:]) + "\n")
    return path


class Transcript:
    """A compact running record of a session's events, ready for ``archive_session``:
    text deltas merged per reply, tool output squeezed, thinking and progress dropped."""

    def __init__(self, summaries: list[str] | None = None) -> None:
        self._events: list[dict] = [{"type": "summary", "text": s} for s in summaries or []]
        self._reply: list[str] = []  # the streaming reply's pieces, joined once when it ends

    @property
    def events(self) -> list[dict]:
        self._end_reply()
        return self._events

    def _end_reply(self) -> None:
        if self._reply:
            self._events.append({"type": "assistant", "text": "".join(self._reply)})
            self._reply = []

    def record(self, event: dict) -> None:
        kind = event.get("type")
        if kind == "text":
            self._reply.append(event.get("delta", ""))
        elif kind in ("retry", "model_switch"):  # the reply starts over
            self._reply = []
        elif kind == "task_start":
            self.events.append({"type": "user", "text": event.get("prompt", "")})
        elif kind == "tool_call":
            self.events.append({"type": "tool_call", "name": event.get("name"),
                                "args": squeeze(event.get("args", {}), TOOL_ARGS_CHARS)})
        elif kind == "tool_result":
            self.events.append({"type": "tool_result", "name": event.get("name"),
                                "data": squeeze(event.get("data", ""), TOOL_OUTPUT_CHARS)})
        elif kind in ("turn", "task_end"):
            self.events.append(dict(event))


def prune_raw_logs(log_dir: Path, keep: int = RAW_LOGS_KEEP) -> list[Path]:
    """Delete all but the ``keep`` newest ``*.log`` files directly in ``log_dir``."""
    try:
        logs = sorted(log_dir.glob("*.log"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return []
    removed = []
    for old in logs[keep:]:
        old.unlink(missing_ok=True)
        removed.append(old)
    return removed


def archive_to_l4(store: MemoryStore, session_id: str, events: list[dict],
                  today: date | None = None, redact: Callable[[str], str] | None = None) -> Path:
    """Compress a finished session into the store's ``L4_raw_sessions/`` (one file per
    session), and prune the raw provider logs beyond their retention limit."""
    path = archive_session(store.l4_dir, session_id, events, keep=store.l4_keep, today=today,
                           redact=redact)
    prune_raw_logs(store.home / "logs")
    return path
