"""The layered long-term memory store: paths, reads, atomic writes, access stats.

Layout inside ``<home>/memory/``: L0 ``memory_management_sop.md``, L1
``global_mem_insight.txt``, L2 ``global_mem.txt``, L3 other ``*.md``/``*.py`` files,
L4 ``L4_raw_sessions/``. Files, not models: nothing here talks to an LLM.
"""

from __future__ import annotations

import io
import json
import logging
import os
from datetime import date
from pathlib import Path

from tools.fslock import file_lock
from tools.fsutil import atomic_write, open_regular

from .texts import L1_TEMPLATE, L2_TEMPLATE

L0_NAME = "memory_management_sop.md"
L1_NAME = "global_mem_insight.txt"
L2_NAME = "global_mem.txt"
STATS_NAME = "file_access_stats.json"
L4_DIRNAME = "L4_raw_sessions"
L4_MAX_SESSIONS = 500  # retention: older archived sessions are pruned
SEEDED_MANIFEST = ".starter_sops.json"  # starter SOPs ever installed: a deleted one stays gone
SOP_SUFFIXES = (".md", ".py")
NON_SOP_NAMES = frozenset({L1_NAME, L2_NAME, STATS_NAME})

__all__ = ["MemoryStore", "bundled_sop_dir"]

log = logging.getLogger("ga.memory")


def bundled_sop_dir() -> Path:
    """The ``sop/`` folder shipped with the package (starter SOPs)."""
    return Path(__file__).resolve().parent.parent / "sop"


class MemoryStore:
    """Reads and writes one home's ``memory/`` folder."""

    def __init__(self, home: Path | str, l4_keep: int = L4_MAX_SESSIONS):
        self.home = Path(home).expanduser()
        self.dir = self.home / "memory"
        self.l4_keep = l4_keep
        self._stats_failed = False  # a failed stats write is reported once per store
        self._sop_dir = str(bundled_sop_dir())  # resolved, for is_memory_file

    # ---- paths -------------------------------------------------------------------
    @property
    def l0_path(self) -> Path:
        return self.dir / L0_NAME

    @property
    def l1_path(self) -> Path:
        return self.dir / L1_NAME

    @property
    def l2_path(self) -> Path:
        return self.dir / L2_NAME

    @property
    def l4_dir(self) -> Path:
        return self.dir / L4_DIRNAME

    @property
    def stats_path(self) -> Path:
        return self.dir / STATS_NAME

    # ---- seeding -----------------------------------------------------------------
    def seed(self, lang: str = "en") -> list[Path]:
        """Create what is missing: L1, L2, L0 and the starter SOPs. Never overwrites.

        A starter SOP the user deleted is not brought back; one added by an upgrade is.
        """
        created: list[Path] = []
        self.dir.mkdir(parents=True, exist_ok=True)
        for path, content in ((self.l1_path, L1_TEMPLATE.get(lang, L1_TEMPLATE["en"])),
                              (self.l2_path, L2_TEMPLATE)):
            if not path.exists():
                atomic_write(path, content)
                created.append(path)
        installed = self._seeded_names()
        for src in sorted(bundled_sop_dir().glob("*.md")):
            dest = self.dir / src.name
            if dest.exists() or src.name in installed:
                continue
            atomic_write(dest, src.read_bytes())
            created.append(dest)
        names = installed | {p.name for p in bundled_sop_dir().glob("*.md")}
        if names != installed:
            atomic_write(self.dir / SEEDED_MANIFEST, json.dumps(sorted(names), indent=1) + "\n")
        return created

    def _seeded_names(self) -> set[str]:
        try:
            data = json.loads((self.dir / SEEDED_MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return set()
        return {str(n) for n in data} if isinstance(data, list) else set()

    # ---- reads -------------------------------------------------------------------
    def _read(self, path: Path) -> str:
        try:
            with open_regular(path) as f:
                return io.TextIOWrapper(f, encoding="utf-8", errors="replace").read()
        except OSError:
            return ""

    def insight(self) -> str:
        """L1 text, "" when missing."""
        return self._read(self.l1_path)

    def global_mem(self) -> str:
        """L2 text, "" when missing."""
        return self._read(self.l2_path)

    def l0_sop(self) -> str:
        """L0 text: the home's copy, else the bundled one, else ""."""
        return self._read(self.l0_path) or self._read(bundled_sop_dir() / L0_NAME)

    def list_sops(self) -> list[Path]:
        """L3 files (``*.md``/``*.py`` at the top of the memory dir), L0 included."""
        if not self.dir.is_dir():
            return []
        return sorted(p for p in self.dir.iterdir()
                      if p.is_file() and p.suffix in SOP_SUFFIXES
                      and p.name not in NON_SOP_NAMES and not p.name.startswith("."))

    def is_memory_file(self, path: Path | str) -> bool:
        """True for a file inside the memory dir or a bundled SOP (links followed)."""
        real = os.path.realpath(os.path.expanduser(path))
        return any(real == root or real.startswith(root + os.sep)
                   for root in (os.path.realpath(self.dir), self._sop_dir))

    # ---- writes ------------------------------------------------------------------
    def _target(self, name: str) -> Path:
        p = (self.dir / name).resolve()
        if self.dir.resolve() not in p.parents:
            raise ValueError(f"{name!r} is outside the memory folder")
        return p

    def append(self, name: str, text: str) -> Path:
        """Append ``text`` to a memory file (created if missing), on its own line."""
        path = self._target(name)
        with file_lock(path):
            old = self._read_for_update(path)
            sep = "" if not old or old.endswith("\n") else "\n"
            _write_back(path, old + sep + text + ("" if text.endswith("\n") else "\n"))
        return path

    def patch(self, name: str, old: str, new: str) -> Path:
        """Replace exactly one occurrence of ``old``; ValueError when 0 or several match."""
        path = self._target(name)
        with file_lock(path):
            content = self._read_for_update(path)
            found = content.count(old) if old else 0
            if found != 1:
                raise ValueError(
                    f"{name}: expected exactly one match of the old text, found {found}")
            _write_back(path, content.replace(old, new, 1))
        return path

    @staticmethod
    def _read_for_update(path: Path) -> str:
        """A file about to be rewritten: "" only when it is missing (any other failure is
        raised, so an unreadable file is never replaced); bytes that are not UTF-8 kept."""
        try:
            with open_regular(path) as f:
                return f.read().decode("utf-8", errors="surrogateescape")
        except FileNotFoundError:
            return ""

    # ---- access stats ------------------------------------------------------------
    def _stats_key(self, path: Path | str) -> str:
        p = Path(path).expanduser().resolve()
        mem = self.dir.resolve()
        return p.relative_to(mem).as_posix() if mem in p.parents else p.name

    def access_stats(self) -> dict:
        """``{name: {"count": int, "last": "YYYY-MM-DD"}}``; {} when missing or unreadable."""
        try:
            data = json.loads(self._read(self.stats_path))
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}

    def record_access(self, path: Path | str, today: date | None = None) -> None:
        """Count one read of a memory file (count + last date), atomically and locked.

        Stats are a convenience: when they cannot be written (a full disk, a read-only
        home) that is reported once and the read goes on.
        """
        try:
            self._count_access(self._stats_key(path), today or date.today())
        except OSError as e:
            if not self._stats_failed:
                self._stats_failed = True
                log.warning("cannot update memory access stats %s: %s; going on without them",
                            self.stats_path, e)

    def _count_access(self, key: str, today: date) -> None:
        with file_lock(self.stats_path):
            stats = self.access_stats()
            entry = stats.get(key) if isinstance(stats.get(key), dict) else {}
            count = entry.get("count", 0)
            stats[key] = {
                "count": (count if isinstance(count, int) else 0) + 1,
                "last": today.isoformat(),
            }
            text = json.dumps(stats, indent=2, ensure_ascii=False, sort_keys=True) + "\n"
            atomic_write(self.stats_path, text)


def _write_back(path: Path, text: str) -> None:
    atomic_write(path, text.encode("utf-8", errors="surrogateescape"))
