"""File tools: read, write, patch."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from tools import ToolError
from tools.code_run import fenced_blocks
from tools.fsutil import atomic_write

MAX_LINE_CHARS = 2_000  # longer lines are cut in file_read
KEYWORD_LINES_BEFORE = 3  # a keyword window starts this many lines before the match
BINARY_SNIFF_BYTES = 8_192  # a NUL byte in this prefix marks a binary file
DIR_LIST_LIMIT = 30  # entries named when a directory is passed as a file
SUGGEST_CUTOFF = 0.6  # difflib similarity for "did you mean" names
SUGGEST_DEPTH = 2  # folder levels searched for the same file name
SUGGEST_SCAN_LIMIT = 5_000  # stop the same-name search after this many entries
LARGE_WRITE_BYTES = 100_000  # file_write warns above this
NEAR_MATCH_CUTOFF = 0.6  # file_patch shows the nearest lines above this similarity
MAX_MATCH_LINES_LISTED = 10
WRITE_MODES = ("overwrite", "append", "prepend")
FILE_REF_RE = re.compile(r"\{\{file:([^{}]+?)\}\}")
FILE_REF_PARTS_RE = re.compile(r"(.+?)(?::(\d+):(\d+))?")
FILE_CONTENT_RE = re.compile(r"<file_content>(.*?)</file_content>", re.S)


# --- reading -------------------------------------------------------------------------------


def file_read(
    path: Path,
    start: int = 1,
    count: int = 200,
    keyword: str | None = None,
    show_linenos: bool = True,
) -> str:
    """Lines of a text file with a ``[FILE] N lines`` header and a PARTIAL note."""
    path = Path(path)
    lines = _read_lines(path)
    total = len(lines)
    start, count = max(1, int(start)), max(1, int(count))
    notes = []
    if keyword:
        hit = _find_keyword(lines, keyword)
        if hit is None:
            notes.append(f"[NOTE] keyword {keyword!r} not found; showing from line {start}")
        else:
            start = max(1, hit + 1 - KEYWORD_LINES_BEFORE)
    if total and start > total:
        raise ToolError(f"start={start} is past the end of {path} ({total} lines)")
    window = lines[start - 1 : start - 1 + count]
    end = start - 1 + len(window)
    out = [f"[FILE] {total} lines"] + notes
    for number, line in enumerate(window, start):
        out.append(f"{number}|{_cut(line)}" if show_linenos else _cut(line))
    if total and (start > 1 or end < total):
        more = f"; use start={end + 1} to read more" if end < total else ""
        out.append(f"[PARTIAL] showing lines {start}-{end} of {total}{more}")
    return "\n".join(out)


def _read_lines(path: Path) -> list[str]:
    _check_file(path)
    raw = path.read_bytes()
    if b"\0" in raw[:BINARY_SNIFF_BYTES]:
        raise ToolError(
            f"{path} is a binary file ({len(raw)} bytes); inspect it with code_run instead"
        )
    text = raw.decode("utf-8", errors="replace").replace("\r\n", "\n")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _find_keyword(lines: list[str], keyword: str) -> int | None:
    needle = keyword.lower()
    for index, line in enumerate(lines):
        if needle in line.lower():
            return index
    return None


def _cut(line: str) -> str:
    if len(line) <= MAX_LINE_CHARS:
        return line
    return f"{line[:MAX_LINE_CHARS]} ... [TRUNCATED] ({len(line)} chars)"


def _check_file(path: Path) -> None:
    """Raise a ToolError the model can act on unless ``path`` is an existing file."""
    if path.is_dir():
        entries = sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir())
        shown = ", ".join(entries[:DIR_LIST_LIMIT]) or "(empty)"
        if len(entries) > DIR_LIST_LIMIT:
            shown += f", ... ({len(entries)} entries)"
        raise ToolError(f"{path} is a directory, not a file; it contains: {shown}")
    if not path.exists():
        suggestions = suggest_paths(path)
        hint = f" Did you mean: {', '.join(suggestions)}?" if suggestions else ""
        raise ToolError(f"file not found: {path}.{hint}")


def suggest_paths(path: Path, limit: int = 3) -> list[str]:
    """Existing paths close to a missing ``path``: similar names beside it, same name nearby."""
    path = Path(path)
    found: list[Path] = []
    if path.parent.is_dir():
        names = [p.name for p in path.parent.iterdir()]
        close = difflib.get_close_matches(path.name, names, n=limit, cutoff=SUGGEST_CUTOFF)
        found += [path.parent / name for name in close]
    root = path.parent
    while not root.is_dir() and root != root.parent:
        root = root.parent
    if root == path.parent and root.parent != root:
        root = root.parent
    found += _same_name_below(root, path.name.lower(), SUGGEST_DEPTH)
    unique = list(dict.fromkeys(_display(p) for p in found if p != path))
    return unique[:limit]


def _same_name_below(root: Path, name: str, depth: int) -> list[Path]:
    hits: list[Path] = []
    level = [root]
    scanned = 0
    for _ in range(depth + 1):
        next_level = []
        for folder in level:
            try:
                entries = list(folder.iterdir())
            except OSError:
                continue  # unreadable folder: nothing to suggest from it
            scanned += len(entries)
            hits += [p for p in entries if p.name.lower() == name]
            next_level += [p for p in entries if p.is_dir() and not p.name.startswith(".")]
        if scanned > SUGGEST_SCAN_LIMIT:
            break
        level = next_level
    return hits


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


# --- writing -------------------------------------------------------------------------------

def file_write(
    path: Path, content: str, mode: str = "overwrite", refs_base: Path | None = None
) -> dict:
    """Write, append or prepend ``content`` atomically, keeping the file's newline style.

    With ``refs_base``, ``{{file:path:start:end}}`` references are expanded first.
    """
    path = Path(path)
    if mode not in WRITE_MODES:
        raise ToolError(f"unknown mode {mode!r}; use one of: {', '.join(WRITE_MODES)}")
    if path.is_dir():
        raise ToolError(f"{path} is a directory; give a file path to write")
    if refs_base is not None:
        content = expand_file_refs(content, Path(refs_base))
    old = path.read_bytes() if path.exists() else b""
    text = content.replace("\r\n", "\n")
    if _is_crlf(old.decode("utf-8", errors="replace")):
        text = text.replace("\n", "\r\n")
    data = _encode(text)
    new = {"overwrite": data, "append": old + data, "prepend": data + old}[mode]
    atomic_write(path, new)
    result = {
        "status": "success", "path": str(path), "mode": mode,
        "bytes": len(data), "lines": _count_lines(text),
    }
    if len(data) > LARGE_WRITE_BYTES:
        result["warning"] = (
            f"very large write ({len(data)} bytes); prefer smaller files, and edit existing "
            "files with file_patch instead of rewriting them"
        )
    return result


def _is_crlf(text: str) -> bool:
    crlf = text.count("\r\n")
    return crlf > 0 and crlf * 2 >= text.count("\n")


def _encode(text: str) -> bytes:
    try:
        return text.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", errors="replace")


def _count_lines(text: str) -> int:
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def expand_file_refs(content: str, base: Path) -> str:
    """Replace ``{{file:path:start:end}}`` (1-based, inclusive) and ``{{file:path}}``."""
    return FILE_REF_RE.sub(lambda m: _expand_ref(m.group(1), Path(base)), content)


def _expand_ref(spec: str, base: Path) -> str:
    ref = "{{file:" + spec + "}}"
    parts = FILE_REF_PARTS_RE.fullmatch(spec.strip())
    target = base / parts.group(1).strip()
    try:
        lines = _read_lines(target)
    except ToolError as e:
        raise ToolError(f"bad file reference {ref}: {e}") from e
    if parts.group(2) is None:
        return "\n".join(lines)
    first, last = int(parts.group(2)), int(parts.group(3))
    if not 1 <= first <= last <= len(lines):
        raise ToolError(
            f"bad file reference {ref}: lines {first}-{last} are outside 1-{len(lines)} "
            f"of {target}"
        )
    return "\n".join(lines[first - 1 : last])


def content_from_reply(text: str) -> str | None:
    """The last ``<file_content>`` block of a reply, else its last fenced block, else None."""
    blocks = FILE_CONTENT_RE.findall(text or "")
    if blocks:
        body = blocks[-1]
        return body[1:] if body.startswith("\n") else body
    fences = fenced_blocks(text or "")
    if not fences:
        return None
    body = fences[-1][1]
    return body + "\n" if body else body


# --- patching ------------------------------------------------------------------------------

def file_patch(path: Path, old_content: str, new_content: str) -> dict:
    """Replace the one occurrence of ``old_content``; refuse zero or several matches."""
    path = Path(path)
    _check_file(path)
    if not old_content:
        raise ToolError("old_content is empty; copy the exact lines to replace from file_read")
    text = path.read_bytes().decode("utf-8", errors="surrogateescape")
    crlf = _is_crlf(text)
    norm = text.replace("\r\n", "\n") if crlf else text
    old = old_content.replace("\r\n", "\n")
    new = new_content.replace("\r\n", "\n")
    count = norm.count(old)
    if count == 0:
        raise ToolError(_no_match_message(path, norm, old))
    if count > 1:
        raise ToolError(_many_matches_message(path, norm, old, count))
    at = norm.index(old)
    out = norm[:at] + new + norm[at + len(old) :]
    atomic_write(path, _encode(out.replace("\n", "\r\n") if crlf else out))
    return {
        "status": "success", "path": str(path), "replaced_lines": _count_lines(old),
        "at_line": norm.count("\n", 0, at) + 1, "new_lines": _count_lines(new),
    }


def _no_match_message(path: Path, text: str, old: str) -> str:
    message = (
        f"old_content was not found in {path}; nothing was changed. Re-read the file with "
        "file_read and copy the exact text to replace, including indentation and whitespace."
    )
    near = _nearest_lines(text, old)
    if near:
        message += f"\nThe closest lines in the file are:\n{near}"
    return message


def _nearest_lines(text: str, old: str) -> str | None:
    old_lines = old.split("\n")
    probe = max(old_lines, key=lambda line: len(line.strip())).strip()
    if not probe:
        return None
    lines = text.split("\n")
    stripped = [line.strip() for line in lines]
    close = difflib.get_close_matches(probe, stripped, n=1, cutoff=NEAR_MATCH_CUTOFF)
    if not close:
        return None
    first = stripped.index(close[0]) - [s.strip() for s in old_lines].index(probe)
    lo, hi = max(0, first - 1), min(len(lines), first + len(old_lines) + 1)
    return "\n".join(f"{n}|{_cut(lines[n - 1])}" for n in range(lo + 1, hi + 1))


def _many_matches_message(path: Path, text: str, old: str, count: int) -> str:
    starts = []
    pos = text.find(old)
    while pos != -1 and len(starts) < MAX_MATCH_LINES_LISTED:
        starts.append(str(text.count("\n", 0, pos) + 1))
        pos = text.find(old, pos + len(old))
    return (
        f"old_content matches {count} places in {path} (starting at lines "
        f"{', '.join(starts)}); nothing was changed. Include more surrounding lines in "
        "old_content so that it matches exactly one place."
    )
