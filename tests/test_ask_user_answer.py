"""An answer to an ``ask_user`` question continues the task that asked it (SPEC §7): it is
the question's result, sent with the results of the turn's other calls, in the same task
(no staleness note, the turn count goes on). Checked on the wire: the real OpenAI SDK
against the local test server, for ``ga --resume ID "ANSWER"`` and the REPL."""

from __future__ import annotations

import json
from pathlib import Path

from llm_server import Reply, llm_server, write_config

from frontends.cli import main

__all__ = ["llm_server"]  # the fixture

ASK = ("ask_user", json.dumps({"question": "Which colour?", "candidates": ["red", "dark blue"]}))


def openai_config(home: Path, server) -> str:
    return write_config(home, server, p={"provider": "openai", "model": "m", "api_key": "k"})


def session_id(home: Path) -> str:
    (path,) = (home / "sessions").glob("*.jsonl")
    return path.stem


def after_last_reply(body: dict) -> list[dict]:
    """The messages of a Chat Completions request that follow the model's last reply."""
    msgs = body["messages"]
    last = max(i for i, m in enumerate(msgs) if m["role"] == "assistant")
    return msgs[last + 1:]


def test_the_model_log_shows_the_tool_results_as_sent(home, llm_server, capsys):
    cfg = openai_config(home, llm_server)
    write = ("file_write", json.dumps({"path": "a.txt", "content": "x"}))
    llm_server.queue(Reply(text="<summary>ask</summary>", tool_calls=[ASK, write]))
    assert main(["-m", "p", "--config", cfg, "paint the wall"]) == 3
    sid = session_id(home)
    llm_server.queue(Reply(text="ok"))
    assert main(["--config", cfg, "--resume", sid, "red"]) == 0
    sent = [m for m in after_last_reply(llm_server.bodies()[-1]) if m["role"] == "tool"]
    assert len(sent) == 2  # the answer, and the call after the question, which never ran
    log = (home / "logs" / f"llm-{sid}.log").read_text()
    for m in sent:
        assert f"[tool_result {m['tool_call_id']}] {m['content']}" in log
