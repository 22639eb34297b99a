"""``--reflect SCRIPT``: poll a user script and run the tasks it returns (schedules, watchers).

The script may define ``INTERVAL`` (seconds between ``check()`` calls), ``ONCE`` (stop after
the first task), ``init(args)`` (called once with the extra ``--key value`` pairs),
``check()`` (a task prompt, None to wait, ``'/exit'`` to stop) and ``on_done(result)``.
The script is re-executed into the same module when its file changes, so state that
``init`` set survives a reload. An exception in the script is logged; the loop goes on.
Every task starts a fresh conversation; results are appended to
``<home>/logs/reflect/<script>_<date>.log``.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from llmcore.base import ConfigError

from .runner import Session, report_end

log = logging.getLogger("ga.reflect")

DEFAULT_INTERVAL = 5.0
EXIT = "/exit"


class ReflectScript:
    """The user's script, reloaded into the same module object when its file changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        spec = importlib.util.spec_from_file_location(f"ga_reflect_{path.stem}", path)
        if spec is None or spec.loader is None:
            raise ConfigError(None, "--reflect", f"cannot load {path}")
        self.spec = spec
        self.module: ModuleType = importlib.util.module_from_spec(spec)
        self.mtime = self._mtime()
        try:
            spec.loader.exec_module(self.module)
        except OSError as e:
            raise ConfigError(None, "--reflect", f"cannot read {path}: {e.strerror}") from None
        except Exception as e:  # the user's script: a clear usage error, no traceback
            raise ConfigError(None, "--reflect", f"{path}: {type(e).__name__}: {e}") from None

    def _mtime(self) -> int:
        try:
            return self.path.stat().st_mtime_ns
        except OSError:
            return 0

    def reload_if_changed(self) -> bool:
        mtime = self._mtime()
        if mtime == self.mtime:
            return False
        self.mtime = mtime
        try:
            self.spec.loader.exec_module(self.module)
        except Exception as e:  # keep the last good version running
            log.warning("reflect: reloading %s failed: %s: %s", self.path.name,
                        type(e).__name__, e)
            return False
        log.info("reflect: reloaded %s", self.path.name)
        return True

    def get(self, name: str, default: Any = None) -> Any:
        return getattr(self.module, name, default)

    def call(self, name: str, *args: Any) -> Any:
        """Call a script function; an exception is logged and gives None."""
        fn = self.get(name)
        if not callable(fn):
            return None
        try:
            return fn(*args)
        except Exception as e:  # the user's code must not stop the loop
            log.warning("reflect: %s() failed: %s: %s", name, type(e).__name__, e)
            log.debug("%s", traceback.format_exc())
            return None


class ReflectLog:
    """``<home>/logs/reflect/<script>_<date>.log``: one entry per task."""

    def __init__(self, home: Path, script: Path) -> None:
        self.folder = home / "logs" / "reflect"
        self.stem = script.stem

    def append(self, task: str, end: dict, session_id: str) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{self.stem}_{time.strftime('%Y-%m-%d')}.log"
        entry = (f"=== {time.strftime('%H:%M:%S')} session {session_id} "
                 f"result {end.get('result')}\n[task] {task}\n[result] {end.get('text', '')}\n\n")
        with open(path, "a", encoding="utf-8") as f:
            f.write(entry)
        return path


def run_reflect(session: Session, script_path: Path, extra: dict, render: Callable,
                sleep: Callable[[float], None] = time.sleep) -> int:
    """The reflect loop; returns the exit code."""
    script = ReflectScript(script_path)
    journal = ReflectLog(session.home, script_path)
    script.call("init", extra)
    print(f"ga: reflect: calling check() of {script_path} every "
          f"{float(script.get('INTERVAL', DEFAULT_INTERVAL)):g} s and running the task it "
          f"returns{' (once)' if script.get('ONCE', False) else ''}; Ctrl-C stops",
          file=sys.stderr, flush=True)
    code = 0
    while True:
        script.reload_if_changed()
        task = script.call("check")
        if isinstance(task, str) and task.strip() == EXIT:
            return code
        if isinstance(task, str) and task.strip():
            code = run_one(session, script, journal, task.strip(), render)
            if script.get("ONCE", False):
                return code
        sleep(float(script.get("INTERVAL", DEFAULT_INTERVAL)))


def run_one(session: Session, script: ReflectScript, journal: ReflectLog, task: str,
            render: Callable) -> int:
    session.new()
    end = session.run(task, render, source="reflect")
    journal.append(task, end, session.id)
    code = report_end(session, end)
    script.call("on_done", end.get("text", ""))
    return code


def parse_extra(tokens: list[str]) -> dict[str, Any]:
    """``--key value`` / ``--key=value`` / ``--flag`` pairs for the script's ``init(args)``."""
    extra: dict[str, Any] = {}
    key = None
    for tok in tokens:
        if tok.startswith("--") and len(tok) > 2:
            name, eq, value = tok[2:].partition("=")
            key = None if eq else name.replace("-", "_")
            extra[name.replace("-", "_")] = value if eq else True
        elif key is not None:
            extra[key] = tok
            key = None
        else:
            raise ConfigError(None, "--reflect", f"unexpected argument {tok!r} (use --key value)")
    return extra
