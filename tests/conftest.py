"""Test isolation: a temp home and cwd per test, no API keys, no outside network."""

from __future__ import annotations

import ipaddress
import os
import socket

import pytest

KEY_VARS = (
    "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL",
    "ANTHROPIC_AUTH_TOKEN", "GA_MODEL", "GA_CONFIG", "GA_LANG", "DEEPSEEK_API_KEY",
    "OPENROUTER_API_KEY", "MOONSHOT_API_KEY",
)


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    home = tmp_path / "home"
    work = tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("GA_HOME", str(home))
    for var in KEY_VARS:
        monkeypatch.delenv(var, raising=False)
    for var in [v for v in os.environ if v.startswith("OTEL_")]:  # tracing is asked per test
        monkeypatch.delenv(var)
    monkeypatch.setenv("GA_LANG", "en")
    monkeypatch.chdir(work)
    return home


@pytest.fixture
def home(isolated):
    return isolated


def _is_loopback(address) -> bool:
    host = address[0] if isinstance(address, tuple) else address
    if not isinstance(host, str):
        return True
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch):
    real_connect = socket.socket.connect

    def guarded(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address):
            raise OSError(f"tests may not connect outside loopback: {address!r}")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)


@pytest.fixture
def run_agent(isolated):
    """Run one task through a scripted model: returns (agent, client, events)."""
    from pathlib import Path

    from ga import GenericAgent
    from llmcore.scripted import ScriptedClient

    def run(script, task="do the task", agent=None, **kw):
        if agent is None:
            agent = GenericAgent(ScriptedClient(script), home=isolated, cwd=Path.cwd(), **kw)
        else:
            agent.llmclient.steps.extend(script)
        events = list(agent.run_task(task))
        return agent, agent.llmclient, events

    return run
