"""The text of a one-shot task: the command-line words, and piped stdin as its context (or
as the task itself when no words are given)."""

from __future__ import annotations

import os
import stat
import sys
import threading
from typing import TYPE_CHECKING, Callable

from llmcore.base import ConfigError
from llmcore.secrets import MARGIN_MAX

if TYPE_CHECKING:
    from llmcore.secrets import Redactor

STDIN_MAX_BYTES = 1_000_000  # piped stdin beyond this is cut, with a note to the model
MARGIN_BYTES = 4 * MARGIN_MAX  # read past the cut, to mask a key across it (UTF-8: 4 a char)
STDIN_NOTE_SECONDS = 3.0  # piped stdin still open after this long: say ga is reading it
STDIN_NOTE = ("ga: waiting for stdin to close (piped input goes with the task); end it with "
              "Ctrl-D, or run ga with < /dev/null")


def piped_stdin(redactor: Callable[[], Redactor] | None = None) -> str | None:
    """What a pipe or a redirected file holds on stdin (None for a terminal, /dev/null or
    no stdin at all), at most ``STDIN_MAX_BYTES`` with a note when cut (``redactor()``
    masks the text before it is cut)."""
    try:
        if sys.stdin is None or sys.stdin.isatty():
            return None
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError):  # a replaced stdin without a file descriptor
        return None
    if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode) or stat.S_ISSOCK(mode)):
        return None
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:
        return sys.stdin.read(STDIN_MAX_BYTES)
    note = threading.Timer(STDIN_NOTE_SECONDS, print, (STDIN_NOTE,),
                           {"file": sys.stderr, "flush": True})
    note.daemon = True
    if not stat.S_ISREG(mode):  # a pipe may stay open: say what ga waits for
        note.start()
    try:
        data = stream.read(STDIN_MAX_BYTES + MARGIN_BYTES)
    finally:
        note.cancel()
    return stdin_text(data, redactor)


def stdin_text(data: bytes, redactor: Callable[[], Redactor] | None = None) -> str:
    """Piped bytes as text, cut at ``STDIN_MAX_BYTES`` (between characters) with a note:
    masked with what was read past the cut first (by ``redactor()``, by default the
    environment's), so a key across the cut leaves no part of itself."""
    if len(data) <= STDIN_MAX_BYTES:
        return data.decode("utf-8", errors="replace")
    cut = STDIN_MAX_BYTES
    while cut and data[cut] & 0xC0 == 0x80:  # a UTF-8 continuation byte: no character starts
        cut -= 1
    kept = len(data[:cut].decode("utf-8", errors="replace"))
    redact = redactor() if redactor is not None else environment_redactor()
    text = redact.head(data.decode("utf-8", errors="replace"), kept)
    return f"{text}\n[stdin was cut at {STDIN_MAX_BYTES} bytes; the rest was not read]"


def environment_redactor() -> Redactor:
    from llmcore.secrets import Redactor

    return Redactor.from_config(None)


def argv_text(text: str) -> str:
    """Command-line text as valid Unicode: bytes that were not UTF-8 (which Python keeps as
    surrogate escapes) become U+FFFD, so the journal, logs and archive can store it."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def with_context(task: str, text: str, tag: str = "stdin") -> str:
    """``task`` followed by outside ``text`` (piped stdin, an editor's resource, a batch
    task's context) in a ``<tag>`` block, its runtime markers and the block's own tag made
    inert, so a ``</stdin>`` inside cannot close it (SPEC §4)."""
    from agent_loop import neutralise_markers

    return f"{task}\n\n<{tag}>\n{neutralise_markers(text, (tag,))}\n</{tag}>"


def task_text(args, redactor: Callable[[], Redactor] | None = None) -> str:
    """The task of a one-shot run: the arguments, with piped stdin as context (or as the
    task when no arguments are given); ``redactor()``: the run's, when stdin must be cut."""
    task = argv_text(" ".join(args.task).strip())
    piped = (piped_stdin(redactor) or "").strip()
    if task and piped:
        return with_context(task, piped)
    if not (task or piped):
        raise ConfigError(None, "task", "no task given (ga --help)")
    return task or piped
