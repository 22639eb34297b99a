"""A readable per-session log of prompts and responses, with API keys redacted."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .base import LLMResponse
from .secrets import redact


def _block_text(b: dict) -> str:
    if b["type"] == "text":
        return b["text"]
    if b["type"] == "thinking":
        return f"[thinking] {b.get('thinking', '')}"
    if b["type"] == "tool_use":
        return f"[tool_use {b['id']}] {b['name']} {json.dumps(b.get('input'), ensure_ascii=False)}"
    content = b.get("content")
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    return f"[tool_result {b.get('tool_use_id')}] {text}"


class SessionLog:
    """Appends to ``<home>/logs/llm-<session id>.log`` (``llm-<time>-<pid>.log`` until the
    session id is set); the file opens on each write."""

    def __init__(self, log_dir: Path, secrets: list[str | None]):
        self.log_dir = log_dir
        self.session_id: str | None = None
        self._fallback = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        self.secrets = secrets
        self._system_logged: str | None = None

    @property
    def path(self) -> Path:
        return self.log_dir / f"llm-{self.session_id or self._fallback}.log"

    def _write(self, text: str) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(redact(text, self.secrets))
        except OSError:
            return  # a log that cannot be written must never stop the agent

    def request(self, label: str, system: str | None, new: list[dict]) -> None:
        parts = [f"\n===== {time.strftime('%H:%M:%S')} request → {label} =====\n"]
        if system and system != self._system_logged:
            self._system_logged = system
            parts.append(f"[system]\n{system}\n")
        for m in new:
            body = "\n".join(_block_text(b) for b in m["content"])
            parts.append(f"[{m['role']}]\n{body}\n")
        self._write("".join(parts))

    def response(self, resp: LLMResponse) -> None:
        parts = ["----- response -----\n"]
        if resp.thinking:
            parts.append(f"[thinking]\n{resp.thinking}\n")
        parts.append(f"{resp.content}\n")
        for tc in resp.tool_calls:
            parts.append(f"[tool_call {tc.id}] {tc.function.name} {tc.function.arguments}\n")
        u = resp.usage
        parts.append(f"[stop={resp.stop_reason} in={u.input} cached={u.cached} out={u.output}]\n")
        self._write("".join(parts))

    def note(self, text: str) -> None:
        self._write(f"[{time.strftime('%H:%M:%S')}] {text}\n")
