"""What file_patch's old_content may have meant when it matches nowhere as given.

Copied from a tool result, its runtime markers may be escaped (``&lt;key_info>``): each
such marker then matches its real form too. Else the file's line most like the longest
line of old_content is shown, with its neighbours, as the closest lines.

For that search difflib compares one line at a time in Python: far too slow for a
200,000-line file on its own. So
each slice of the file is first bounded at C speed (``map`` over ``str.count``): a line
cannot share more characters with the probe than the probe has, less what the line lacks
of the probe's few most telling characters. Lines are then compared best bound first, and
the slice is done once no bound left can beat the best score found: most lines are never
compared at all. The search still keeps to a time limit and an abort flag, and says where
it stopped when it did.
"""

from __future__ import annotations

import difflib
import functools
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass
from itertools import repeat
from operator import methodcaller, sub

from agent_loop import MARKER_SPACE, MARKER_TAG_NAMES, MARKER_WORD_NAMES

NEAR_MATCH_CUTOFF = 0.6  # the nearest line must be at least this similar (difflib ratio)
NEAR_MATCH_SECONDS = 0.5  # the search stops after this long
NEAR_MATCH_SLICE_LINES = 20_000  # lines bounded together between looks at the clock
TELLING_CHARS = 4  # probe characters whose counts bound a line's similarity
SAMPLE_LINES = 2_000  # lines of a slice sampled to pick the telling characters


@dataclass
class NearMatch:
    index: int | None  # 0-based index of the first line most like the probe; None: none
    stopped_at: int | None = None  # index of the slice the search stopped in; None: done
    aborted: bool = False  # stopped by the abort flag rather than the time limit


def closest_line(probe: str, lines: list[str], abort: threading.Event | None = None
                 ) -> NearMatch:
    """The first line most like ``probe`` (edge whitespace aside), at least
    ``NEAR_MATCH_CUTOFF`` alike, searched for ``NEAR_MATCH_SECONDS`` at most or until
    ``abort`` is set."""
    deadline = time.monotonic() + NEAR_MATCH_SECONDS
    matcher = difflib.SequenceMatcher(b=probe)
    best: tuple[int | None, float] = (None, NEAR_MATCH_CUTOFF)
    for start in range(0, len(lines), NEAR_MATCH_SLICE_LINES):
        piece = lines[start : start + NEAR_MATCH_SLICE_LINES]
        best, done = _search(matcher, piece, start, best, deadline, abort)
        if not done:
            return NearMatch(best[0], start, abort is not None and abort.is_set())
    return NearMatch(best[0])


def _stop(deadline: float, abort: threading.Event | None) -> bool:
    return time.monotonic() > deadline or (abort is not None and abort.is_set())


def _search(matcher: difflib.SequenceMatcher, piece: list[str], start: int,
            best: tuple[int | None, float], deadline: float, abort: threading.Event | None
            ) -> tuple[tuple[int | None, float], bool]:
    """The best (index, score) after searching ``piece`` (its lines from index ``start``),
    and whether the search went through without being stopped."""
    index, floor = best
    if _stop(deadline, abort):
        return best, False
    for bound, at, line in _candidates(matcher.b, piece, floor):
        if bound < floor:
            break
        if _stop(deadline, abort):
            return (index, floor), False
        matcher.set_seq1(line)
        if matcher.quick_ratio() < floor:
            continue
        score = matcher.ratio()
        if score > floor or (score == floor and (index is None or start + at < index)):
            index, floor = start + at, score
    return (index, floor), True


def _candidates(probe: str, piece: list[str], floor: float) -> list[tuple[float, int, str]]:
    """The distinct stripped lines of ``piece`` whose bound reaches ``floor``, as (bound,
    first index, line), highest bound first."""
    stripped = list(map(str.strip, piece))
    first = dict(zip(reversed(stripped), range(len(stripped) - 1, -1, -1), strict=True))
    distinct = list(first)
    size = len(probe)
    found = [(2 * shared / (len(line) + size), first[line], line)
             for line, shared in zip(distinct, _shared_bound(probe, distinct), strict=True)]
    found = [c for c in found if c[0] >= floor]
    found.sort(key=lambda c: (-c[0], c[1]))
    return found


def _shared_bound(probe: str, lines: list[str]) -> list[int]:
    """Per line, at least as many characters as it shares with ``probe`` (as multisets)."""
    want = Counter(probe)
    sample = Counter("".join(lines[:SAMPLE_LINES]))
    per_line = max(1, min(len(lines), SAMPLE_LINES))
    telling = sorted(want, key=lambda c: want[c] - sample[c] / per_line, reverse=True)
    bound = [len(probe)] * len(lines)
    for char in telling[:TELLING_CHARS]:
        counts = map(methodcaller("count", char), lines)
        lack = map(max, repeat(0), map(sub, repeat(want[char]), counts))
        bound = list(map(sub, bound, lack))
    return list(map(min, bound, map(len, lines)))


# --- old_content copied from a tool result whose markers were escaped -------------------
@functools.cache  # compiled at first use: a long pattern, not paid by a start without edits
def escaped_marker_re() -> re.Pattern[str]:
    """A runtime marker as tool results show it (agent_loop.neutralise_markers): &lt;tag,
    \\[WORD\\]."""
    return re.compile(
        rf"(&lt;)(?={MARKER_SPACE}/?{MARKER_SPACE}(?:{MARKER_TAG_NAMES})(?!\w))"
        rf"|\\\[({MARKER_SPACE}(?:{MARKER_WORD_NAMES}){MARKER_SPACE})\\\]", re.I)


def unescaped_pattern(old: str) -> re.Pattern | None:
    """A pattern matching ``old`` with each escaped runtime marker in it either escaped or
    real; None when it holds no escaped marker."""
    source = _marker_source(old)
    return None if source is None else re.compile(source)


def _marker_source(text: str) -> str | None:
    parts, pos = [], 0
    for m in escaped_marker_re().finditer(text):
        parts.append(re.escape(text[pos : m.start()]))
        if m.group(1) is not None:
            parts.append("(?:&lt;|<)")
        else:
            parts.append(rf"(?:\\\[|\[){re.escape(m.group(2))}(?:\\\]|\])")
        pos = m.end()
    if not parts:
        return None
    return "".join(parts) + re.escape(text[pos:])


def unescape_markers(text: str) -> str:
    """``text`` with escaped runtime markers (``&lt;key_info>``, ``\\[MASTER\\]``) made real."""
    def real(m: re.Match) -> str:
        return "<" if m.group(1) is not None else f"[{m.group(2)}]"
    return escaped_marker_re().sub(real, text)
