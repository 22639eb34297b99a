"""Streamed text is kept as pieces and joined once wherever it is gathered, so a reply's
cost grows linearly with its size (the figures live in bench/bench_stream_text.py)."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest
from llm_server import Reply, llm_server, run_chat, write_config

import llmcore
from frontends.console import LiveRenderer
from frontends.journal import Journal
from llmcore.base import LLMResponse, ThinkingChunk
from llmcore.provider import Request
from memory.archive import Transcript, normalize

__all__ = ["llm_server"]
PIECES = 500


class Piece(str):
    """A streamed piece that counts every concatenation it takes part in (``a + b`` copies
    both: done per piece, that is quadratic in the reply's size)."""

    joins = 0

    def __add__(self, other: str) -> str:
        Piece.joins += 1
        return str.__add__(self, other)

    def __radd__(self, other: str) -> str:
        Piece.joins += 1
        return str.__add__(other, self)

    def __str__(self) -> str:
        return self


@pytest.fixture
def pieces():
    Piece.joins = 0
    return [{"type": "text", "delta": Piece("ab")} for _ in range(PIECES)]


def test_journal_joins_a_streamed_reply_once(home, pieces):
    agent = SimpleNamespace(llmclient=SimpleNamespace(name="m"), cwd="/x")
    journal = Journal(home, agent)
    for event in pieces:
        journal(event)
    journal.write({"type": "note"})
    journal.close()
    records = [json.loads(line) for line in journal.path.read_text().splitlines()]
    assert [r["text"] for r in records if r["type"] == "text"] == ["ab" * PIECES]
    assert Piece.joins == 0


def test_transcript_joins_a_streamed_reply_once(pieces):
    transcript = Transcript()
    for event in [{"type": "turn", "turn": 1}, *pieces, {"type": "thinking", "delta": "hm"},
                  *pieces, {"type": "turn", "turn": 2}]:
        transcript.record(event)
    assert [e.get("text") for e in transcript.events] == [None, "ab" * 2 * PIECES, None]
    assert Piece.joins == 0


def test_json_event_stream_deltas_are_joined_once(pieces):
    events = normalize([{"type": "task_start", "prompt": "go"}, *pieces,
                        {"type": "task_end", "result": "CURRENT_TASK_DONE"}])
    assert [e["type"] for e in events] == ["user", "assistant", "task_end"]
    assert events[1]["text"] == "ab" * PIECES and Piece.joins == 0


def test_live_preview_joins_a_streamed_reply_once(pieces):
    out = io.StringIO()
    render = LiveRenderer(out=out)
    for event in pieces:
        render(event)
    render({"type": "task_end", "result": "CURRENT_TASK_DONE"})
    assert "ab" * 10 in out.getvalue() and Piece.joins == 0


@pytest.mark.parametrize("kind", ["openai", "openai-responses", "anthropic"])
def test_providers_yield_pieces_and_the_session_joins_them(home, llm_server, kind):
    cfg = write_config(home, llm_server, p={"provider": kind, "model": "m"})
    client = llmcore.make_client("p", config_path=cfg, home=home)
    reply = Reply(text="0123456789" * 40, thinking="why " * 40, chunk=3)
    llm_server.queue(reply, reply)
    provider = llmcore.load_class(kind)(client.profile, None)
    resp = LLMResponse()
    req = Request(None, [{"role": "user", "content": [{"type": "text", "text": "go"}]}],
                  None, client.profile)
    chunks = list(provider.stream(req, resp))
    assert len(chunks) > 150 and (resp.content, resp.thinking) == ("", "")  # not gathered
    _, whole = run_chat(client, [{"role": "user", "content": "go"}])
    assert whole.content == reply.text and whole.thinking == reply.thinking
    assert "".join(c for c in chunks if isinstance(c, ThinkingChunk)) == reply.thinking
