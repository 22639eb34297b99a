"""File tools: read, write, patch."""

from __future__ import annotations

import difflib
import os
import re
import threading
import time
from bisect import bisect_right
from collections.abc import Callable
from itertools import accumulate
from pathlib import Path

from llmcore import images
from tools import ToolError, lines, nearmatch
from tools.code_run import fenced_blocks
from tools.fslock import file_lock
from tools.fsutil import Target, atomic_write, open_regular

KEEP_OLD = {"overwrite": "", "append": "before", "prepend": "after"}  # atomic_write's keep
MAX_LINE_CHARS = 2_000  # longer lines are cut in file_read
READ_MAX_CHARS = 15_000  # file_read shows whole lines up to about this much text
KEYWORD_LINES_BEFORE = 3  # a keyword window starts this many lines before the match
IMAGE_SNIFF_BYTES = 16  # enough to tell PNG, JPEG, GIF and WebP by their signature
BINARY_SNIFF_BYTES = 8_192  # a NUL byte in this prefix marks a binary file
DIR_LIST_LIMIT = 30  # entries named when a directory is passed as a file
SUGGEST_CUTOFF = 0.6  # difflib similarity for "did you mean" names
SUGGEST_SCAN_LIMIT = 5_000  # "did you mean" reads at most this many names of a folder
SUGGEST_SECONDS = 0.2  # "did you mean" gives up looking after this long
LARGE_WRITE_BYTES = 100_000  # file_write warns above this
NEWLINE_SNIFF_BYTES = 65_536  # a file's newline style is judged from this much of its head
MAX_MATCH_LINES_LISTED = 10
WRITE_MODES = ("overwrite", "append", "prepend")
FILE_REF_RE = re.compile(r"\{\{file:([^{}]+?)\}\}")
FILE_REF_PARTS_RE = re.compile(r"(.+?)(?::(\d+):(\d+))?")
FILE_CONTENT_RE = re.compile(r"<file_content>(.*?)</file_content>", re.S)
UNESCAPED_NOTE = ("old_content matched the file with its escaped runtime markers read as the "
                  "real characters; the same markers in new_content were written as real ones")


# --- reading -------------------------------------------------------------------------------


def file_read(
    path: Path,
    start: int = 1,
    count: int = 200,
    keyword: str | None = None,
    show_linenos: bool = True,
    max_chars: int = READ_MAX_CHARS,
    base: Path | None = None,
    redact: Callable[[str], str] | None = None,
) -> str:
    """Lines of a text file with a ``[FILE] N lines`` header and a PARTIAL note.

    Streams: only the lines shown are held, so memory is bounded for any file size. The
    window stops early, at a whole line, when the shown text would pass ``max_chars``.
    ``base`` is the working folder: "did you mean" paths are shown relative to it.
    ``redact`` masks secrets in a line before a long line is cut.
    """
    path = Path(path)
    _check_file(path, base)
    start, count = max(1, int(start)), max(1, int(count))
    notes = []
    with open_regular(path) as f:
        _refuse_binary(f, path)
        if keyword:
            hit = lines.find_line(f, keyword)
            f.seek(0)
            if hit is None:
                notes.append(f"[NOTE] keyword {keyword!r} not found; showing from line {start}")
            else:
                start = max(1, hit + 1 - KEYWORD_LINES_BEFORE)
        skipped = lines.skip_lines(f, start - 1)
        shown = _read_window(f, start, count, max_chars, show_linenos, redact)
        total = skipped + len(shown) + lines.count_lines(f)
    if total and start > total:
        raise ToolError(f"start={start} is past the end of {path} ({total} lines)")
    end = start - 1 + len(shown)
    out = [f"[FILE] {total} lines", *notes, *shown]
    if total and (start > 1 or end < total):
        more = f"; use start={end + 1} to read more" if end < total else ""
        out.append(f"[PARTIAL] showing lines {start}-{end} of {total}{more}")
    return "\n".join(out)


def _read_window(f, start: int, count: int, max_chars: int, show_linenos: bool,
                 redact: Callable[[str], str] | None = None) -> list[str]:
    """Up to ``count`` formatted lines; stops before ``max_chars`` (one line at least). The
    file is left right after the last line shown."""
    shown: list[str] = []
    used = 0
    pos = f.tell()
    for batch in lines.read_lines(f, count):
        if redact is not None:
            batch = [(redact(head), length) for head, length in batch]
        rows = ([f"{n}|{_cut(*line)}" for n, line in enumerate(batch, start + len(shown))]
                if show_linenos else [_cut(*line) for line in batch])
        ends = list(accumulate((len(text) + 1 for text in rows), initial=used))
        keep = max(bisect_right(ends, max_chars) - 1, 0 if shown else 1)
        shown += rows[:keep]
        if keep < len(rows):
            f.seek(pos)
            lines.skip_lines(f, len(shown))
            break
        used = ends[-1]
    return shown


def is_image_file(path: Path) -> bool:
    """Whether ``path`` is a regular file whose first bytes are PNG, JPEG, GIF or WebP."""
    try:
        with open_regular(path) as f:
            return images.is_image_bytes(f.read(IMAGE_SNIFF_BYTES))
    except OSError:
        return False  # missing, a FIFO…: file_read's own checks say what is wrong


def read_image(path: Path, decode: bool) -> tuple[dict, images.Picture | None]:
    """An image file's facts (name, format, width, height, bytes) and, with ``decode``,
    the picture to send (downscaled and size-capped); bounded like every read."""
    with open_regular(path) as f:
        raw = f.read(images.MAX_SOURCE_BYTES + 1)
    try:
        return images.inspect(raw, str(path), decode)
    except images.ImageError as e:
        raise ToolError(str(e)) from None


def _refuse_binary(f, path: Path) -> None:
    head = f.read(BINARY_SNIFF_BYTES)
    f.seek(0)
    if b"\0" in head:
        size = os.fstat(f.fileno()).st_size
        raise ToolError(f"{path} is a binary file ({size} bytes); inspect it with code_run instead")


def _read_lines(path: Path, base: Path | None = None) -> list[str]:
    _check_file(path, base)
    with open_regular(path) as f:
        _refuse_binary(f, path)
        raw = f.read()
    text = raw.decode("utf-8", errors="replace").replace("\r\n", "\n")
    result = text.split("\n")
    if result and result[-1] == "":
        result.pop()
    return result


def _cut(line: str, length: int | None = None) -> str:
    length = len(line) if length is None else length
    if length <= MAX_LINE_CHARS:
        return line
    return f"{line[:MAX_LINE_CHARS]} ... [TRUNCATED] ({length} chars)"


def _check_file(path: Path, base: Path | None = None) -> None:
    """Raise a ToolError the model can act on unless ``path`` is an existing file."""
    if path.is_dir():
        entries = sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir())
        shown = ", ".join(entries[:DIR_LIST_LIMIT]) or "(empty)"
        if len(entries) > DIR_LIST_LIMIT:
            shown += f", ... ({len(entries)} entries)"
        raise ToolError(f"{path} is a directory, not a file; it contains: {shown}")
    if not path.exists():
        suggestions = suggest_paths(path, base=base)
        hint = f" Did you mean: {', '.join(suggestions)}?" if suggestions else ""
        raise ToolError(f"file not found: {path}.{hint}")


def suggest_paths(path: Path, limit: int = 3, base: Path | None = None) -> list[str]:
    """Existing paths close to a missing ``path``, looked for only in its folder and that
    folder's parent (similar names; the same name in a sibling folder), within
    ``SUGGEST_SECONDS``; shown relative to ``base`` when inside it, else absolute."""
    path = Path(path)
    deadline = time.monotonic() + SUGGEST_SECONDS
    folder, name = path.parent, path.name
    found = [folder / n for n in _close(name, _entries(folder, deadline), limit)]
    upper = _entries(folder.parent, deadline) if folder.parent != folder else []
    found += [folder.parent / n for n in _close(name, upper, limit)]
    for sibling in [folder.name, *(n for n in upper if n != folder.name)]:
        if time.monotonic() > deadline:
            break
        candidate = folder.parent / sibling / name
        if candidate != path and os.path.isfile(candidate):
            found.append(candidate)
    unique = list(dict.fromkeys(_display(p, base) for p in found if p != path))
    return unique[:limit]


def _entries(folder: Path, deadline: float) -> list[str]:
    """Names in ``folder`` (none when it is missing or unreadable), until the deadline."""
    names: list[str] = []
    try:
        with os.scandir(folder) as it:
            for entry in it:
                if len(names) >= SUGGEST_SCAN_LIMIT or time.monotonic() > deadline:
                    break
                names.append(entry.name)
    except OSError:
        return names  # a missing or unreadable folder has nothing to suggest
    return names


def _close(name: str, names: list[str], limit: int) -> list[str]:
    return difflib.get_close_matches(name, names, n=limit, cutoff=SUGGEST_CUTOFF)


def _display(path: Path, base: Path | None) -> str:
    shown = os.path.abspath(path)
    if base is None:
        return shown
    try:
        relative = os.path.relpath(shown, os.path.abspath(base))
    except ValueError:  # another drive (Windows)
        return shown
    outside = relative == os.pardir or relative.startswith(os.pardir + os.sep)
    return shown if outside else relative


# --- writing -------------------------------------------------------------------------------

def file_write(
    path: Path, content: str, mode: str = "overwrite", refs_base: Path | None = None,
    check: Callable[[Path], None] | None = None, abort: threading.Event | None = None,
) -> dict:
    """Write, append or prepend ``content`` atomically, keeping the file's newline style.

    With ``refs_base``, ``{{file:path:start:end}}`` references are expanded first.
    ``check`` (the sandbox's rule) is given the real path written, inside the lock;
    ``abort`` ends a wait for the lock.
    """
    path = Path(path)
    if mode not in WRITE_MODES:
        raise ToolError(f"unknown mode {mode!r}; use one of: {', '.join(WRITE_MODES)}")
    if path.is_dir():
        raise ToolError(f"{path} is a directory; give a file path to write")
    if refs_base is not None:
        content = expand_file_refs(content, Path(refs_base))
    text = content.replace("\r\n", "\n")
    with file_lock(path, check, abort) as at:  # the old content is copied, never held here
        head = at.read(NEWLINE_SNIFF_BYTES)
        if _is_crlf(head.decode("utf-8", errors="replace")):
            text = text.replace("\n", "\r\n")
        data = _encode(text)
        note = _hard_link_note(at)
        atomic_write(path, data, keep=KEEP_OLD[mode], at=at)
    result = {
        "status": "success", "path": str(path), "mode": mode,
        "bytes": len(data), "lines": _count_lines(text), **note,
    }
    if len(data) > LARGE_WRITE_BYTES:
        result["warning"] = (
            f"very large write ({len(data)} bytes); prefer smaller files, and edit existing "
            "files with file_patch instead of rewriting them"
        )
    return result


def refuse_folder_path(path: str) -> None:
    """A path ending in a separator (``newdir/``) or in ``.``/``..`` names a folder."""
    if os.path.basename(path) in ("", ".", ".."):
        raise ToolError(f"{path!r} is a folder path; give a file name (like "
                        f"{os.path.join(path, 'notes.md')!r})")


def _hard_link_note(at: Target) -> dict:
    """A note for the model when the file has other hard links: they keep the old content."""
    st = at.stat()
    if st is None or st.st_nlink < 2:
        return {}
    return {"note": f"{at.path} had {st.st_nlink} hard links; only this name has the new "
                    "content, the other names keep the old one"}


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
        lines = _read_lines(target, base)
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


def write_content(content: str | None, reply: str) -> str | None:
    """What file_write writes: ``content``, else (missing or empty) the reply's last
    ``<file_content>`` or fenced block; None when there is none at all."""
    if content:
        return content
    found = content_from_reply(reply)
    return content if found is None else found


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

def file_patch(
    path: Path, old_content: str, new_content: str, abort: threading.Event | None = None,
    base: Path | None = None, check: Callable[[Path], None] | None = None,
) -> dict:
    """Replace the one occurrence of ``old_content``; refuse zero or several matches.

    ``abort`` (when set) cuts short the search for the closest lines after a miss and a
    wait for the lock; ``base`` is the working folder "did you mean" paths are shown
    relative to; ``check`` as for ``file_write``.
    """
    path = Path(path)
    _check_file(path, base)
    if not old_content:
        raise ToolError("old_content is empty; copy the exact lines to replace from file_read")
    old = old_content.replace("\r\n", "\n")
    new = new_content.replace("\r\n", "\n")
    with file_lock(path, check, abort) as target:
        text = target.read().decode("utf-8", errors="surrogateescape")
        crlf = _is_crlf(text)
        norm = text.replace("\r\n", "\n") if crlf else text
        at, found = _locate(path, norm, old, abort)
        note = _hard_link_note(target)
        if found != old:
            new = nearmatch.unescape_markers(new)
            note["markers_note"] = UNESCAPED_NOTE
        out = norm[:at] + new + norm[at + len(found) :]
        atomic_write(path, _encode(out.replace("\n", "\r\n") if crlf else out), at=target)
    return {
        "status": "success", "path": str(path), "replaced_lines": _count_lines(found),
        "at_line": norm.count("\n", 0, at) + 1, "new_lines": _count_lines(new), **note,
    }


def _locate(path: Path, text: str, old: str, abort: threading.Event | None) -> tuple[int, str]:
    """Where the one occurrence of ``old`` starts in ``text``, and its real text there.

    ``old`` matching nowhere as given may have been copied from a tool result that showed
    the runtime's markers escaped: then each escaped marker matches its real form too."""
    count = text.count(old)
    if count == 1:
        return text.index(old), old
    if count > 1:
        raise ToolError(_many_matches_message(path, text, _starts(text, old), count))
    pattern = nearmatch.unescaped_pattern(old)
    matches = list(pattern.finditer(text)) if pattern else []
    if not matches:
        raise ToolError(_no_match_message(path, text, old, abort))
    if len(matches) > 1:
        starts = [text.count("\n", 0, m.start()) + 1 for m in matches]
        raise ToolError(_many_matches_message(path, text, starts, len(matches)))
    return matches[0].start(), matches[0].group()


def _starts(text: str, old: str) -> list[int]:
    """Line numbers where the first ``MAX_MATCH_LINES_LISTED`` occurrences of ``old`` start."""
    starts = []
    pos = text.find(old)
    while pos != -1 and len(starts) < MAX_MATCH_LINES_LISTED:
        starts.append(text.count("\n", 0, pos) + 1)
        pos = text.find(old, pos + len(old))
    return starts


def _no_match_message(path: Path, text: str, old: str, abort: threading.Event | None) -> str:
    message = (
        f"old_content was not found in {path}; nothing was changed. Re-read the file with "
        "file_read and copy the exact text to replace, including indentation and whitespace."
    )
    old_lines = old.split("\n")
    probe = max(old_lines, key=lambda line: len(line.strip())).strip()
    if not probe:
        return message
    file_lines = text.split("\n")
    near = nearmatch.closest_line(probe, file_lines, abort)
    shown = ""
    if near.index is not None:
        first = near.index - [s.strip() for s in old_lines].index(probe)
        lo, hi = max(0, first - 1), min(len(file_lines), first + len(old_lines) + 1)
        shown = "\n".join(f"{n}|{_cut(file_lines[n - 1])}" for n in range(lo + 1, hi + 1))
    if near.stopped_at is None:
        return f"{message}\nThe closest lines in the file are:\n{shown}" if shown else message
    why = "the task was stopped" if near.aborted else f"after {nearmatch.NEAR_MATCH_SECONDS} s"
    cut = (f"\nThe search for similar lines was cut short ({why}) at line "
           f"{near.stopped_at + 1} of {len(file_lines)}")
    if not shown:
        return f"{message}{cut} and found none."
    return f"{message}{cut}; the most similar lines it found (maybe not the closest) are:\n{shown}"


def _many_matches_message(path: Path, text: str, starts: list[int], count: int) -> str:
    shown = ", ".join(str(n) for n in starts[:MAX_MATCH_LINES_LISTED])
    return (
        f"old_content matches {count} places in {path} (starting at lines "
        f"{shown}); nothing was changed. Include more surrounding lines in "
        "old_content so that it matches exactly one place."
    )
