"""LLM providers behind one small interface (see ``llmcore.base``).

Provider classes are imported lazily by dotted path so ``ga --help`` stays fast.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from .base import Client, ConfigError, LLMError, LLMResponse, ThinkingChunk, ToolCall, Usage

PROVIDERS: dict[str, str] = {
    "scripted": "llmcore.scripted:ScriptedClient",
    "openai": "llmcore.openai_chat:OpenAIChat",
    "openai-responses": "llmcore.openai_responses:OpenAIResponses",
    "anthropic": "llmcore.anthropic_messages:AnthropicMessages",
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
                home: str | Path | None = None, redactor: Any = None) -> Client:
    """Build the client for ``-m MODEL``: a profile name, ``provider:model`` or ``scripted:PATH``.

    No model: the config's ``default``, else ``$GA_MODEL``. Config file: ``config_path``,
    else ``$GA_CONFIG``, else ``<home>/config.yaml``. ``redactor`` (``llmcore.secrets``)
    masks keys in the client's logs and errors; by default one is built from the config.
    """
    from .config import home_dir, open_config, select
    from .session import LLMSession

    cfg = open_config(config_path, home)
    profile = select(cfg, model)
    if profile.provider == "scripted" and not profile.mixin:
        client = load_class("scripted")(profile.script, name=profile.name,
                                        vision=profile.vision is not False, price=profile.price)
        client.config = cfg
        return client
    return LLMSession(cfg, profile, home_dir(home), load_class, redactor)
