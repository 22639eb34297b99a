"""The browser as its own room: a real Chromium (or the user's Chrome) over the DevTools
Protocol. ``cdp`` speaks the protocol, ``launch`` decides how a browser is found, started
and cleaned up, ``browser`` holds the session and its tabs, ``tab`` one page, ``limits``
the deadline and abort of the web call running, ``extract.js`` turns a page into text,
``scan`` and ``execute`` are the bodies of ``web_scan`` and ``web_execute_js``.

Importing this package starts nothing and needs no websocket client; the browser starts
at the first web call.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from .cdp import EXTRA_HINT
from .launch import INSTALL_HINT, BrowserConfig, BrowserUnavailable

WEB_TOOLS = ("web_scan", "web_execute_js")
SCAN_CHARS = 35_000  # page text budget at the base context window
EXEC_CHARS = 8_000  # web_execute_js result budget at the base context window
BASE_CONTEXT = 35_000
MAX_SCALE = 3.0

__all__ = ["BrowserConfig", "BrowserUnavailable", "EXTRA_HINT", "INSTALL_HINT", "WEB_TOOLS",
           "budget", "reply_budget", "unavailable_reason", "web_calls"]


def budget(base: int, context_win: int | None = None, calls: int = 1) -> int:
    """``base`` chars scaled by context_win / 35,000 (1–3×), shared by ``calls`` web calls."""
    scale = min(max((context_win or BASE_CONTEXT) / BASE_CONTEXT, 1.0), MAX_SCALE)
    return int(base * scale / max(calls, 1))


def reply_budget(base: int, client: Any, response: Any) -> int:
    """``budget`` for one web call of the model's reply, at the client's context window."""
    context_win = getattr(getattr(client, "profile", None), "context_win", None)
    return budget(base, context_win, web_calls(response))


def web_calls(response: Any) -> int:
    """How many web tool calls the model's reply holds (at least 1)."""
    names = [getattr(getattr(c, "function", None), "name", "")
             for c in getattr(response, "tool_calls", None) or []]
    return max(1, sum(1 for n in names if n in WEB_TOOLS))


def unavailable_reason(cfg: BrowserConfig) -> str | None:
    """Why the web tools cannot be offered, or None when a browser is configured or found."""
    if importlib.util.find_spec("websocket") is None:
        return EXTRA_HINT
    return cfg.unavailable_reason()
