"""The session a run opens (SPEC §7): the agent, the journal — new, or the resumed one with
its history — the token budget; a resumed session keeps its model and folder unless ``-m``
or ``-C`` names others. Every front end that runs tasks opens its sessions here: the
one-shot run, the REPL, task mode, and each task of a batch.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmcore.base import ConfigError

from .terminal import mask_logs, say

if TYPE_CHECKING:
    from .journal import SessionState
    from .runner import Session


def resume_command(args) -> str:
    """How to run ga again with the same home and config, from any folder (for printed
    hints: a resumed session finds its working folder itself)."""
    parts = ["ga"]
    for flag, value in (("--home", args.home), ("--config", args.config)):
        if value:
            parts += [flag, shlex.quote(os.path.abspath(os.path.expanduser(value)))]
    return " ".join(parts)


def session_folder(args, state: SessionState) -> None:
    """A resumed session works in its recorded folder unless ``-C`` names another."""
    if args.cwd or not state.cwd:
        return
    if not Path(state.cwd).is_dir():
        raise ConfigError(None, "--resume", f"session {state.id} worked in {state.cwd}, "
                          "which is no longer a folder; choose one with -C")
    args.cwd = state.cwd


def open_session(args, home: Path, state: SessionState | None, mcp_servers: tuple = (),
                 can_ask: bool | None = None, shared_tracer: bool = False) -> Session:
    """The agent, the journal (new, or the resumed one), the seed history and the token
    budget. A resumed session keeps its recorded model and folder unless ``-m``/``-C``
    is given. ``mcp_servers`` and ``can_ask`` go to ``make_agent`` (``ga acp``: the
    editor's servers, and a person who answers); ``shared_tracer``: the process's tracer
    (a batch task's), left open when the session closes."""
    from llmcore import make_client
    from llmcore.secrets import home_redactor

    from .approve import mechanism_warning
    from .journal import Journal
    from .runner import Session, TokenBudget, load_tools, make_agent

    keep_cwd = bool(args.cwd)
    if state is not None:
        session_folder(args, state)
    api = load_tools(args, home)
    redactor = home_redactor(home, args.config)  # the one redactor every writer uses
    mask_logs(redactor)
    client = resumed_client(args, home, state, redactor) if state else make_client(
        args.model, config_path=args.config, home=home, redactor=redactor)
    agent = make_agent(args, home, client, api, redactor, mcp_servers, state, can_ask)
    for warning in (mechanism_warning(agent.sandbox),
                    agent.sandbox.exposed_code(agent.cwd, agent.memory.dir)):
        if warning:
            say(f"ga: warning: {warning}")
    if state is not None:
        agent.restore(state.history, state.history_info, state.working, state.open_turn)
        say(f"ga: resumed session {state.id} ({state.turns} turns, model {client.name})")
    journal = Journal(home, agent, state.id if state else None, state)
    session = Session(agent, home, journal,
                      lambda name: make_client(name, config_path=args.config, home=home,
                                               redactor=agent.redactor),
                      command=resume_command(args), keep_cwd=keep_cwd,
                      shared_tracer=shared_tracer)
    agent.listeners.append(TokenBudget(agent, args.max_tokens, max_cost(args, client)))
    return session


def resumed_client(args, home: Path, state: SessionState, redactor: Any = None) -> Any:
    """The client of a resumed session: ``-m``, else the model the session last used."""
    from llmcore import make_client

    if args.model or not state.model:
        return make_client(args.model, config_path=args.config, home=home, redactor=redactor)
    try:
        return make_client(state.model, config_path=args.config, home=home, redactor=redactor)
    except ConfigError as e:
        raise ConfigError(None, "--resume", f"session {state.id} used model {state.model!r}, "
                          f"which cannot be used now ({e}); choose one with -m") from None


def max_cost(args, client: Any) -> float | None:
    """``--max-cost``: a budget needs a price on every profile that may answer."""
    limit = getattr(args, "max_cost", None)
    unpriced = getattr(client, "unpriced", list)() if limit else []
    if unpriced:
        raise ConfigError(None, "--max-cost", f"model {', '.join(unpriced)} has no price, so "
                          "no cost can be counted; give its profile price: {input: USD, "
                          "output: USD} (per million tokens) in the config")
    return limit
