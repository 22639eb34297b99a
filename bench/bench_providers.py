"""Provider speed against the local test server (no network, no key).

1. Per-turn overhead of each provider kind vs a bare httpx POST of the same body, and vs
   the same request through the official SDK alone (what the SDK itself costs per chunk).
2. Delay from the server sending the first text chunk to the consumer receiving it.
3. Request size over a 150-turn file-reading task vs the profile's context budget.

Run: python bench/bench_providers.py
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import httpx2  # noqa: E402
from llm_server import KIND_PATHS, LLMServer, Reply, run_chat, tool_schema, write_config  # noqa: E402

import llmcore  # noqa: E402

TURNS = 60
REPLY = Reply(text="The answer is forty-two, as computed. " * 4, chunk=12)
CONTEXT_WIN = 20000  # tokens, for the long task
LONG_TURNS = 150
FILE_CHARS = 3000


def make(server: LLMServer, home: Path, **prof) -> object:
    cfg = write_config(home, server, p={"model": "bench-model", **prof})
    return llmcore.make_client("p", config_path=cfg, home=home)


def per_turn(server: LLMServer, home: Path, kind: str) -> tuple[float, float]:
    client = make(server, home, provider=kind)
    msgs = [{"role": "user", "content": "hi"}]
    for _ in range(5):  # warm up connections and imports
        server.queue(REPLY)
        run_chat(client, msgs)
        client.history = []
    start = time.perf_counter()
    for _ in range(TURNS):
        server.queue(REPLY)
        run_chat(client, msgs)
        client.history = []
    ours = (time.perf_counter() - start) / TURNS
    body = server.bodies()[-1]
    url = f"http://127.0.0.1:{server.port}{KIND_PATHS[kind]}"
    with httpx2.Client() as http:
        start = time.perf_counter()
        for _ in range(TURNS):
            server.queue(REPLY)
            with http.stream("POST", url, json=body) as resp:
                for _line in resp.iter_lines():
                    pass
        bare = (time.perf_counter() - start) / TURNS
    return ours, bare


def bare_sdk(server: LLMServer, kind: str, body: dict) -> float:
    """The same request through the SDK alone (no session, retries, history or logs)."""
    import anthropic
    import openai

    url = f"http://127.0.0.1:{server.port}"
    if kind == "anthropic":
        call = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0).messages.create
    else:
        client = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
        call = client.responses.create if kind == "openai-responses" else (
            client.chat.completions.create)
    start = time.perf_counter()
    for _ in range(TURNS):
        server.queue(REPLY)
        for _event in call(**body):
            pass
    return (time.perf_counter() - start) / TURNS


def first_chunk_delay(server: LLMServer, home: Path, kind: str) -> float:
    client = make(server, home, provider=kind)
    delays = []
    for _ in range(20):
        server.queue(Reply(text="hello-first-chunk", chunk=17, stall_after=2, stall=0.01))
        server.sent.clear()
        gen = client.chat([{"role": "user", "content": "hi"}])
        for _chunk in gen:
            got = time.perf_counter()
            sent = next(t for t, data in server.sent if "hello-first-chunk" in data)
            delays.append(got - sent)
            break
        gen.close()
        client.history = []
    return statistics.median(delays)


def long_task(server: LLMServer, home: Path, kind: str) -> tuple[int, int, int]:
    client = make(server, home, provider=kind, context_win=CONTEXT_WIN)
    tools = [tool_schema("file_read", path="string")]
    server.requests.clear()
    msgs = [{"role": "system", "content": "You read files."},
            {"role": "user", "content": "Read every file and summarise."}]
    for turn in range(LONG_TURNS):
        server.queue(Reply(text=f"<summary>reading part {turn}</summary>",
                           tool_calls=[("file_read", json.dumps({"path": f"part{turn}.txt"}))]))
        _, resp = run_chat(client, msgs, tools)
        anchor = f"### [WORKING MEMORY]\nCurrent turn: {turn}\n<key_info>reading parts</key_info>"
        msgs = [{"role": "user", "content": anchor, "tool_results": [
            {"tool_use_id": resp.tool_calls[0].id, "content": f"{turn}|" + "x" * FILE_CHARS}]}]
    sizes = [len(json.dumps(r["body"])) for r in server.requests]
    return max(sizes), int(statistics.mean(sizes)), CONTEXT_WIN * 3


def main() -> None:
    server = LLMServer().start()
    home = Path(tempfile.mkdtemp())
    print(f"{'kind':<18}{'ours ms':>9}{'bare ms':>9}{'ratio':>7}{'sdk ms':>8}{'vs sdk':>8}"
          f"{'1st chunk ms':>14}{'max req B':>11}{'mean req B':>12}{'budget ch':>11}")
    for kind in ("openai", "openai-responses", "anthropic"):
        ours, bare = per_turn(server, home, kind)
        sdk = bare_sdk(server, kind, server.bodies()[-1])
        delay = first_chunk_delay(server, home, kind)
        biggest, mean, budget = long_task(server, home, kind)
        print(f"{kind:<18}{ours * 1e3:>9.2f}{bare * 1e3:>9.2f}{ours / bare:>7.2f}"
              f"{sdk * 1e3:>8.2f}{ours / sdk:>8.2f}"
              f"{delay * 1e3:>14.3f}{biggest:>11}{mean:>12}{budget:>11}")
    server.stop()


if __name__ == "__main__":
    main()
