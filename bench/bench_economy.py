"""Token economy and turn cost of long tasks, through the real SDKs against the local server.

    python bench/bench_economy.py [--kinds openai,anthropic] [--workloads E1,E2]
                                  [--rss-turns 1000] [--repeat 3] [--context-win TOKENS]

The whole agent runs (tools, working memory, journal); the model is the local test server
replaying a script, so every request is built and sent exactly as it would be live.

Workloads:
  E1  150 turns, each ``file_read(path, start=1 + (i * 200) % 2000)`` (200 lines) of a
      2,000-line file whose line i is ``line 0001: the quick brown fox jumps over the lazy
      dog, payload=7919`` (payload = i * 7919 % 100003).
  E2  ``update_working_checkpoint(key_info="ECON-KEY-7")``, then 60 turns of python
      ``print('E{i}-' + 'x' * 3000)``.
Each reply carries a one-line ``<summary>``; the task is "Run the benchmark tool calls.
Reply DONE. at the end."; a final text reply ends it.

Per workload and provider kind it prints:
  requests, mean chars   a request's *conversation* is system + tools + messages serialised
                         compactly (cache markers included, as sent)
  prefix reuse           summed over requests, the longest common prefix with the previous
                         request's conversation, divided by all characters sent
  cost                   cache-weighted cost: sum of (chars - 0.9 * common prefix), since
                         prompt caches bill a cached prefix at about a tenth
  max bytes              the largest request body on the wire
  key_info               share of requests after the checkpoint whose newest message carries
                         ``<key_info>ECON-KEY-7</key_info>`` (E2)
  turn ms                median server-side gap between the end of one answer and the
                         next request: everything the runtime does per turn (pooled over
                         ``--repeat`` runs)
  SDK ms                 the same gap when the bare SDK sends a typical request of the run
                         back to back: the floor no runtime goes under (same run, same load)
  RSS MB                 growth of the process's resident memory over a ``--rss-turns``
                         run of the same workload (0 skips it)

Targets: E1 cost <= 4.8 M and E2 <= 0.75 M chars (0.7x the original's 6.86 M / 1.07 M),
prefix reuse >= 75 % on E1 and >= 85 % on E2, key_info 100 %, mean chars at most the
original's (E1 84,285; E2 66,988), E1 turn <= 4 ms median (original: 8 ms), RSS growth
< 20 MB over 1,000 turns.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from llm_server import LLMServer, Reply, write_config  # noqa: E402

import llmcore  # noqa: E402
from frontends.journal import Journal  # noqa: E402
from ga import GenericAgent  # noqa: E402

KINDS = ("openai", "openai-responses", "anthropic")
TASK = "Run the benchmark tool calls. Reply DONE. at the end."
FILE_LINES = 2000
READ_LINES = 200
PAYLOAD_MUL = 7919
PAYLOAD_MOD = 100003
E1_TURNS = 150
E2_TURNS = 60
E2_PRINT = 3000
KEY_INFO = "ECON-KEY-7"
CACHED_SHARE = 0.9  # a cached prefix is billed at about a tenth
RSS_TURNS = 1000
FLOOR_TURNS = 60
REPEAT = 3
PATH_OF = {"openai": "/chat/completions", "openai-responses": "/responses",
           "anthropic": "/v1/messages"}  # relative to each SDK's base URL
TARGETS = {"E1": "cost <= 4.8 M, reuse >= 75 %, mean <= 84,285, turn <= 4 ms",
           "E2": "cost <= 0.75 M, reuse >= 85 %, mean <= 66,988, key_info 100 %"}


def big_file(folder: Path) -> Path:
    path = folder / "big.txt"
    lines = [f"line {i:04d}: the quick brown fox jumps over the lazy dog, "
             f"payload={i * PAYLOAD_MUL % PAYLOAD_MOD}" for i in range(1, FILE_LINES + 1)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def call(name: str, args: dict, turn: int) -> Reply:
    return Reply(text=f"<summary>turn {turn}: {name}</summary>",
                 tool_calls=[(name, json.dumps(args))], chunk=64)


def e1_script(turns: int) -> list[Reply]:
    return [call("file_read", {"path": "big.txt", "start": 1 + (i * READ_LINES) % FILE_LINES},
                 i) for i in range(turns)]


def e2_script(turns: int) -> list[Reply]:
    steps = [call("update_working_checkpoint", {"key_info": KEY_INFO}, 0)]
    return steps + [call("code_run", {"script": f"print('E{i}-' + 'x' * {E2_PRINT})"}, i + 1)
                    for i in range(turns)]


# name: (script, turns, index of the first request after the checkpoint)
WORKLOADS = {"E1": (e1_script, E1_TURNS, None), "E2": (e2_script, E2_TURNS, 1)}


def conversation(path: str, body: dict) -> str:
    """system + tools + messages of one request body, compact JSON."""
    if path == "/v1/messages":
        parts = [body.get("system"), body.get("tools"), body.get("messages")]
    elif path == "/v1/responses":
        parts = [body.get("instructions"), body.get("tools"), body.get("input")]
    else:
        msgs = body.get("messages") or []
        head = msgs[:1] if msgs and msgs[0].get("role") == "system" else []
        parts = [head, body.get("tools"), msgs[len(head):]]
    return json.dumps(parts, ensure_ascii=False, separators=(",", ":"))


def newest_message(path: str, body: dict) -> str:
    items = body.get("input" if path == "/v1/responses" else "messages") or [{}]
    return json.dumps(items[-1], ensure_ascii=False)


def common_prefix(a: str, b: str) -> int:
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:  # the longest k with a[:k] == b[:k], by halving (slices compare in C)
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def gaps(records: list[dict]) -> list[float]:
    """Seconds from the end of one answer to the arrival of the next request."""
    return [b["received"] - a["done"] for a, b in zip(records, records[1:], strict=False)]


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3 if samples else 0.0


def figures(records: list[dict], keyed_from: int | None) -> dict:
    """The per-workload figures over the requests of one run, in order."""
    chars = prefix = 0
    prev = ""
    keyed = []
    for n, record in enumerate(records):
        text = conversation(record["path"], record["body"])
        chars += len(text)
        prefix += common_prefix(prev, text)
        prev = text
        if keyed_from is not None and n >= keyed_from:
            newest = newest_message(record["path"], record["body"])
            keyed.append(f"<key_info>{KEY_INFO}</key_info>" in newest)
    return {"requests": len(records), "mean": chars / max(len(records), 1),
            "reuse": prefix / max(chars, 1), "cost": chars - CACHED_SHARE * prefix,
            "max_bytes": max(r["bytes"] for r in records),
            "key_info": sum(keyed) / len(keyed) if keyed else None}


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def run(server: LLMServer, kind: str, workload: str, turns: int, context_win: int | None,
        keep: bool = True) -> tuple[list[dict], int]:
    """One task of ``turns`` tool turns: its requests (``keep``: all of them) and the growth
    of the process's RSS over it."""
    script, _, _ = WORKLOADS[workload]
    with tempfile.TemporaryDirectory() as tmp:
        home, work = Path(tmp, "home"), Path(tmp, "work")
        work.mkdir(parents=True)
        big_file(work)
        prof = {"provider": kind, "model": "bench-model"}
        if context_win:
            prof["context_win"] = context_win
        client = llmcore.make_client("p", config_path=write_config(Path(tmp), server, p=prof),
                                     home=home)
        agent = GenericAgent(client, home=home, cwd=work, max_turns=turns + 5)
        journal = Journal(home, agent)
        agent.listeners.append(journal)
        server.requests.clear()
        server.queue(*script(turns), Reply(text="<summary>finished</summary>DONE."))
        gc.collect()
        before = rss_bytes()
        for event in agent.run_task(TASK):
            if not keep and event["type"] == "turn":
                server.requests.clear()  # a long run keeps no bodies (they are not its RSS)
                server.sent.clear()
        journal.close()
        gc.collect()
        grown = rss_bytes() - before
        if event.get("result") != "CURRENT_TASK_DONE":
            raise SystemExit(f"{kind} {workload}: the task ended with {event}")
    return list(server.requests), grown


def sdk_floor(server: LLMServer, kind: str, record: dict) -> list[float]:
    """The gaps when the SDK alone sends one recorded request body back to back: the part of
    a turn no runtime can avoid (stream parsing, HTTP, the test server), same run."""
    import anthropic
    import openai
    from anthropic.types import Message, RawMessageStreamEvent
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
    from openai.types.responses import Response, ResponseStreamEvent

    raw = json.dumps(record["body"], ensure_ascii=False, separators=(",", ":")).encode()
    if kind == "anthropic":
        client = anthropic.Anthropic(base_url=server.anthropic_url, api_key="k", max_retries=0)
        send = (PATH_OF[kind], Message, anthropic.Stream[RawMessageStreamEvent])
    else:
        client = openai.OpenAI(base_url=server.openai_url, api_key="k", max_retries=0)
        send = ((PATH_OF[kind], Response, openai.Stream[ResponseStreamEvent])
                if kind == "openai-responses" else
                (PATH_OF[kind], ChatCompletion, openai.Stream[ChatCompletionChunk]))
    server.requests.clear()
    path, cast_to, stream_cls = send
    for i in range(FLOOR_TURNS):
        server.queue(call("file_read", {"path": "big.txt", "start": 1}, i))
        for _event in client.post(path, cast_to=cast_to, content=raw, stream=True,
                                  stream_cls=stream_cls):
            pass
    return gaps(server.requests)


def fmt(row: dict, turn: float, floor: float, rss: int | None) -> str:
    key = "-" if row["key_info"] is None else f"{row['key_info'] * 100:.0f}%"
    mem = "-" if rss is None else f"{rss / 2**20:.1f}"
    return (f"{row['requests']:>5}{row['mean']:>10,.0f}{row['reuse'] * 100:>8.1f}%"
            f"{row['cost'] / 1e6:>9.2f}M{row['max_bytes']:>11,}{key:>9}"
            f"{turn:>9.2f}{floor:>9.2f}{mem:>9}")


def measure(server: LLMServer, kind: str, workload: str, args: argparse.Namespace) -> str:
    """One row: figures from the first run, turn times pooled over ``--repeat`` runs (the
    machine may be busy; each repeat also times the bare SDK right after, under like load)."""
    _, turns, keyed_from = WORKLOADS[workload]
    row, turn_gaps, floor_gaps = None, [], []
    for _ in range(args.repeat):
        records, _ = run(server, kind, workload, turns, args.context_win)
        row = row or figures(records, keyed_from)
        turn_gaps += gaps(records)
        floor_gaps += sdk_floor(server, kind, sorted(records, key=lambda r: r["bytes"])[
            len(records) // 2])
    rss = None
    if args.rss_turns:
        _, rss = run(server, kind, workload, args.rss_turns, args.context_win, keep=False)
    return fmt(row, median_ms(turn_gaps), median_ms(floor_gaps), rss)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--rss-turns", type=int, default=RSS_TURNS)
    ap.add_argument("--repeat", type=int, default=REPEAT, help="runs pooled for turn times")
    ap.add_argument("--context-win", type=int, default=None,
                    help="tokens (default: the profile default)")
    args = ap.parse_args()
    server = LLMServer().start()
    try:
        for workload in args.workloads.split(","):
            print(f"{workload}  targets: {TARGETS[workload]}")
            print(f"  {'kind':<18}{'reqs':>5}{'mean ch':>10}{'reuse':>9}{'cost':>10}"
                  f"{'max bytes':>11}{'key_info':>9}{'turn ms':>9}{'SDK ms':>9}{'RSS MB':>9}")
            for kind in args.kinds.split(","):
                print(f"  {kind:<18}{measure(server, kind, workload, args)}", flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
