"""Layered long-term memory (L0–L4): the store, the system prompt, ``ga memory``."""

from __future__ import annotations

from .lint import LintProblem
from .prompt import (
    MIN_LTU_TURN,
    build_system_prompt,
    insight_reminder,
    long_term_update_prompt,
    memory_read_tip,
)
from .store import MemoryStore

__all__ = [
    "MIN_LTU_TURN",
    "LintProblem",
    "MemoryStore",
    "build_system_prompt",
    "insight_reminder",
    "long_term_update_prompt",
    "memory_read_tip",
]
