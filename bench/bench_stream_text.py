"""Streamed text gathering is linear: a 20 MB reply costs about 20× a 1 MB one.

    python bench/bench_stream_text.py [--sizes 1,10,20] [--chunk 256]

For each size (MB) it times, against the 1 MB run as the baseline of the same run:
1. the whole provider path: an OpenAI Chat stream from the local test server through the
   official SDK and the session (``LLMResponse.content`` / ``thinking``);
2. the session journal's stream buffer (``frontends/journal.py``), 16-character deltas;
3. the L4 transcript (``memory/archive.py``), 16-character deltas;
4. the stream redactor (``llmcore/secrets.py``), 16-character deltas of text holding a
   configured key, key shapes and long key-shaped runs.
Target: the 20 MB ratio stays near 20 (quadratic gathering gave 66 s at 10 MB, 227 s at 20 MB).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from llm_server import LLMServer, Reply, run_chat, write_config  # noqa: E402

import llmcore  # noqa: E402
from frontends.journal import Journal  # noqa: E402
from llmcore.secrets import Redactor  # noqa: E402
from memory.archive import Transcript  # noqa: E402

MB = 1_000_000
KEY = "sk-ant-api03-" + "k" * 90
REDACTED_TEXT = (f"The key is {KEY}, keep it safe. A stray sk-proj-{'x' * 60} and sk- s sk "
                 f"then a run sk-{'r' * 2000} and a task list:\n- one\n- two\n")
DELTA_CHARS = 16  # journal / transcript delta size (a few tokens, as streamed)


def provider_path(server: LLMServer, home: Path, size: int, chunk: int) -> float:
    cfg = write_config(home, server, p={"provider": "openai", "model": "bench",
                                        "read_timeout": 600, "request_timeout": 3600})
    client = llmcore.make_client("p", config_path=cfg, home=home)
    text = ("The quick brown fox jumps over the lazy dog. " * (size // 45 + 1))[:size]
    server.queue(Reply(text=text, chunk=chunk))
    start = time.perf_counter()
    _, resp = run_chat(client, [{"role": "user", "content": "write a lot"}])
    elapsed = time.perf_counter() - start
    assert len(resp.content) == size
    return elapsed


def journal_buffer(home: Path, size: int) -> float:
    agent = SimpleNamespace(llmclient=SimpleNamespace(name="bench"), cwd=str(home))
    journal = Journal(home, agent)
    event = {"type": "text", "delta": "x" * DELTA_CHARS}
    start = time.perf_counter()
    for _ in range(size // DELTA_CHARS):
        journal(event)
    journal.close()
    return time.perf_counter() - start


def transcript(size: int) -> float:
    record = Transcript().record
    event = {"type": "text", "delta": "x" * DELTA_CHARS}
    start = time.perf_counter()
    for _ in range(size // DELTA_CHARS):
        record(event)
    record({"type": "turn", "turn": 2})
    return time.perf_counter() - start


def stream_redactor(size: int) -> float:
    stream = Redactor([KEY, "hunter2-secret-pw"]).stream()
    text = (REDACTED_TEXT * (size // len(REDACTED_TEXT) + 1))[:size]
    start = time.perf_counter()
    for i in range(0, size, DELTA_CHARS):
        stream.feed(text[i:i + DELTA_CHARS])
    stream.flush()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1,10,20", help="reply sizes in MB; the first is the base")
    ap.add_argument("--chunk", type=int, default=256, help="characters per streamed SSE event")
    args = ap.parse_args()
    sizes = [int(float(s) * MB) for s in args.sizes.split(",")]
    server = LLMServer().start()
    home = Path(tempfile.mkdtemp())
    rows = []
    for size in sizes:
        rows.append((size, provider_path(server, home, size, args.chunk),
                     journal_buffer(home, size), transcript(size), stream_redactor(size)))
    server.stop()
    base = rows[0]
    print(f"{'reply':>7}{'provider s':>12}{'ratio':>7}{'journal s':>11}{'ratio':>7}"
          f"{'transcript s':>14}{'ratio':>7}{'redactor s':>12}{'ratio':>7}{'ideal':>7}")
    for size, prov, jour, tran, red in rows:
        print(f"{size / MB:>5g}MB{prov:>12.2f}{prov / base[1]:>7.1f}{jour:>11.3f}"
              f"{jour / base[2]:>7.1f}{tran:>14.3f}{tran / base[3]:>7.1f}"
              f"{red:>12.3f}{red / base[4]:>7.1f}{size / base[0]:>7.1f}")


if __name__ == "__main__":
    main()
