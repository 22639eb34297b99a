"""``ga memory lint``: deterministic checks that the memory layers still fit together.

Rules: L1 points only at files that exist; every L3 SOP is indexed in L1; L1 stays within
``L1_MAX_LINES``; L2 has no duplicated entries; no secret-looking string and no key the
runtime knows (``redactor``: config and environment) in any layer, L4 included; no temp file
left by an interrupted write. ``fix=True`` repairs the mechanical ones (dangling L1 pointers
removed, missing index entries added, duplicate L2 lines removed, missing L1/L2 re-seeded,
stale temp files removed); the others need a person: they are reported with ``fixed=False``.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from llmcore.secrets import Redactor, find_secrets
from tools.fsutil import TEMP_SUFFIX, atomic_write, is_temp_name

from .store import MemoryStore

L1_MAX_LINES = 30
L1_MAX_LINE_CHARS = 120  # an index line longer than this gets a "| name" continuation line
SCANNED_SUFFIXES = (".md", ".py", ".txt", ".json", ".jsonl", ".yaml", ".yml")
# ASCII word characters only: Chinese text runs into names without spaces ("见plan_sop").
_FILE_PTR = re.compile(r"(?<![\w/.-])([\w-]+(?:/[\w.-]+)*\.(?:md|py|txt|json))(?!\w)", re.A)
_SOP_PTR = re.compile(r"(?<![\w/.-])([\w-]*_sop)(?!\w|\.\w)", re.A)
STALE_TEMP_SECONDS = 60  # a write's temp file this old was left by a writer that was killed
_ANNOTATION = r"(?:\s*(?:\([^)\n]*\)|（[^）\n]*）))?"


@dataclass
class LintProblem:
    path: Path
    line: int  # 1-based; 0 for the whole file
    message: str
    fixed: bool = False

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else str(self.path)
        return f"{where}: {self.message}" + (" [fixed]" if self.fixed else "")


def l1_pointers(l1_text: str) -> list[tuple[int, str]]:
    """(line number, token) for every file-like name the L1 index mentions."""
    found = []
    for no, line in enumerate(l1_text.splitlines(), 1):
        for pat in (_FILE_PTR, _SOP_PTR):
            found.extend((no, m.group(1)) for m in pat.finditer(line))
    return found


def _resolves(mem: Path, token: str) -> bool:
    if "." in Path(token).name:
        return (mem / token).exists()
    return any((mem / f"{token}{ext}").exists() for ext in (".md", ".py", ""))


def _is_indexed(l1_text: str, stem: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(stem)}(?![\w-])", l1_text, re.A) is not None


def _drop_pointer(line: str, token: str) -> str | None:
    """The line without ``token`` (and its annotation); None when nothing is left."""
    pat = re.compile(rf"(?<![\w/.-]){re.escape(token)}(?!\w){_ANNOTATION}", re.A)
    out = pat.sub("", line)
    while re.search(r"\|\s*\|", out):
        out = re.sub(r"\|\s*\|", "|", out)
    out = re.sub(r"([:：])\s*\|\s*", r"\1 ", out)
    out = re.sub(r"\s*\|\s*$", "", out)
    out = re.sub(r"(?<=\S)[ \t]{2,}", " ", out).rstrip()
    if re.fullmatch(r"\s*(?:[^:：|]*[:：])?\s*\|?\s*", out):
        return None
    return out


def _add_to_index(lines: list[str], stem: str) -> None:
    l3 = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("L3")), None)
    if l3 is None:
        rules = next((i for i, ln in enumerate(lines) if ln.startswith("[RULES]")), len(lines))
        while rules > 0 and not lines[rules - 1].strip():
            rules -= 1
        lines.insert(rules, f"L3: {stem}")
        return
    end = l3
    while end + 1 < len(lines) and lines[end + 1].lstrip().startswith("|"):
        end += 1
    last = lines[end].rstrip()
    if last.endswith((":", "：")):
        lines[end] = f"{last} {stem}"
    elif len(last) + len(stem) + 3 <= L1_MAX_LINE_CHARS:
        lines[end] = f"{last} | {stem}"
    else:
        lines.insert(end + 1, f"| {stem}")


def _fix_l1(lines: list[str], dangling: list[tuple[int, str]], stems: list[str]) -> list[str]:
    fixed: list[str | None] = list(lines)
    for no, tok in dangling:
        line = fixed[no - 1]
        if line is not None:
            fixed[no - 1] = _drop_pointer(line, tok)
    out = [ln for ln in fixed if ln is not None]
    for stem in stems:
        _add_to_index(out, stem)
    return out


def _check_l1(store: MemoryStore, fix: bool) -> list[LintProblem]:
    path, mem = store.l1_path, store.dir
    text = store.insight()
    problems: list[LintProblem] = []
    lines = text.splitlines()
    dangling = [(no, tok) for no, tok in l1_pointers(text) if not _resolves(mem, tok)]
    for no, tok in dangling:
        problems.append(LintProblem(path, no, f"L1 points at {tok!r}, which does not exist",
                                    fixed=fix))
    missing = [p for p in store.list_sops() if not _is_indexed(text, p.stem)]
    for p in missing:
        problems.append(LintProblem(path, 0, f"SOP {p.name} is not indexed in L1", fixed=fix))
    if fix and (dangling or missing):
        lines = _fix_l1(lines, dangling, [p.stem for p in missing])
        problems += _write_fix(path, "\n".join(lines) + "\n", problems)
    if len(lines) > L1_MAX_LINES:
        problems.append(LintProblem(
            path, L1_MAX_LINES + 1,
            f"L1 has {len(lines)} lines (max {L1_MAX_LINES}): move details to L2/L3"))
    return problems


def _check_l2(store: MemoryStore, fix: bool) -> list[LintProblem]:
    path = store.l2_path
    lines = store.global_mem().splitlines()
    seen: set[str] = set()
    keep: list[str] = []
    problems: list[LintProblem] = []
    for no, line in enumerate(lines, 1):
        key = " ".join(line.split())
        if not key or key in ("---", "```") or key not in seen:
            seen.add(key)
            keep.append(line)
            continue
        header = key.startswith("#")
        problems.append(LintProblem(path, no, f"duplicated L2 entry: {key[:60]!r}",
                                    fixed=fix and not header))
        if header:
            keep.append(line)
    if fix and len(keep) < len(lines):
        problems += _write_fix(path, "\n".join(keep) + "\n", problems)
    return problems


def _write_fix(path: Path, text: str, problems: list[LintProblem]) -> list[LintProblem]:
    """Write a repaired file; when it cannot be written, ``problems`` stay unfixed and one
    more says why and what to do."""
    try:
        atomic_write(path, text)
    except OSError as e:
        for p in problems:
            p.fixed = False
        if isinstance(e, PermissionError):
            why = "the file is read-only: make it writable (chmod u+w)"
        else:
            why = f"{e.strerror or e}: make it writable"
        return [LintProblem(path, 0, f"cannot fix it: {why} and run ga memory lint --fix again")]
    return []


def _scanned_files(mem: Path) -> list[Path]:
    return sorted(p for p in mem.rglob("*")
                  if p.is_file() and p.suffix in SCANNED_SUFFIXES and not p.name.startswith("."))


def _check_secrets(store: MemoryStore, redactor: Redactor | None) -> list[LintProblem]:
    problems = []
    for path in _scanned_files(store.dir):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        hits = find_secrets(text)
        shaped = {no for no, _kind in hits}
        hits += [(no, "a key from your config or environment")
                 for no in (redactor.lines(text) if redactor else []) if no not in shaped]
        for no, kind in sorted(hits):
            problems.append(LintProblem(
                path, no, f"secret-looking string ({kind}): remove it and rotate the key"))
    return problems


def _check_present(store: MemoryStore, fix: bool) -> list[LintProblem]:
    missing = [p for p in (store.l1_path, store.l2_path) if not p.exists()]
    if fix and missing:
        store.seed()
    return [LintProblem(p, 0, "missing memory file", fixed=fix) for p in missing]


def _check_temp_files(store: MemoryStore, fix: bool) -> list[LintProblem]:
    problems = []
    now = time.time()
    for path in sorted(store.dir.rglob("*" + TEMP_SUFFIX)):
        try:
            age = now - path.stat().st_mtime
        except OSError:
            continue  # its writer finished meanwhile
        if not is_temp_name(path.name) or age < STALE_TEMP_SECONDS:
            continue
        if fix:
            path.unlink(missing_ok=True)
        problems.append(LintProblem(
            path, 0, f"temp file left by an interrupted write ({int(age)} s old)", fixed=fix))
    return problems


def lint_store(store: MemoryStore, fix: bool = False,
               redactor: Redactor | None = None) -> list[LintProblem]:
    """Run every rule; with ``fix`` repair the mechanical problems in place. ``redactor``
    knows the keys of the config and the environment, reported wherever they appear."""
    problems = _check_present(store, fix)
    if not store.dir.is_dir():
        return problems
    problems += _check_l1(store, fix)
    problems += _check_l2(store, fix)
    problems += _check_secrets(store, redactor)
    problems += _check_temp_files(store, fix)
    return problems
