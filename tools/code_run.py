"""Run a python / bash / powershell snippet as a child process, streaming its output live.

The child is tied to the runtime (``tools.procs``: its own process group, ended with the
runtime however it ends), gets a UTF-8 environment without the runtime's secrets
(``llmcore.secrets.EnvPolicy``) and ``/dev/null`` as stdin.
A reader thread does blocking reads of the merged stdout+stderr pipe and a waiter thread
blocks on the exit; both feed one queue, so output reaches the caller as soon as it is
written and nothing sleeps in a polling loop. Timeout and abort kill the whole group.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Generator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from llmcore.secrets import EnvPolicy, Redactor
from tools import ToolError, procs

if TYPE_CHECKING:
    from tools.sandbox import Confinement

MIN_TIMEOUT = 1
MAX_TIMEOUT = 600
MAX_OUTPUT_CHARS = 10_000
MIN_OUTPUT_CHARS = 200
MARKER_RESERVE_CHARS = 40  # room kept in the budget for the "[N chars omitted]" line
MAX_LIVE_CHARS = 50_000  # live chunks yielded per run before going quiet
READ_CHUNK_BYTES = 65_536
QUEUE_CHUNKS = 16  # bounds what the reader may run ahead of the consumer
TERM_GRACE_SECONDS = 0.5  # SIGTERM, then SIGKILL this long after
DRAIN_SECONDS = 0.5  # after exit or kill, wait this long for the pipe to close
ABORT_WATCH_SECONDS = 0.25  # the abort watcher re-checks whether the run is over this often

LANG_ALIASES = {
    "python": ("python", "py", "python3"),
    "bash": ("bash", "sh", "shell", "zsh"),
    "powershell": ("powershell", "ps1", "pwsh"),
}
FENCE_RE = re.compile(r"^[ \t]*```[ \t]*([\w+.#-]*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.M | re.S)

_EOF = object()
_EXIT = object()
_ABORT = object()


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """All fenced code blocks of ``text`` as ``(language, body)``, in order."""
    blocks = []
    for m in FENCE_RE.finditer(text or ""):
        body = m.group(2)
        blocks.append((m.group(1).lower(), body[:-1] if body.endswith("\n") else body))
    return blocks


def last_code_block(text: str, lang: str) -> str | None:
    """The last fenced block of language ``lang`` (or one of its aliases) in a reply."""
    wanted = LANG_ALIASES.get(lang.lower(), (lang.lower(),))
    found = [body for tag, body in fenced_blocks(text) if tag in wanted]
    return found[-1] if found else None


def code_to_run(script: str, kind: str, reply: str) -> str:
    """What a code_run call runs: its ``script``, else the reply's last block of ``kind``."""
    return script or last_code_block(reply, kind) or ""


def code_run(
    code: str,
    type: str = "python",
    timeout: int = 60,
    cwd: str | Path | None = None,
    abort: threading.Event | None = None,
    max_output: int = MAX_OUTPUT_CHARS,
    max_live: int = MAX_LIVE_CHARS,
    env: Mapping[str, str] | None = None,
    import_path: Sequence[str | Path] = (),
    redact: Redactor | None = None,
    confine: Confinement | None = None,
) -> Generator[str, None, dict]:
    """Run ``code``; yield its output live; return status, exit code and truncated stdout.

    ``env`` is the child's environment (default: ours without secret-named variables);
    ``redact`` masks secrets in the output before it is shortened.
    ``import_path``: folders a python script imports from (the home's ``memory/``, so its
    helpers import one another), put on ``PYTHONPATH`` after what is there already: python
    processes the script starts import from them too.
    ``confine`` (``tools.sandbox``) starts it inside the sandbox.
    ``exit_code`` is None when the run was killed (status ``timeout``, which also gives the
    ``timeout`` in seconds, or ``aborted``).
    """
    kind = _canonical_type(type)
    limit = coerce_timeout(timeout)
    folder = workdir(cwd)
    script = None
    try:
        argv, script = _command(code, kind)
        if confine is not None:
            argv = confine.wrap(argv, python=kind == "python")
        child = _Child(argv, folder, abort,
                       _child_env(env, import_path if kind == "python" else ()))
    except OSError as e:
        _remove(script)
        raise ToolError(f"cannot start {kind}: {e}") from e
    out = Output(max(MIN_OUTPUT_CHARS, int(max_output)), max_live, redact)
    try:
        status = yield from _pump(child, limit, out)
    finally:
        child.close()
        _remove(script)
    code_ = child.proc.returncode if status is None else None
    if status is None:
        status = "success" if code_ == 0 else "error"
    result = {"status": status, "exit_code": code_, "stdout": out.render()}
    if status == "timeout":
        result["timeout"] = limit  # seconds it was allowed to run
    return result


def _canonical_type(kind: str) -> str:
    for name, aliases in LANG_ALIASES.items():
        if str(kind).lower() in aliases:
            return name
    raise ToolError(f"unknown code type {kind!r}; use python, bash or powershell")


def coerce_timeout(timeout: int | float | str) -> float:
    try:
        value = float(timeout)
    except (TypeError, ValueError) as e:
        raise ToolError(f"timeout must be a number of seconds, got {timeout!r}") from e
    return min(MAX_TIMEOUT, max(MIN_TIMEOUT, value))


def workdir(cwd: str | Path | None) -> str:
    path = Path(cwd) if cwd is not None else Path.cwd()
    if not path.is_dir():
        raise ToolError(f"working directory does not exist: {path}")
    return str(path)


def _command(code: str, kind: str) -> tuple[list[str], Path | None]:
    if kind == "bash":
        return ["bash", "-c", code], None
    if kind == "powershell":
        if os.name != "nt":
            raise ToolError("powershell runs only on Windows; use type=bash here")
        return ["powershell", "-NoProfile", "-NonInteractive", "-Command", code], None
    fd, name = tempfile.mkstemp(prefix="ga_code_", suffix=".py", dir=procs.runtime_dir())
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(code)
    return [sys.executable, "-X", "utf8", "-u", name], Path(name)


def _remove(script: Path | None) -> None:
    if script is not None:
        script.unlink(missing_ok=True)


def _child_env(base: Mapping[str, str] | None, import_path: Sequence[str | Path] = ()
               ) -> dict[str, str]:
    env = dict(base) if base is not None else EnvPolicy().child_env()
    if import_path:
        env["PYTHONPATH"] = os.pathsep.join(
            [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
            + [str(p) for p in import_path])
    env["PYTHONIOENCODING"] = "utf-8"
    env["PYTHONUTF8"] = "1"
    env.setdefault("LANG", "C.UTF-8")
    env.setdefault("LC_ALL", "C.UTF-8")
    return env


class _Child:
    """A started child with its reader, waiter and (optional) abort-watcher threads."""

    def __init__(self, argv: list[str], cwd: str, abort: threading.Event | None,
                 env: dict[str, str]) -> None:
        self.events: queue.Queue = queue.Queue(maxsize=QUEUE_CHUNKS)
        self.done = threading.Event()
        self.exited = threading.Event()
        self.proc = procs.popen_tied(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        self._start(self._read)
        self._start(self._wait)
        if abort is not None:
            self._start(self._watch, abort)

    @staticmethod
    def _start(target, *args) -> None:
        threading.Thread(target=target, args=args, daemon=True).start()

    def _read(self) -> None:
        stream = self.proc.stdout
        with stream:
            while data := os.read(stream.fileno(), READ_CHUNK_BYTES):
                if not self.done.is_set():
                    self.events.put(data)
        self.events.put(_EOF)

    def _wait(self) -> None:
        self.proc.wait()
        self.exited.set()
        self.events.put(_EXIT)

    def _watch(self, abort: threading.Event) -> None:
        while not self.done.is_set() and not self.exited.is_set():
            if abort.wait(ABORT_WATCH_SECONDS):
                self.events.put(_ABORT)
                return

    def kill_group(self) -> None:
        """SIGTERM the whole process group, then SIGKILL it shortly after."""
        procs.end_group(self.proc, TERM_GRACE_SECONDS, self.exited.wait)

    def close(self) -> None:
        """Stop listening; kill the group if the child still runs (caller went away)."""
        self.done.set()
        if not self.exited.is_set():
            self.kill_group()
        with contextlib.suppress(queue.Empty):
            while True:  # unblock a reader waiting on a full queue
                self.events.get_nowait()
        self.exited.wait(DRAIN_SECONDS)
        procs.release(self.proc)


def _pump(child: _Child, limit: float, out: Output) -> Generator[str, None, str | None]:
    """Yield decoded output until EOF and exit; return a kill status or None."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    deadline = time.monotonic() + limit
    status = None
    eof = exited = False
    while not (eof and exited):
        try:
            item = child.events.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            if status is not None or exited:
                break  # drain window over (an escaped or background child holds the pipe)
            status = _stop(child, "timeout")
            deadline = time.monotonic() + DRAIN_SECONDS
            continue
        if item is _ABORT and status is None and not exited:
            status = _stop(child, "aborted")
            deadline = time.monotonic() + DRAIN_SECONDS
        elif item is _EXIT:
            exited = True
            deadline = min(deadline, time.monotonic() + DRAIN_SECONDS)
        elif item is _EOF:
            eof = True
        elif isinstance(item, bytes) and (shown := out.add(decoder.decode(item))):
            yield shown
    if tail := out.add(decoder.decode(b"", final=True), final=True):
        yield tail
    return status


def _stop(child: _Child, status: str) -> str:
    child.kill_group()
    return status


class Output:
    """Head and tail of the output within a char budget; live display capped per run.
    With ``redact``, secrets are masked as the output arrives, before any of it is cut."""

    def __init__(self, max_chars: int, max_live: int, redact: Redactor | None = None) -> None:
        self.mask = redact.stream() if redact is not None else None
        budget = max_chars - MARKER_RESERVE_CHARS
        self.head_cap = budget // 2
        self.tail_cap = budget - self.head_cap
        self.head: list[str] = []
        self.head_len = 0
        self.tail: deque[str] = deque()
        self.tail_len = 0
        self.total = 0
        self.max_live = max_live
        self.live_left = max_live

    def add(self, text: str, final: bool = False) -> str:
        """Keep ``text`` in head/tail; return the part to show live ("" once capped).
        ``final``: the output is over (a secret held back as it may go on is decided)."""
        if self.mask is not None:
            text = self.mask.feed(text) + (self.mask.flush() if final else "")
        self.total += len(text)
        rest = text
        room = self.head_cap - self.head_len
        if room > 0:
            self.head.append(rest[:room])
            self.head_len += min(room, len(rest))
            rest = rest[room:]
        if rest:
            self.tail.append(rest)
            self.tail_len += len(rest)
            while self.tail and self.tail_len - len(self.tail[0]) >= self.tail_cap:
                self.tail_len -= len(self.tail.popleft())
        return self._live(text)

    def _live(self, text: str) -> str:
        if len(text) <= self.live_left:
            self.live_left -= len(text)
            return text
        if self.live_left < 0:
            return ""
        shown = text[: self.live_left]
        self.live_left = -1
        return f"{shown}\n... [live output capped at {self.max_live} chars; still running] ...\n"

    def render(self) -> str:
        head = "".join(self.head)
        tail = "".join(self.tail)[-self.tail_cap:] if self.tail_cap > 0 else ""
        omitted = self.total - len(head) - len(tail)
        if omitted <= 0:
            return head + tail
        return f"{head}\n... [{omitted} chars omitted] ...\n{tail}"
