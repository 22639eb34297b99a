"""What reaches a terminal (SPEC §4 "Untrusted text reaches no terminal raw").

Outside text (tool output, model text, page text, file names) may hold escape sequences
that clear the screen, hide a line, set the window title or write the clipboard, and
Unicode bidi controls that show text in another order than it runs (``\\u202e``): ``inert``
shows every control character but newline and tab, and every bidi control, escaped
(``\\x1b[2J``) before anything is printed. The renderers pass each event through
``inert_data``; diagnostics go through ``say``, which also ends a line a renderer left
open (a streamed answer), so the two never share a line, from whatever thread the
diagnostic comes; the management commands print their listings (memory files, MCP
servers' tools, plugin texts) through ``echo``.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from typing import IO, Any, Callable

# the Unicode bidi controls (category Cf): marks, embeddings, overrides and isolates
BIDI_CONTROLS = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
# C0 controls but newline and tab, DEL, the C1 controls (U+0080-U+009F, 8-bit CSI/OSC
# included) and the bidi controls; a CRLF line end is kept as a newline
_CONTROL_RE = re.compile("\r\n|[\x00-\x08\x0b-\x1f\x7f-\x9f"
                         + "".join(map(chr, BIDI_CONTROLS)) + "]")
# json.dumps escapes C0 itself; DEL, C1 and the bidi controls it leaves raw
_JSON_CONTROLS = {c: f"\\u{c:04x}" for c in (*range(0x7F, 0xA0), *BIDI_CONTROLS)}


def inert(text: str) -> str:
    """``text`` with its control characters shown as ``\\xNN`` and its bidi controls as
    ``\\uNNNN`` (newline and tab kept)."""
    if text.isprintable():  # most streamed pieces: a check in C, no copy
        return text
    return _CONTROL_RE.sub(_escaped, text)


def _escaped(m: re.Match) -> str:
    char = m.group()
    if char == "\r\n":
        return "\n"
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def inert_data(value: Any) -> Any:
    """``value`` with every string in it (dict keys included) made ``inert``."""
    if isinstance(value, str):
        return inert(value)
    if isinstance(value, dict):
        return {inert_data(k): inert_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [inert_data(v) for v in value]
    return value


def inert_event(event: dict) -> dict:
    """An event made inert; a streamed piece (``delta``: its only outside text) cheaply."""
    delta = event.get("delta")
    if isinstance(delta, str):
        shown = inert(delta)
        return event if shown is delta else {**event, "delta": shown}
    return inert_data(event)


def json_line(text: str) -> str:
    """A line of JSON text with DEL, C1 and bidi controls escaped as well (valid JSON)."""
    return text.translate(_JSON_CONTROLS)


class OpenLine:
    """The registry of the one line left open on the process's terminal: a renderer that
    writes text without ending its line registers how to end it; ``say`` ends it first."""

    def __init__(self) -> None:
        self.lock = threading.RLock()  # held by a renderer's writes and by ``say``
        self._stream: IO[str] | None = None
        self._end: Callable[[], None] | None = None

    def opened(self, stream: IO[str], end: Callable[[], None] | None) -> None:
        """``stream`` has a line open that ``end`` ends (None: its line is ended)."""
        with self.lock:
            self._stream, self._end = (stream, end) if end is not None else (None, None)

    def end(self) -> None:
        """End the open line, if it is still on one of the process's own streams."""
        with self.lock:
            end, stream = self._end, self._stream
            self._stream = self._end = None
            if end is not None and stream in (sys.stdout, sys.stderr):
                end()


OPEN_LINE = OpenLine()


def echo(text: str, file: IO[str] | None = None) -> None:
    """A line of a command's output (stdout by default), its text inert."""
    print(inert(text), file=file)


def say(text: str, file: IO[str] | None = None) -> None:
    """A diagnostic line (stderr by default): on a line of its own, its text inert."""
    with OPEN_LINE.lock:
        OPEN_LINE.end()
        print(inert(text), file=file or sys.stderr, flush=True)


class StderrHandler(logging.Handler):
    """Writes to whatever ``sys.stderr`` is at the time of the message, as ``say`` does:
    on a line of its own, its text masked and inert. ``redact`` is the run's redactor once
    it is known (``mask_logs``); until then key shapes, URL credentials and the
    environment's secrets."""

    def __init__(self) -> None:
        super().__init__()
        from llmcore.secrets import Redactor

        self.redact: Callable[[str], str] = Redactor.from_config(None)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            say(self.redact(self.format(record)))
        except (OSError, ValueError):  # stderr closed or gone: logging reports it its way
            self.handleError(record)


def mask_logs(redact: Callable[[str], str]) -> None:
    """Diagnostics are masked by ``redact`` (the run's redactor) from now on."""
    for handler in logging.getLogger("ga").handlers:
        if isinstance(handler, StderrHandler):
            handler.redact = redact
