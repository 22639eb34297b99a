"""Plugins (SPEC §2): Python files in ``<home>/plugins/``, files named with ``--plugin``,
and installed packages exposing the ``genericagent.plugins`` entry point. A plugin defines
``register(api)``; ``api.tool(fn)`` adds a ``do_`` tool and ``api.on(event, fn)`` a hook.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

from agent_loop import HOOK_EVENTS, Hooks
from ga import GenericAgentHandler
from tools.spec import tool

log = logging.getLogger("ga.plugins")


class PluginAPI:
    """What a plugin's ``register(api)`` gets: hook callbacks and extra ``do_`` tools.

    What one plugin registers is kept only when its ``register`` returns: a plugin that
    fails half-way leaves nothing behind."""

    def __init__(self, hooks: Hooks) -> None:
        self.hooks = hooks
        self.tools: dict[str, Any] = {}
        self.sources: dict[str, str] = {}  # tool name -> the plugin it came from
        self._tools: dict[str, Any] = {}
        self._hooks: list[tuple[str, Any]] = []

    def on(self, event: str, fn: Any) -> None:
        if event not in HOOK_EVENTS:
            raise ValueError(f"unknown hook event {event!r}; known: {', '.join(HOOK_EVENTS)}")
        self._hooks.append((event, fn))

    def tool(self, fn: Any) -> Any:
        """Add ``do_<name>``: a ``@tool`` method, the original ``do_x(self, args, response)``
        form, or a typed, documented function whose schema is derived here."""
        name = getattr(fn, "__name__", "")
        if not name.startswith("do_"):
            raise ValueError(f"a plugin tool must be named do_<name>, got {name or fn!r}")
        self._tools[name] = plugin_tool(fn)
        return fn

    def load(self, source: str, register: Any) -> None:
        """Run ``register(self)``; keep what it registered only if it returns."""
        self._tools, self._hooks = {}, []
        try:
            register(self)
            for event, fn in self._hooks:
                self.hooks.on(event, fn)
            self.tools.update(self._tools)
            self.sources.update(dict.fromkeys((n[3:] for n in self._tools), source))
        finally:
            self._tools, self._hooks = {}, []


def plugin_tool(fn: Any) -> Any:
    if hasattr(fn, "__tool_spec__"):
        return fn
    import inspect

    if list(inspect.signature(fn).parameters)[1:3] == ["args", "response"]:
        return fn  # the original's form: it reads args itself
    try:
        return tool(fn)
    except TypeError as e:
        raise TypeError(f"{e} (api.tool derives the schema from type hints and an Args: "
                        "docstring, as @tool does; or take (self, args, response))") from None


@functools.lru_cache(maxsize=1)
def installed_plugins() -> tuple:
    """The ``genericagent.plugins`` entry points of the installed packages, read once per
    process: the scan reads every package's metadata (12 ms with a few hundred installed),
    and a batch worker or ``ga acp`` opens many sessions."""
    from importlib.metadata import entry_points

    return tuple(entry_points(group="genericagent.plugins"))


def plugin_sources(home: Path, files: tuple = ()) -> list[tuple[str, Any]]:
    """``<home>/plugins/*.py``, ``genericagent.plugins`` entry points, then ``--plugin`` files."""
    sources: list[tuple[str, Any]] = [(str(p), p) for p in sorted((home / "plugins").glob("*.py"))]
    sources += [(f"entry point {ep.name} ({ep.value})", ep) for ep in installed_plugins()]
    sources += [(str(Path(f)), Path(f)) for f in files]
    return sources


def load_plugins(home: Path, api: PluginAPI, files: tuple = ()) -> None:
    """Load every plugin; one that fails is reported and skipped, leaving nothing registered."""
    import importlib.util

    for name, src in plugin_sources(home, files):
        try:
            if isinstance(src, Path):
                spec = importlib.util.spec_from_file_location(f"ga_plugin_{src.stem}", src)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
            else:
                module = src.load()
            api.load(name, module.register)
        except (Exception, SystemExit) as e:  # a broken plugin is reported and skipped
            log.warning("plugin %s failed to load: %s: %s", name, type(e).__name__, e)


def handler_with_plugins(api: PluginAPI) -> type[GenericAgentHandler]:
    if not api.tools:
        return GenericAgentHandler
    return type("PluginHandler", (GenericAgentHandler,), dict(api.tools))
