"""A readable per-session log of prompts and responses, with API keys redacted; and
``Failures``, which reports a failing write into the home once and lets the caller go on."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .base import LLMResponse
from .images import describe

if TYPE_CHECKING:
    from .secrets import Redactor

log = logging.getLogger("ga.llm")


def _block_text(b: dict, dumps: Callable[[Any], str]) -> str:
    """One block as log text; its JSON parts through ``dumps`` (masked as data)."""
    if b["type"] == "text":
        return b["text"]
    if b["type"] == "thinking":
        return f"[thinking] {b.get('thinking', '')}"
    if b["type"] == "tool_use":
        return f"[tool_use {b['id']}] {b['name']} {dumps(b.get('input'))}"
    if b["type"] == "image":
        return f"[image {b.get('name') or ''} {describe(b)}]"
    content = b.get("content")
    if isinstance(content, list):
        text = "\n".join(_block_text(x, dumps) for x in content
                         if isinstance(x, dict) and "type" in x)
    else:
        text = content if isinstance(content, str) else dumps(content)
    return f"[tool_result {b.get('tool_use_id')}] {text}"


class SessionLog:
    """Appends to ``<home>/logs/llm-<session id>.log`` (``llm-<time>-<pid>.log`` until the
    session id is set); the file opens on each write."""

    def __init__(self, log_dir: Path, redact: Redactor):
        self.log_dir = log_dir
        self.session_id: str | None = None
        self._fallback = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        self.redact = redact
        self.failed = False
        self._system_logged: str | None = None

    @property
    def path(self) -> Path:
        return self.log_dir / f"llm-{self.session_id or self._fallback}.log"

    def _write(self, text: str) -> None:
        if self.failed:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(self.redact(text))
        except OSError as e:  # a log that cannot be written must never stop the agent
            self.failed = True
            log.warning("cannot write the model log %s (%s); going on without it",
                        self.path, e.strerror or e)

    def request(self, label: str, system: str | None, new: list[dict]) -> None:
        parts = [f"\n===== {time.strftime('%H:%M:%S')} request → {label} =====\n"]
        if system and system != self._system_logged:
            self._system_logged = system
            parts.append(f"[system]\n{system}\n")
        for m in new:
            body = "\n".join(_block_text(b, self.redact.dumps) for b in m["content"])
            parts.append(f"[{m['role']}]\n{body}\n")
        self._write("".join(parts))

    def response(self, resp: LLMResponse) -> None:
        parts = ["----- response -----\n"]
        if resp.thinking:
            parts.append(f"[thinking]\n{resp.thinking}\n")
        parts.append(f"{resp.content}\n")
        for tc in resp.tool_calls:
            parts.append(f"[tool_call {tc.id}] {tc.function.name} "
                         f"{self._arguments(tc.function.arguments)}\n")
        u = resp.usage
        parts.append(f"[stop={resp.stop_reason} in={u.input} cached={u.cached} out={u.output}]\n")
        self._write("".join(parts))

    def _arguments(self, raw: str) -> str:
        """A call's JSON arguments masked as data (a key with ``"`` is escaped in JSON text)."""
        try:
            return self.redact.dumps(json.loads(raw))
        except (ValueError, RecursionError):
            return raw  # not JSON: masked as text like the rest

    def note(self, text: str) -> None:
        self._write(f"[{time.strftime('%H:%M:%S')}] {text}\n")


class Failures:
    """Writes the runtime may lose (SPEC §4 "The home can fail"): the first failure of each
    kind is reported on stderr (the ``ga`` logger), later ones are quiet."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def report(self, what: str, error: BaseException) -> None:
        if what in self.seen:
            return
        self.seen.add(what)
        reason = getattr(error, "strerror", None) or error
        logging.getLogger("ga").warning("%s failed (%s: %s); going on without it", what,
                                        type(error).__name__, reason)

    def attempt(self, what: str, write: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
        """Run ``write``; False (reported once) when it fails with an OSError."""
        try:
            write(*args, **kwargs)
        except OSError as e:
            self.report(what, e)
            return False
        return True
