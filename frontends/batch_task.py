"""One task of a batch (SPEC §14), run in a worker process: the local pool's or a Ray worker's.

A task is an ordinary one-shot task: its session is opened the way ``ga "TASK"`` opens one
(``cli.open_session``: the config, plugins, journal and token budget), so it is listed by
``ga sessions`` and can be resumed. What it ends with becomes one result record.
"""

from __future__ import annotations

import argparse
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Callable

from llmcore.base import ConfigError

FINAL = ("done", "failed", "asked", "limit")  # a re-run skips these (interrupted is not final)
RETRYABLE = ("failed", "limit", "asked")  # what --retry may name
STATUSES = {"CURRENT_TASK_DONE": "done", "EXITED": "asked", "MAX_TURNS_EXCEEDED": "limit",
            "NO_PROGRESS": "limit", "BUDGET_EXCEEDED": "limit", "ABORTED": "interrupted",
            "FAILED": "failed"}
USAGE_KEYS = ("input", "cached", "output")
SECONDS_DIGITS = 3


def warm() -> None:
    """Make what a session's model client loads on first use: the HTTP stack and the TLS
    context (≈ 0.2 s of CPU). Called once in the forker, so no forked worker pays it."""
    import httpx2

    from llmcore.provider import tls_context

    httpx2.Client(verify=tls_context()).close()


def record(task_id: Any, status: str, *, answer: str | None = None,
           question: str | None = None, turns: int = 0, tokens: dict | None = None,
           cost: float | None = None, session: str | None = None, seconds: float = 0.0,
           error: str | None = None) -> dict:
    """A result line: every field always present, in this order."""
    return {"id": task_id, "status": status, "answer": answer, "question": question,
            "turns": turns, "tokens": tokens or dict.fromkeys(USAGE_KEYS, 0), "cost": cost,
            "session": session, "seconds": round(seconds, SECONDS_DIGITS), "error": error}


def end_record(task_id: Any, end: dict, tokens: dict, session: str | None,
               seconds: float) -> dict:
    """The result line of a task that ended with ``end`` (its ``task_end`` event)."""
    from .console import final_answer
    from .runner import end_message

    status = STATUSES.get(end.get("result"), "failed")
    error = None
    if status == "failed":
        error = end.get("error") or end.get("text") or "failed"
    elif status in ("limit", "interrupted"):
        error = end_message(end)
    answer = (final_answer(end) or None) if status == "done" else None
    return record(task_id, status, answer=answer,
                  question=end.get("question") if status == "asked" else None,
                  turns=int(end.get("turns") or 0), tokens=tokens, cost=end.get("cost"),
                  session=session, seconds=seconds, error=error)


def task_args(spec: dict, common: dict) -> argparse.Namespace:
    """The options a one-shot ``ga`` run would have for this task."""
    return argparse.Namespace(
        cwd=spec["cwd"], model=spec.get("model") or common.get("model"),
        config=common.get("config"), home=common.get("home"),
        plugin=common.get("plugins") or None, no_user_tools=common.get("no_user_tools", False),
        verbose=False, json=False, task_dir=None,
        max_turns=spec.get("max_turns") or common.get("max_turns") or 100,
        max_tokens=spec.get("max_tokens") or common.get("max_tokens"),
        max_cost=common.get("max_cost"), mcp_config=common.get("mcp_config") or (),
        sandbox=common.get("sandbox"), approval=common.get("approval"),
        yolo=common.get("yolo", False))


def fresh_folder(path: str) -> None:
    """A task's own folder (``OUT.work/ID``), emptied: a task run again starts clean."""
    folder = Path(path)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)


class Running:
    """The session of the task a worker runs now, for an abort from another thread. An
    abort that comes before the session is open is kept and applied when it opens."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.session: Any = None
        self.reason: str | None = None
        self.aborted = threading.Event()  # ends a wait for the batch's request cap

    def start(self, session: Any) -> None:
        with self._lock:
            self.session = session
            reason = self.reason
        if reason is not None:
            session.abort(reason)

    def abort(self, reason: str) -> None:
        with self._lock:
            self.reason = reason
            session = self.session
        self.aborted.set()
        if session is not None:
            session.abort(reason)

    def finish(self) -> None:
        with self._lock:
            self.session = None
            self.reason = None
        self.aborted.clear()


class Tally:
    """The renderer of a batch task: counts its tokens and passes usage on (``send``)."""

    def __init__(self, send: Callable[[dict], None] | None) -> None:
        self.tokens = dict.fromkeys(USAGE_KEYS, 0)
        self.send = send

    def __call__(self, event: dict) -> None:
        if event.get("type") != "usage":
            return
        usage = {k: int(event.get(k) or 0) for k in USAGE_KEYS}
        for key, value in usage.items():
            self.tokens[key] += value
        if self.send is not None:
            self.send({"type": "usage", **usage})


def run_task(spec: dict, common: dict, running: Running,
             send: Callable[[dict], None] | None = None,
             before_request: Callable[[], None] | None = None) -> dict:
    """Run one task to its end in this process and return its result line. ``send`` gets
    ``started`` (with the session id) and ``usage`` messages; ``before_request`` runs before
    each model request (the batch's request cap)."""
    from .session_setup import open_session

    started = time.monotonic()
    if spec.get("fresh"):
        fresh_folder(spec["cwd"])
    try:
        session = open_session(task_args(spec, common), Path(common["home"]), None,
                               can_ask=False,  # nobody answers a batch task
                               shared_tracer=True)  # one for the worker's tasks
    except ConfigError as e:
        return record(spec["id"], "failed", seconds=time.monotonic() - started, error=str(e))
    tally = Tally(send)
    try:
        session.agent.llmclient.before_request = before_request
        session.attach(spec.get("images") or [])
        events = session.submit(spec["task"])
        running.start(session)
        if send is not None:
            send({"type": "started", "session": session.id})
        end = drain(session, events, tally, running)
    except ConfigError as e:  # an image the model cannot take
        end = {"result": "FAILED", "error": str(e)}
    finally:
        running.finish()
        session.close()
        session.agent.close()
    return end_record(spec["id"], end, tally.tokens, session.id, time.monotonic() - started)


def drain(session: Any, events: Any, tally: Tally, running: Running) -> dict:
    """The task's events until its end; stopped from outside (Ctrl-C from Ray's cancel, a
    SIGTERM), it is aborted and its end journaled before the stop goes on."""
    from .signals import STOPS, describe

    try:
        return session.drain(events, tally)
    except STOPS as stop:
        running.abort(describe(stop))
        session.stop(events, stop)
        raise
