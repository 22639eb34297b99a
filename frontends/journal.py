"""The session journal: ``<home>/sessions/<id>.jsonl``, one event per line, flushed per event.

A ``Journal`` is an agent listener. It writes the task events (user prompt, each model reply,
each tool call and result, usage, task end) and, after every turn, a ``state`` record with
the working memory and the changes to ``history_info`` and the provider history, so
``load_session`` can rebuild everything ``--resume`` needs. A line torn by a killed process
is skipped and reported. Images are stored once under ``<home>/images`` and
referenced (``frontends.imagestore``). Every line goes through the agent's redactor.

One process writes a journal at a time: a ``SessionLock`` (``<id>.lock`` beside it, see
``session_lock``) is held while it is open, so a second ``ga --resume ID`` is refused instead
of losing turns. A journal that cannot be written (disk full, read-only home) is reported
once; the task goes on.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable

from llmcore.base import add_cost
from llmcore.secrets import Redactor
from memory.archive import new_session_id

from .imagestore import ImageStore
from .session_lock import SessionLock

log = logging.getLogger("ga.session")

JOURNAL_VERSION = 1
STREAM_EVENTS = ("text", "thinking")
RESTART_EVENTS = ("retry", "model_switch")  # the reply starts over: its streamed text goes
SKIPPED_EVENTS = ("progress", "approval_request")  # the decision (approval) is journaled
STATE_AFTER = ("turn", "tool_result", "task_end")
SAVED_STATE = ("working", "open_turn")  # the agent's dicts a state record holds when changed
PROMPT_PREVIEW_CHARS = 60


def sessions_dir(home: str | Path) -> Path:
    return Path(home) / "sessions"


def ends_with_newline(path: Path) -> bool:
    """True for a missing or empty file, or one whose last byte is a newline."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return True
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"
    except FileNotFoundError:
        return True


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, default=str)


class ListDelta:
    """Tracks a list between snapshots; ``delta`` gives ``{from, items}`` for what changed.

    Items are compared by identity first (history messages are never changed in place; a
    changed one is a new object), so a snapshot costs what changed, not the whole list."""

    def __init__(self, items: list | None = None) -> None:
        self._saved = list(items or [])

    def delta(self, current: list) -> dict | None:
        saved = self._saved
        start = 0
        limit = min(len(current), len(saved))
        while start < limit and (current[start] is saved[start] or current[start] == saved[start]):
            start += 1
        if start == len(current) == len(saved):
            return None
        self._saved = list(current)
        return {"from": start, "items": current[start:]}


def apply_delta(items: list, delta: dict | None) -> list:
    if not delta:
        return items
    start = min(int(delta.get("from", 0)), len(items))
    return items[:start] + list(delta.get("items") or [])


class Journal:
    """Append-only event log of one session; attach with ``agent.listeners.append(journal)``."""

    def __init__(self, home: str | Path, agent: Any, session_id: str | None = None,
                 state: SessionState | None = None) -> None:
        self.id = session_id or new_session_id()
        agent.session_id = self.id  # L4 archives under the journal's id
        self.path = sessions_dir(home) / f"{self.id}.jsonl"
        self.agent = agent
        self.resumed = state is not None
        self.images = ImageStore(home)  # image data lives once under <home>/images
        self._history = ListDelta(state.history if state else [])
        self._info = ListDelta(state.history_info if state else [])
        self._saved = {key: _dumps(getattr(state, key) if state else {}) for key in SAVED_STATE}
        self._stream: dict[str, list[str]] = {}  # streamed pieces, joined once when written
        self._file: IO[str] | None = None
        self.redact: Redactor = getattr(agent, "redactor", None) or (
            Redactor.from_config(getattr(agent.llmclient, "config", None)))
        self.cost = state.cost if state else None  # USD of the session's priced requests
        self.failed = False
        self.closed = False  # a closed journal (its lock given up) writes nothing more
        # a resumed session comes locked (claim_session); a new one is locked at first write
        self.lock: SessionLock | None = state.lock if state is not None else None

    # ---- writing -------------------------------------------------------------------------
    def _guard(self, action: Callable[[], Any]) -> None:
        """Run a write; the first failure (disk full, read-only home) is reported and the
        journal stops, so the task goes on without it."""
        if self.failed or self.closed:
            return
        try:
            action()
        except OSError as e:
            self.failed = True
            log.warning("cannot write the session journal %s (%s); the task goes on, but this "
                        "session will not be resumable", self.path, e.strerror or e)

    def _open(self) -> IO[str]:
        if self._file is not None:
            return self._file
        if self.lock is None:
            self.lock = SessionLock(self.path)  # kept first: close() releases a half-taken one
            self.lock.acquire()
        torn = not ends_with_newline(self.path)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (kept open)
        if torn:
            self._file.write("\n")
        kind = "session_resume" if self.resumed or torn else "session_start"
        self._write({"type": kind, "id": self.id, "version": JOURNAL_VERSION,
                     "cwd": str(getattr(self.agent, "cwd", "")), "model": self._model()})
        return self._file

    def _model(self) -> str:
        return str(getattr(self.agent.llmclient, "name", "?"))

    def _write(self, record: dict) -> None:
        record.setdefault("time", time.time())
        f = self._file
        f.write(self.redact.dumps(self.images.externalize(record)) + "\n")
        f.flush()

    def write(self, record: dict) -> None:
        """Write one record now (also used for notes like model switches)."""
        self._guard(lambda: self._write_now(dict(record)))

    def _write_now(self, record: dict) -> None:
        self._open()
        self._flush_stream()
        self._write(record)

    def __call__(self, event: dict) -> None:
        kind = event.get("type")
        if kind in SKIPPED_EVENTS:
            return
        if kind in STREAM_EVENTS:
            self._stream.setdefault(kind, []).append(str(event.get("delta", "")))
            return
        if kind in RESTART_EVENTS:
            self._stream.clear()
        if kind == "usage":
            self.cost = add_cost(self.cost, event.get("cost"))
        self.write(event)
        if kind in STATE_AFTER:
            self.snapshot()

    def _flush_stream(self) -> None:
        for kind in STREAM_EVENTS:
            text = "".join(self._stream.pop(kind, []))
            if text:
                self._write({"type": kind, "text": text})

    def snapshot(self) -> None:
        """A ``state`` record: working memory, and what changed in the histories."""
        handler = getattr(self.agent, "handler", None)
        working = dict(getattr(handler, "working", {}) or {})
        open_turn = dict(getattr(self.agent, "open_turn", {}) or {})
        history = list(getattr(self.agent.llmclient, "history", []) or [])
        record: dict[str, Any] = {"type": "state"}
        for key, value in (("working", working), ("open_turn", open_turn)):
            if _dumps(value) != self._saved[key]:
                record[key] = value
                self._saved[key] = _dumps(value)
        for key, tracker, items in (("history", self._history, history),
                                    ("history_info", self._info, list(self.agent.history_info))):
            delta = tracker.delta(items)
            if delta is not None:
                record[key] = delta
        if len(record) > 1:
            self._guard(lambda: (self._open(), self._write(record)))

    def seed(self, data: dict) -> None:
        """Record a conversation loaded from a file (``--history``) as this session's start."""
        self.write({"type": "seed", "history": data.get("history") or [],
                    "history_info": data.get("history_info") or [],
                    **{key: data.get(key) or {} for key in SAVED_STATE}})
        self._history = ListDelta(data.get("history") or [])
        self._info = ListDelta(data.get("history_info") or [])
        self._saved = {key: _dumps(data.get(key) or {}) for key in SAVED_STATE}

    def close(self) -> None:
        if self._file is not None and not self.closed:
            self._guard(self._flush_stream)
            file, self._file = self._file, None
            try:
                file.close()
            except OSError as e:  # buffered bytes a full disk would not take
                if not self.failed:
                    log.warning("cannot finish the session journal %s: %s", self.path, e)
        self.closed = True
        if self.lock is not None:
            self.lock.release()


# ---- reading ---------------------------------------------------------------------------
@dataclass
class SessionState:
    """Everything a saved session holds, rebuilt from its journal."""

    id: str
    path: Path
    started: float = 0.0
    cwd: str = ""  # the working folder it was last opened with
    model: str = ""
    first_prompt: str = ""
    turns: int = 0
    tokens: int = 0
    tokens_estimated: bool = False  # some usage was counted from characters (shown "≈")
    cost: float | None = None  # USD of the priced requests; None: none was priced
    tasks: int = 0
    history: list = field(default_factory=list)
    history_info: list = field(default_factory=list)
    working: dict = field(default_factory=dict)
    open_turn: dict = field(default_factory=dict)  # what an open ask_user question keeps
    sandbox: str = ""  # the sandbox and approval modes of its last task (SPEC §11)
    approval: str = ""
    torn: list[int] = field(default_factory=list)  # line numbers that could not be read
    lock: SessionLock | None = field(default=None, repr=False, compare=False)

    @property
    def summary(self) -> str:
        return " ".join(self.first_prompt.split())[:PROMPT_PREVIEW_CHARS]


def _records(path: Path, torn: list[int]):
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                torn.append(number)
                continue
            if isinstance(record, dict):
                yield record


def _apply(state: SessionState, r: dict) -> None:
    kind = r.get("type")
    if kind in ("session_start", "session_resume"):
        state.started = state.started or float(r.get("time") or 0)
        state.cwd = str(r.get("cwd") or state.cwd)  # where it works now: the latest
        state.model = str(r.get("model") or state.model)
    elif kind == "model":
        state.model = str(r.get("name") or state.model)
    elif kind in ("model_switch", "llm_model_switch"):  # llm_…: as older journals say
        state.model = str(r.get("to") or state.model)
    elif kind == "task_start":
        state.tasks += 1
        state.first_prompt = state.first_prompt or str(r.get("prompt") or "")
        state.sandbox = str(r.get("sandbox") or state.sandbox)
        state.approval = str(r.get("approval") or state.approval)
    elif kind == "turn":
        state.turns += 1
    elif kind == "usage":
        state.tokens += int(r.get("input") or 0) + int(r.get("output") or 0)
        state.tokens_estimated = state.tokens_estimated or bool(r.get("estimated"))
        state.cost = add_cost(state.cost, r.get("cost"))
    elif kind == "state":
        for key in SAVED_STATE:
            if key in r:
                setattr(state, key, dict(r[key] or {}))
        state.history = apply_delta(state.history, r.get("history"))
        state.history_info = apply_delta(state.history_info, r.get("history_info"))
    elif kind == "seed":
        state.history = list(r.get("history") or [])
        state.history_info = list(r.get("history_info") or [])
        for key in SAVED_STATE:
            setattr(state, key, dict(r.get(key) or {}))


def load_session(path: str | Path, with_images: bool = True) -> SessionState:
    """Rebuild a session from its journal; unreadable (torn) lines are skipped and listed.
    ``with_images``: image references get their data back from ``<home>/images``."""
    state = _quiet_load(Path(path))
    if with_images:
        store = ImageStore(Path(path).parent.parent)
        state.history = store.internalize(state.history)
        state.open_turn = store.internalize(state.open_turn)  # a result may hold an image
    if state.torn:
        log.warning("session %s: skipped unreadable line(s) %s (cut off by a crash?)",
                    state.id, ", ".join(map(str, state.torn)))
    return state


def claim_session(path: str | Path) -> SessionState:
    """Lock a saved session for writing (``SessionBusy`` when another process has it), then
    load it: what is loaded is what the journal holds, and it stays ours until closed."""
    lock = SessionLock(Path(path))
    try:
        lock.acquire()
    except OSError:  # a home that cannot be written: the journal tries again and reports it
        lock = None
    state = load_session(path)
    state.lock = lock
    return state


def list_sessions(home: str | Path) -> list[SessionState]:
    """Saved sessions, newest first."""
    folder = sessions_dir(home)
    if not folder.is_dir():
        return []
    paths = sorted(folder.glob("*.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True)
    out = []
    for p in paths:
        try:
            out.append(_quiet_load(p))
        except OSError as e:
            log.warning("cannot read session %s: %s", p.name, e)
    return out


def _quiet_load(path: Path) -> SessionState:
    state = SessionState(id=path.stem, path=path)
    for record in _records(path, state.torn):
        _apply(state, record)
    return state


def find_session(home: str | Path, session_id: str) -> Path | None:
    """The journal of ``session_id`` (a unique prefix is enough)."""
    exact = sessions_dir(home) / f"{session_id}.jsonl"
    if exact.is_file():
        return exact
    matches = session_matches(home, session_id)
    return matches[0] if len(matches) == 1 else None


def session_matches(home: str | Path, prefix: str) -> list[Path]:
    """The journals whose id starts with ``prefix``."""
    folder = sessions_dir(home)
    return sorted(folder.glob(f"{glob_escape(prefix)}*.jsonl")) if folder.is_dir() else []


def read_events(path: str | Path):
    """The records of a journal in order (torn lines skipped)."""
    yield from _records(Path(path), [])


def glob_escape(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)


def latest_for_cwd(home: str | Path, cwd: str | Path) -> Path | None:
    """The most recently used session that works in ``cwd``."""
    want = str(Path(cwd).absolute())
    for state in list_sessions(home):
        if state.cwd == want:
            return state.path
    return None

