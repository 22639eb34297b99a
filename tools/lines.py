"""Streamed line access for files of any size: skip, count, search, read a window.

Memory stays bounded by ``SCAN_CHUNK_BYTES`` and ``LINE_PIECE_BYTES`` whatever the file
holds (a 2 GB log, one 2 GB line). Lines split on ``\\n``; a ``\\r\\n`` ending is dropped
with the line break; text is decoded as UTF-8 with undecodable bytes replaced.
"""

from __future__ import annotations

import codecs
import os
from typing import BinaryIO, Iterator

SCAN_CHUNK_BYTES = 1 << 18  # counting, skipping and keyword search read this much at a time
LINE_PIECE_BYTES = 1 << 16  # a long line is read in pieces of this size, only its head kept
# characters of a line kept for display: callers show 2,000, and redact the rest first, so a
# secret across the cut is masked whole
HEAD_CHARS = 4_096
COUNT_BLOCK_BYTES = 4096  # skipping counts line ends this much at a time, then finds the last
assert LINE_PIECE_BYTES >= 4 * HEAD_CHARS  # a first piece always holds the whole head


def skip_lines(f: BinaryIO, n: int) -> int:
    """Move past ``n`` lines; returns how many there were (fewer at the end of the file)."""
    done, last = 0, b""
    while done < n:
        chunk = f.read(SCAN_CHUNK_BYTES)
        if not chunk:
            return done + (last not in (b"", b"\n"))
        at, found = _nth_line_end(chunk, n - done)
        if at < 0:
            done, last = done + found, chunk[-1:]
            continue
        f.seek(at + 1 - len(chunk), os.SEEK_CUR)
        return n
    return done


def _nth_line_end(data: bytes, n: int) -> tuple[int, int]:
    """(index of the ``n``-th ``\\n`` in ``data``, n), or (-1, how many it holds) when fewer:
    counted a block at a time (in C), then found one by one only in the last block."""
    at, need = 0, n
    while at < len(data):
        found = data.count(b"\n", at, at + COUNT_BLOCK_BYTES)
        if found >= need:
            pos = at - 1
            for _ in range(need):
                pos = data.index(b"\n", pos + 1)
            return pos, n
        need -= found
        at += COUNT_BLOCK_BYTES
    return -1, n - need


def count_lines(f: BinaryIO) -> int:
    """Lines from the current position to the end of the file (a last unended line counts)."""
    count, last = 0, b""
    while chunk := f.read(SCAN_CHUNK_BYTES):
        count += chunk.count(b"\n")
        last = chunk[-1:]
    return count + (last not in (b"", b"\n"))


def find_line(f: BinaryIO, keyword: str) -> int | None:
    """0-based index of the first line containing ``keyword`` (case-insensitive), or None.

    Whole lines are searched a chunk at a time; a line longer than a chunk is searched in
    overlapping pieces, so a match across a piece boundary is still found.
    """
    needle = keyword.lower()
    if not needle or "\n" in needle:
        return None
    keep = 4 * len(needle) + 4  # bytes of an unended line kept for a match across pieces
    line, carry = 0, b""
    while chunk := f.read(SCAN_CHUNK_BYTES):
        data = carry + chunk
        cut = data.rfind(b"\n") + 1
        text = _lower(data[:cut])
        at = text.find(needle)
        if at >= 0:
            return line + text.count("\n", 0, at)
        line += text.count("\n")
        carry = data[cut:]
        if len(carry) > SCAN_CHUNK_BYTES:
            if needle in _lower(carry):
                return line
            carry = carry[-keep:]
    return line if carry and needle in _lower(carry) else None


def _lower(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace").lower()


def read_lines(f: BinaryIO, count: int) -> Iterator[list[tuple[str, int]]]:
    """The next ``count`` lines (fewer at the end of the file) as ``read_line`` gives them,
    in batches: the lines that end in a piece, decoded at once; a line that ends in none (a
    long one, or an unended last line) alone, through ``read_line``. The file is left after
    the last line of the last batch taken."""
    left = count
    while left > 0:
        start = f.tell()
        piece = f.read(LINE_PIECE_BYTES)
        if not piece:
            return
        at, _ = _nth_line_end(piece, left)
        end = at + 1 if at >= 0 else piece.rfind(b"\n") + 1
        if end:
            f.seek(start + end)
            text = piece[:end].decode("utf-8", errors="replace").replace("\r\n", "\n")
            batch = [(row[:HEAD_CHARS], len(row)) for row in text.split("\n")[:-1]]
        else:
            f.seek(start)
            batch = [read_line(f) or ("", 0)]  # never None: the piece holds bytes
        left -= len(batch)
        yield batch


def read_line(f: BinaryIO) -> tuple[str, int] | None:
    """The next line as ``(head, length)``: at most ``HEAD_CHARS`` characters of it and its
    full length in characters. None at the end of the file."""
    piece = f.readline(LINE_PIECE_BYTES)
    if not piece:
        return None
    if piece.endswith(b"\n") or len(piece) < LINE_PIECE_BYTES:
        text = piece.removesuffix(b"\n").removesuffix(b"\r") if piece.endswith(b"\n") else piece
        line = text.decode("utf-8", errors="replace")
        return line[:HEAD_CHARS], len(line)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    head = decoder.decode(piece)
    length, tail = len(head), piece[-2:]
    while not tail.endswith(b"\n"):
        piece = f.readline(LINE_PIECE_BYTES)
        if not piece:
            break
        length += len(decoder.decode(piece))
        tail = (tail + piece)[-2:]
    length += len(decoder.decode(b"", final=True))
    length -= 2 if tail == b"\r\n" else tail.endswith(b"\n")
    return head[:HEAD_CHARS], length
