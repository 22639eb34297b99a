"""Small and default context windows through the whole stack (`ga` against the local server,
the real SDKs): every request carries the task and, in text tool mode, the tool protocol;
a newest output too big for the window keeps as much as fits and says it was cut."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from llm_server import KINDS, Reply, llm_server, write_config

from frontends.cli import main

__all__ = ["llm_server"]
TASK = "Read big.txt in parts: TASK-7Q"
LINE = "line {i:04d}: the quick brown fox jumps over the lazy dog, payload={p}\n"
LOCAL = {"max_tokens": 2048}  # README's ollama / vllm / llamacpp shape, with context_win


def big_file(lines: int = 2000) -> None:
    Path("big.txt").write_text("".join(LINE.format(i=i, p=i * 7919 % 100003)
                                       for i in range(1, lines + 1)))


def read_calls(server, n: int, text_mode: bool) -> None:
    """``n`` replies each reading 200 lines of big.txt, then a final answer."""
    for i in range(n):
        args = {"path": "big.txt", "start": 1 + i * 140 % 2000}
        if text_mode:
            call = json.dumps({"name": "file_read", "arguments": args})
            server.queue(Reply(text=f"<summary>part {i}</summary><tool_use>{call}</tool_use>"))
        else:
            server.queue(Reply(text=f"<summary>part {i}</summary>",
                               tool_calls=[("file_read", json.dumps(args))]))
    server.queue(Reply(text="done"))


def run(home, server, profile: dict, capsys) -> list[dict]:
    cfg = write_config(home, server, p={"model": "m", "api_key": "k", **profile})
    code = main(["-m", "p", "--config", cfg, TASK])
    assert code == 0, capsys.readouterr().err
    return server.bodies()


@pytest.mark.parametrize("context_win", [6000, None])  # None: the default 35,000
def test_text_mode_sends_the_tool_list_and_the_task_in_every_request(
        home, llm_server, context_win, capsys):
    big_file()
    read_calls(llm_server, 14, text_mode=True)
    window = {"context_win": context_win} if context_win else {}
    bodies = run(home, llm_server, {"provider": "openai", "tool_mode": "text", **LOCAL,
                                    **window}, capsys)
    assert len(bodies) == 15
    sizes = [len(json.dumps(b)) for b in bodies]
    assert any(b < a for a, b in zip(sizes, sizes[1:], strict=False))  # the history was trimmed
    for n, body in enumerate(bodies):
        users = [m["content"] for m in body["messages"] if m["role"] == "user"]
        assert TASK in users[0] and "You can call tools" in users[0], n
        assert '"name": "file_read"' in users[0]  # the full list, with the task
        assert n == 0 or "<tool_use>" in users[-1] and "file_read" in users[-1]  # reminder


@pytest.mark.parametrize("kind", KINDS)
def test_a_small_window_keeps_most_of_the_newest_output_and_says_it_was_cut(
        home, llm_server, kind, capsys):
    big_file()
    read_calls(llm_server, 6, text_mode=False)
    bodies = run(home, llm_server, {"provider": kind, "context_win": 6000, **LOCAL}, capsys)
    assert len(bodies) == 7
    for body in bodies[1:]:
        text = json.dumps(body, ensure_ascii=False)
        assert TASK in text
        assert len(text) <= 6000 * 3 * 1.05  # the window, give or take the wire format
        newest = text[text.rindex("[FILE] 2000 lines"):]
        kept = re.findall(r"\|line \d{4}:", newest)
        assert 100 <= len(kept) < 200  # most of the 200 lines (~16 K chars) fit, not all
        assert "lines (" in newest and "cut here" in newest and "fewer lines" in newest
        assert "[PARTIAL] showing lines" in newest  # the tail, with where to go on, stays
