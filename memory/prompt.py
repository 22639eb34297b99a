"""System prompt assembly and the memory-related prompt texts the handler sends.

System prompt = role prompt + today's date + the structure note (where L0–L4 live, with
this home's real paths) + the L1 insight + the profile's ``extra_sys_prompt``.
"""

from __future__ import annotations

from datetime import date

from .store import MemoryStore
from .texts import WEEKDAYS, text

MIN_LTU_TURN = 10  # start_long_term_update is refused before this turn


def structure_note(store: MemoryStore, lang: str = "en") -> str:
    """The fixed note saying where each memory layer lives."""
    return text(lang, "structure").format(
        mem=store.dir, l0=store.l0_path.name, l1=store.l1_path.name, l2=store.l2_path.name,
        l4=store.l4_dir.name)


def date_line(lang: str = "en", today: date | None = None) -> str:
    day = today or date.today()
    names = WEEKDAYS.get(lang, WEEKDAYS["en"])
    return text(lang, "today").format(date=day.isoformat(), weekday=names[day.weekday()])


def build_system_prompt(store: MemoryStore, lang: str = "en", extra: str = "",
                        today: date | None = None) -> str:
    """The whole system prompt for a new session."""
    parts = [
        text(lang, "role"),
        date_line(lang, today),
        structure_note(store, lang),
        store.insight().strip(),
    ]
    if extra and extra.strip():
        parts.append(text(lang, "extra").format(extra=extra.strip()))
    return "\n\n".join(p for p in parts if p)


def insight_reminder(store: MemoryStore, lang: str = "en") -> str:
    """The L1 text the handler re-injects every ``insight_every`` turns ("" without L1)."""
    insight = store.insight().strip()
    if not insight:
        return ""
    return text(lang, "insight_reminder").format(insight=insight)


def memory_read_tip(lang: str = "en") -> str:
    """The tip ``file_read`` adds after reading a memory or SOP file."""
    return text(lang, "read_tip")


def long_term_update_prompt(store: MemoryStore, turn: int,
                            lang: str = "en") -> tuple[bool, str]:
    """(False, refusal) before turn ``MIN_LTU_TURN``; else (True, instructions + L0 text)."""
    if turn < MIN_LTU_TURN:
        return False, text(lang, "ltu_refused").format(min_turn=MIN_LTU_TURN, turn=turn)
    l0_text = store.l0_sop().strip()
    if not l0_text:
        return True, text(lang, "ltu_missing_l0").format(path=store.l0_path)
    return True, text(lang, "ltu_instructions").format(
        l0=store.l0_path, l1=store.l1_path, l2=store.l2_path, mem=store.dir, l0_text=l0_text)
