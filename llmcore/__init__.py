"""LLM providers behind one small interface (see ``llmcore.base``).

Provider classes are imported lazily by dotted path so ``ga --help`` stays fast.
"""

from __future__ import annotations

import importlib

from .base import Client, ConfigError, LLMError, LLMResponse, ThinkingChunk, ToolCall, Usage

PROVIDERS: dict[str, str] = {
    "scripted": "llmcore.scripted:ScriptedClient",
}

__all__ = [
    "PROVIDERS",
    "Client",
    "ConfigError",
    "LLMError",
    "LLMResponse",
    "ThinkingChunk",
    "ToolCall",
    "Usage",
    "load_class",
    "make_client",
]


def load_class(kind: str) -> type:
    module, _, attr = PROVIDERS[kind].partition(":")
    return getattr(importlib.import_module(module), attr)


def make_client(model: str | None = None, *, config_path: str | None = None,
                home: str | None = None) -> Client:
    """Build the client for ``-m MODEL`` (a profile name or ``provider:model``)."""
    if model and model.startswith("scripted:"):
        return load_class("scripted")(model.split(":", 1)[1])
    raise ConfigError(config_path, "model", f"unknown model {model!r}; try scripted:PATH")
