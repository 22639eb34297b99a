"""Fixtures for the real-server tests: llama-cpp-python's server, started once per run.

They take about a minute, so they run only with ``GA_REALSERVER=1``; without
llama-cpp-python or the SmolLM2 GGUF they then skip and say why. With
``GA_REALSERVER=require`` (set by .ci/run) they fail instead, so CI cannot pass without them.
"""

from __future__ import annotations

import os

import llamaserver
import pytest

OVERFLOW_CTX = 1024  # a server context that ga's first prompt does not fit


def _server(factory, name: str, **kw):
    mode = os.environ.get("GA_REALSERVER", "")
    if not mode:
        pytest.skip("real-server tests run with GA_REALSERVER=1 (about a minute; .ci/run "
                    "sets it)")
    reason = llamaserver.missing()
    if reason:
        if mode == "require":
            pytest.fail(f"GA_REALSERVER=require but {reason}")
        pytest.skip(reason)
    return llamaserver.start(factory.mktemp(name) / "server.log", **kw)


@pytest.fixture(scope="session")
def llama(tmp_path_factory):
    server = _server(tmp_path_factory, "llama")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def small_llama(tmp_path_factory):
    server = _server(tmp_path_factory, "small_llama", n_ctx=OVERFLOW_CTX)
    yield server
    server.stop()
