"""One CLI session: the agent, its journal, its token budget, and running a task off-thread.

Every front end (one-shot, REPL, task mode, func, reflect) runs tasks through ``Session.run``:
the task runs on a worker thread, the caller's thread renders events and stays free to see
Ctrl-C, SIGTERM or control files between events.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from llmcore.base import ConfigError
from llmcore.images import for_model
from llmcore.price import format_usd
from tools.procs import sweep_stale

from . import tracing
from .console import ESTIMATE_MARK
from .imagestore import ImageStore
from .journal import (
    Journal,
    SessionState,
    claim_session,
    find_session,
    latest_for_cwd,
    session_matches,
    sessions_dir,
)
from .session_lock import sweep_stale_locks
from .signals import STOPS, describe, write_failed
from .terminal import say

EXIT_CODES = {"CURRENT_TASK_DONE": 0, "EXITED": 3, "FAILED": 1, "MAX_TURNS_EXCEEDED": 4,
              "NO_PROGRESS": 4, "BUDGET_EXCEEDED": 4, "ABORTED": 130}
LIMIT_MESSAGES = {  # why a limit ended the task (exit 4), naming the option that sets it
    "MAX_TURNS_EXCEEDED": "stopped: the turn limit ({turns} turns, --max-turns) was reached",
    "NO_PROGRESS": "stopped: no progress: {text}",
    "BUDGET_EXCEEDED": "stopped: {text}",  # the text names --max-tokens or --max-cost
}
HISTORY_KEYS = {"history": list, "history_info": list, "working": dict, "open_turn": dict}
MATCHES_SHOWN = 5  # an ambiguous session prefix lists this many matches
TICK_SECONDS = 0.2  # how often a waiting front end looks at control files (task mode)
WORKER_GONE = "the agent's worker stopped without ending the task"
ABORT_GRACE_SECONDS = 10.0  # after Ctrl-C or SIGTERM, how long to wait for the task to stop


def exit_code(end: dict) -> int:
    return EXIT_CODES.get(end.get("result"), 1)


def end_message(end: dict) -> str | None:
    """The stderr line for a task that did not simply finish, else None."""
    result = end.get("result")
    if result in LIMIT_MESSAGES:
        return LIMIT_MESSAGES[result].format(turns=end.get("turns"), text=end.get("text") or "")
    if result == "ABORTED":
        return end.get("reason") or "interrupted"
    if exit_code(end) == 1:
        return f"failed: {end.get('error') or end.get('text') or result}"
    return None


def work_dir(args: Any) -> Path:
    cwd = Path(args.cwd or ".").resolve()  # one spelling per folder: --continue finds it
    if not cwd.is_dir():
        raise ConfigError(None, "--cwd", f"not a folder: {cwd}")
    return cwd


def load_tools(args: Any, home: Path) -> Any:
    """The plugins of this run (home, entry points, ``--plugin FILE``) in a ``PluginAPI``."""
    from agent_loop import Hooks

    from .plugins import PluginAPI, load_plugins

    files = tuple(getattr(args, "plugin", None) or ())
    for f in files:
        if not Path(f).is_file():
            raise ConfigError(f, "--plugin", "plugin file not found")
    api = PluginAPI(Hooks())
    load_plugins(home, api, files)
    return api


def make_agent(args: Any, home: Path, client: Any, api: Any, redactor: Any = None,
               mcp_servers: Iterable[Any] = (), state: Any = None,
               can_ask: bool | None = None) -> Any:
    """The agent a run (or ``ga tools``) uses: config ``agent:`` and ``tools:`` settings,
    plugins, flags, the sandbox and approval modes (a resumed session's ``state`` keeps
    its own; ``can_ask``: whether a person answers approval questions, by default whether
    stdin and stderr are a terminal), and the run's one redactor (built from the config
    when not given). Its MCP servers (config, ``--mcp-config`` files, then ``mcp_servers``:
    a front end's ``tools.mcp.ServerConfig``s for this session) are started before it is
    returned."""
    from ga import USER_TOOLS, GenericAgent, Settings
    from llmcore.config import open_config, tools_settings
    from llmcore.secrets import EnvPolicy, Redactor
    from tools.mcp import open_hub, session_servers
    from tools.web import BrowserConfig

    from .approve import permissions, person_can_answer
    from .plugins import handler_with_plugins

    cfg = open_config(args.config, home)
    settings = Settings.from_dict(cfg.agent, cfg.path)
    tools = tools_settings(cfg)
    env_policy = EnvPolicy.from_config(cfg)
    browser = BrowserConfig.from_dict(cfg.browser, cfg.path)
    disabled = dict.fromkeys(USER_TOOLS, "--no-user-tools") if args.no_user_tools else {}
    cwd = work_dir(args)
    servers = session_servers(cfg.mcp_servers, cfg.path, getattr(args, "mcp_config", None) or (),
                              mcp_servers)
    asks = person_can_answer(args) if can_ask is None else can_ask
    sandbox, approval = permissions(args, cfg.agent, cfg.path, state, asks)
    redactor = redactor or Redactor.from_config(cfg, env_policy)
    return GenericAgent(client, home=home, cwd=cwd,
                        max_turns=getattr(args, "max_turns", 100), verbose=args.verbose,
                        handler_cls=handler_with_plugins(api), disabled_tools=disabled,
                        hooks=api.hooks, task_dir=getattr(args, "task_dir", None),
                        settings=settings, env_policy=env_policy, redactor=redactor,
                        max_calls_per_turn=tools.max_calls_per_turn, browser=browser,
                        mcp=open_hub(servers, cwd, home, redact=redactor), sandbox=sandbox,
                        approval=approval)


class TokenBudget:
    """Ends a task (``BUDGET_EXCEEDED``) once its input+output tokens reach ``limit``
    (counted from characters when the server reports no usage), or its cost in USD reaches
    ``max_cost`` (a reply without a cost, from a profile without a price, ends it too)."""

    def __init__(self, agent: Any, limit: int | None, max_cost: float | None = None) -> None:
        self.agent = agent
        self.limit = limit
        self.max_cost = max_cost
        self.used = 0
        self.cost = 0.0
        self.estimated = False  # usage the server did not report was counted from characters

    def __call__(self, event: dict) -> None:
        kind = event.get("type")
        if kind == "task_start":
            self.used, self.cost = 0, 0.0
            self.estimated = False
        if kind != "usage":
            return
        self.used += int(event.get("input") or 0) + int(event.get("output") or 0)
        self.cost += event.get("cost") or 0.0
        self.estimated = self.estimated or bool(event.get("estimated"))
        about = ESTIMATE_MARK if self.estimated else ""
        if self.limit and self.used >= self.limit:
            self._stop(f"token budget of {self.limit} reached ({about}{self.used} tokens used, "
                       "--max-tokens)")
        elif self.max_cost and event.get("cost") is None:
            self._stop(f"cost budget of {format_usd(self.max_cost)} cannot be kept: "
                       f"{self.agent.llmclient.name} has no price (--max-cost)")
        elif self.max_cost and self.cost >= self.max_cost:
            self._stop(f"cost budget of {format_usd(self.max_cost)} reached ({about}"
                       f"{format_usd(self.cost)} spent, --max-cost)")

    def _stop(self, why: str) -> None:
        handler = self.agent.handler
        if handler is not None and not handler.exit_request:
            handler.exit_request = {"result": "BUDGET_EXCEEDED", "data": why}


class Session:
    """An agent plus its journal; runs tasks on a worker thread."""

    def __init__(self, agent: Any, home: Path, journal: Journal,
                 client_factory: Callable[[str], Any] | None = None,
                 command: str = "ga", keep_cwd: bool = False,
                 shared_tracer: bool = False) -> None:
        sweep_stale()  # temp dirs of runtimes killed with their watchdog (a glob, cheap)
        sweep_stale_locks(sessions_dir(home))  # and the session locks of killed runs
        self.agent = agent
        self.home = home
        self.journal = journal
        self.client_factory = client_factory
        self.command = command  # how the user runs ga here (with --home …), for hints
        self.keep_cwd = keep_cwd  # -C was given: a resumed session works there too
        agent.listeners.append(self._journal_event)
        self._watch_client(agent.llmclient)
        # None unless the OTEL_* variables ask for traces; a batch task uses its worker's
        self.shared_tracer = shared_tracer
        self.tracer = tracing.shared() if shared_tracer else tracing.start()
        if self.tracer is not None:
            self.tracer.watch(agent)
        self.aborted = False
        self._worker: threading.Thread | None = None
        self.pending_images: list[dict] = []  # go with the next task (--image, /image)

    def _watch_client(self, client: Any) -> None:
        """Provider events (retries, failover switches) join the task's events, for the
        renderer and the journal; the provider log is named after the session."""
        if hasattr(client, "on_event"):
            client.on_event = self.agent.provider_event
        if getattr(client, "log", None) is not None:
            client.log.session_id = self.journal.id

    @property
    def id(self) -> str:
        return self.journal.id

    def _journal_event(self, event: dict) -> None:
        self.journal(event)

    # ---- running ---------------------------------------------------------------------
    def submit(self, task: str, source: str = "user") -> queue.Queue:
        """Queue ``task`` on the agent's worker; its events arrive on the returned queue,
        always ending with ``task_end`` (a failed model or a crash ends it as FAILED)."""
        self.aborted = False
        if self._worker is None:
            self._worker = self.agent.start()
        events = self.agent.put_task(task, source, self.pending_images)
        self.pending_images = []
        return events

    def attach(self, images: list) -> list[dict]:
        """Images (paths, bytes) for the next task, checked now: a file that is no usable
        image, or a model that cannot see images, raises ``ConfigError``."""
        blocks = for_model(images, self.agent.llmclient)
        self.pending_images.extend(blocks)
        return blocks

    def drain(self, events: queue.Queue, render: Callable[[dict], None],
              tick: Callable[[], None] | None = None) -> dict:
        """Render events until ``task_end`` and return it; ``tick`` runs while waiting.
        A worker that is gone without one ends the task as FAILED: nothing waits forever."""
        while True:
            try:
                event = events.get(timeout=TICK_SECONDS)
            except queue.Empty:
                if tick is not None:
                    tick()
                if self._worker is None or self._worker.is_alive() or not events.empty():
                    continue
                from ga import failed_event

                event = dict(failed_event(WORKER_GONE, 0), session_id=self.id)
            try:
                render(event)
            except OSError as e:  # the console is gone: a terminal that hung up ends ga
                raise write_failed(e) from None
            if event.get("type") == "task_end":
                return event

    def run(self, task: str, render: Callable[[dict], None],
            tick: Callable[[], None] | None = None, source: str = "user") -> dict:
        """Run ``task`` to its end; Ctrl-C or SIGTERM stops it (``stop``) and propagates."""
        events = self.submit(task, source)
        try:
            return self.drain(events, render, tick)
        except STOPS as stop:
            self.stop(events, stop)
            raise

    def stop(self, events: queue.Queue, stop: BaseException | None = None,
             render: Callable[[dict], None] | None = None) -> None:
        """Abort the running task, wait (bounded) for its end — its code killed, the end
        journaled (and rendered, with ``render``), named for ``stop`` (Ctrl-C, SIGTERM,
        SIGHUP) — and flush the journal: the front end is about to exit."""
        self.abort(describe(stop) if stop is not None else None)
        deadline = time.monotonic() + ABORT_GRACE_SECONDS

        def tick() -> None:
            if time.monotonic() > deadline:
                raise TimeoutError

        try:
            self.drain(events, render or (lambda event: None), tick)
        except (TimeoutError, *STOPS):
            say("ga: the task did not stop in time")
        self.journal.close()

    def abort(self, reason: str | None = None) -> None:
        self.aborted = True
        self.agent.abort(reason)

    # ---- conversation management ------------------------------------------------------
    def new(self) -> None:
        """A fresh conversation with a new journal (the model stays)."""
        self.journal.close()
        self.agent.restore()
        self.journal = Journal(self.home, self.agent)
        self._watch_client(self.agent.llmclient)

    def resume(self, state: SessionState) -> None:
        """Continue a saved session: its conversation, in its folder (unless ``-C``)."""
        self.journal.close()
        if not self.keep_cwd and state.cwd and Path(state.cwd).is_dir():
            self.agent.cwd = Path(state.cwd)
        self.agent.restore(state.history, state.history_info, state.working, state.open_turn)
        self.journal = Journal(self.home, self.agent, state.id, state)
        self._watch_client(self.agent.llmclient)

    def seed(self, data: dict) -> None:
        """Start from a saved conversation (``--history FILE``, ``_history.json``); image
        references of an export get their data back from the home."""
        data = {**data, "history": ImageStore(self.home).internalize(data.get("history") or [])}
        self.agent.restore(data.get("history"), data.get("history_info"), data.get("working"),
                           data.get("open_turn"))
        self.journal.seed(data)

    def model_names(self) -> list[str]:
        client = self.agent.llmclient
        names = list(client.profiles()) if hasattr(client, "profiles") else [client.name]
        config = getattr(client, "config", None)
        for name in getattr(config, "profiles", {}) or {}:
            if name not in names:
                names.append(name)
        return names

    def switch_model(self, name: str) -> str:
        """``/model NAME``: switch profile, keeping the conversation. Returns the new name."""
        client = self.agent.llmclient
        try:
            client.switch(name)
        except ConfigError:
            if self.client_factory is None:
                raise
            new = self.client_factory(name)
            new.history = list(client.history)
            new.system = client.system
            self.agent.llmclient = new
            self._watch_client(new)
        self.journal.write({"type": "model", "name": self.agent.llmclient.name})
        return self.agent.llmclient.name

    def close(self) -> None:
        if self._worker is not None:
            self.agent.tasks.put(None)  # the worker ends after the task it is running
        self.journal.close()
        if self.tracer is not None and not self.shared_tracer:
            self.tracer.close()  # what is left is sent, waiting a moment at most


def read_history_file(path: str | Path) -> dict:
    """A saved conversation: a list of provider messages, or an ``export`` object
    (``{"history": [...], "history_info": [...], "working": {...}}``)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(str(p), None, f"cannot read history: {e.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(str(p), None, f"invalid history JSON: {e}") from None
    if isinstance(data, list):
        data = {"history": data}
    if not isinstance(data, dict) or "history" not in data:
        raise ConfigError(str(p), None, 'expected a list of messages or an object with a '
                          '"history" list (as /export and ga sessions export write)')
    for key, value in data.items():
        want = HISTORY_KEYS.get(key)
        if want is None:
            raise ConfigError(str(p), key, f"unknown key; allowed: {', '.join(HISTORY_KEYS)}")
        if not isinstance(value, want):
            raise ConfigError(str(p), key, f"expected a {want.__name__}, got "
                              f"{type(value).__name__}")
    for i, message in enumerate(data["history"]):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise ConfigError(str(p), f"history[{i}]",
                              "expected a message with role user or assistant")
    return data


def export_history(agent: Any, path: str | Path) -> Path:
    """Write the conversation (provider history, summaries, working memory) as JSON; images
    as references to ``<home>/images``, keys masked by the agent's redactor."""
    snapshot = ImageStore(agent.home).externalize(agent.snapshot())
    return write_export(path, agent.redactor.dumps(snapshot, indent=1))


def write_export(path: str | Path, text: str) -> Path:
    """Write an exported conversation to ``path``; a folder, a FIFO or a path that cannot be
    written is a usage error naming it."""
    import stat

    from tools.fsutil import atomic_write

    p = Path(path)
    if p.is_dir():
        raise ConfigError(str(p), None, "is a folder; name a file to write, e.g. "
                          f"{p / 'session.json'}")
    try:
        if p.exists() and not stat.S_ISREG(p.stat().st_mode):
            raise ConfigError(str(p), None, "is not a regular file; name a file to write")
        atomic_write(p, text)
    except OSError as e:  # no strerror: a file tool's refusal, e.g. a FIFO swapped in
        raise ConfigError(str(p), None, f"cannot write it ({e.strerror or 'not a regular file'})"
                          "; name a file in a folder you can write to") from None
    return p


def resolve_resume(home: Path, resume: str | None, cont: bool, cwd: Path) -> SessionState | None:
    """The session named by ``--resume ID`` / ``--resume`` (latest) / ``--continue``, locked
    for this process (``SessionBusy`` when another one has it open)."""
    if resume is None and not cont:
        return None
    if cont:
        path = latest_for_cwd(home, cwd)
        if path is None:
            raise ConfigError(None, "--continue", f"no saved session was started in {cwd}")
    elif resume:
        path = session_path(home, resume, "--resume")
    else:
        from .journal import list_sessions

        found = list_sessions(home)
        if not found:
            raise ConfigError(None, "--resume", "no saved sessions yet")
        path = found[0].path
    return claim_session(path)


def session_path(home: Path, session_id: str, field: str) -> Path:
    """The journal of a session id or unique prefix; an unknown or ambiguous one is an error."""
    path = find_session(home, session_id)
    if path is not None:
        return path
    matches = [p.stem for p in session_matches(home, session_id)]
    if not matches:
        raise ConfigError(None, field, f"no saved session {session_id!r} (ga sessions lists them)")
    shown = ", ".join(matches[:MATCHES_SHOWN]) + (", …" if len(matches) > MATCHES_SHOWN else "")
    raise ConfigError(None, field, f"{session_id!r} matches {len(matches)} sessions: {shown}; "
                      "give more of the id")


def report_end(session: Session, end: dict, answer_hint: bool = True) -> int:
    """The end of a task on stderr (why it stopped, the session id); returns the exit code.
    A model failure is one line naming provider, status and message. An ``ask_user`` stop
    says how to answer (unless the front end asks itself)."""
    message = end_message(end)
    if end.get("model_error"):
        say(f"ga: {end['error']}")
        print_session_id(session)
        return exit_code(end)
    if message:
        say(f"ga: {message}")
    if answer_hint and end.get("question") is not None:
        say(f"ga: the agent is waiting for your answer; reply with:\n"
            f"  {session.command} --resume {session.id} \"ANSWER\"")
        return exit_code(end)
    print_session_id(session)
    return exit_code(end)


def print_session_id(session: Session, out: Any = None) -> None:
    out = out or sys.stderr
    if session.journal.failed:
        say(f"ga: session {session.id} was not saved: its journal could not be written", out)
        return
    say(f"ga: session {session.id} (continue with: {session.command} --resume {session.id})",
        out)
