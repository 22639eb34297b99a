"""An answer to an ``ask_user`` question continues the task that asked it (SPEC §7): it is
the question's result, sent with the results of the turn's other calls, in the same task
(no staleness note, the turn count goes on). Checked on the wire: the real OpenAI SDK
against the local test server, for ``ga --resume ID "ANSWER"`` and the REPL."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pexpect
from llm_server import Reply, llm_server, write_config

from frontends.cli import main
from frontends.journal import load_session

__all__ = ["llm_server"]  # the fixture

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 20
CHECKPOINT = ("update_working_checkpoint", json.dumps({"key_info": "user wants a colour"}))
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


def assert_the_answer_continues_the_task(body: dict, turn: int) -> None:
    asked = [m for m in body["messages"] if m["role"] == "assistant"][-1]["tool_calls"]
    sent = after_last_reply(body)
    results = {m["tool_call_id"]: m["content"] for m in sent if m["role"] == "tool"}
    assert results == {asked[0]["id"]: json.dumps({"result": "working key_info updated"}),
                       asked[1]["id"]: "dark blue"}
    (note,) = [m["content"] for m in sent if m["role"] == "user"]
    assert f"Current turn: {turn}\n" in note
    assert "<key_info>user wants a colour</key_info>" in note  # no "set N task(s) ago" line


def test_an_answer_by_resume_continues_the_task_with_the_turns_other_results(
        home, llm_server, capsys):
    cfg = openai_config(home, llm_server)
    llm_server.queue(Reply(text="<summary>ask</summary>", tool_calls=[CHECKPOINT, ASK]))
    assert main(["-m", "p", "--config", cfg, "paint the wall"]) == 3
    sid = session_id(home)
    llm_server.queue(Reply(text="Painted it dark blue."))
    assert main(["--config", cfg, "--resume", sid, "2"]) == 0
    assert_the_answer_continues_the_task(llm_server.bodies()[-1], turn=2)
    working = load_session(home / "sessions" / f"{sid}.jsonl").working
    assert working["passed_tasks"] == 0 and working["key_info"] == "user wants a colour"


def test_an_answer_in_the_repl_continues_the_task_with_the_turns_other_results(
        home, llm_server):
    cfg = openai_config(home, llm_server)
    llm_server.queue(Reply(text="<summary>look</summary>", tool_calls=[
                         ("file_read", json.dumps({"path": "missing.txt"}))]),
                     Reply(text="<summary>ask</summary>", tool_calls=[CHECKPOINT, ASK]),
                     Reply(text="Painted it dark blue."))
    env = {**os.environ, "GA_HOME": str(home), "PYTHONPATH": str(ROOT), "GA_LANG": "en"}
    child = pexpect.spawn(sys.executable, [str(ROOT / "ga.py"), "-m", "p", "--config", cfg],
                          env=env, cwd=os.getcwd(), encoding="utf-8", timeout=TIMEOUT,
                          dimensions=(30, 160))
    child.expect("ga> ")
    child.sendline("paint the wall")
    child.expect("answer> ")
    child.sendline("2")
    child.expect("Painted it dark blue")
    child.expect("ga> ")
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert_the_answer_continues_the_task(llm_server.bodies()[-1], turn=3)


def test_an_exported_session_answered_from_its_file_continues_the_task(
        home, llm_server, capsys):
    cfg = openai_config(home, llm_server)
    llm_server.queue(Reply(text="<summary>ask</summary>", tool_calls=[CHECKPOINT, ASK]))
    assert main(["-m", "p", "--config", cfg, "paint the wall"]) == 3
    assert main(["sessions", "export", session_id(home), "out.json"]) == 0
    llm_server.queue(Reply(text="Painted it dark blue."))
    assert main(["-m", "p", "--config", cfg, "--history", "out.json", "2"]) == 0
    assert_the_answer_continues_the_task(llm_server.bodies()[-1], turn=2)


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


def ask_step(*before: dict) -> dict:
    return {"text": "<summary>ask</summary>", "tool_calls": [
        *before, {"name": "ask_user", "args": {"question": "Which colour?",
                                               "candidates": ["red", "dark blue"]}}]}


def test_an_answer_keeps_plan_mode_and_the_turns_results(run_agent):
    plan = {"name": "code_run", "args": {"type": "python", "inline_eval": True,
                                         "script": "handler.enter_plan_mode('plan.md')"}}
    agent, client, _ = run_agent([ask_step(plan)], task="paint by plan")
    ran = client.history[-1]["content"][-2]
    _, _, events = run_agent([{"text": "done"}], task="1", agent=agent)
    assert agent.handler.working["in_plan_mode"] == "plan.md"  # a new task would drop it
    (result, answer) = client.calls[-1]["messages"][1]["tool_results"]
    assert result["tool_use_id"] == ran["id"] and "plan.md" in result["content"]
    assert answer["content"] == "red"
    assert [e["turn"] for e in events if e["type"] == "turn"] == [2]


def test_an_answer_whose_request_failed_can_be_given_again(run_agent):
    checkpoint = {"name": "update_working_checkpoint", "args": {"key_info": "colour"}}
    agent, client, _ = run_agent([ask_step(checkpoint)], task="paint the wall")
    _, _, events = run_agent([{"raise": "down"}], task="2", agent=agent)
    assert events[-1]["result"] == "FAILED"
    _, _, events = run_agent([{"text": "done"}], task="2", agent=agent)
    first = client.calls[-1]["messages"][1]
    assert [r["content"] for r in first["tool_results"]] == [
        '{"result": "working key_info updated"}', "dark blue"]
    assert "Current turn: 2\n" in first["content"] and "[Note]" not in first["content"]
