"""GenericAgent: task queue, abort, in-process evaluation, plan mode entry."""

from __future__ import annotations

import os
import queue
import time
from pathlib import Path

from ga import GenericAgent
from llmcore.scripted import ScriptedClient
from tools.sandbox import Sandbox

WAIT_SECONDS = 20  # sanity bound: an event the worker passes on arrives long before


def drain(q: queue.Queue, timeout: float = 30) -> list[dict]:
    events = []
    while True:
        event = q.get(timeout=timeout)
        events.append(event)
        if event["type"] == "task_end":
            return events


def test_put_task_returns_a_queue_of_events_from_the_worker(home):
    agent = GenericAgent(ScriptedClient([{"text": "one"}, {"text": "two"}]), home=home)
    agent.start()
    first, second = agent.put_task("a"), agent.put_task("b", source="schedule")
    e1, e2 = drain(first), drain(second)
    assert e1[0] == {"type": "task_start", "prompt": "a", "source": "user",
                     "session_id": agent.session_id, "sandbox": "workspace-write",
                     "approval": "never"}
    assert e1[-1]["text"] == "one" and e2[-1]["text"] == "two"
    assert e2[0]["source"] == "schedule"
    agent.tasks.put(None)


def test_abort_kills_running_code_and_ends_the_task(home, tmp_path):
    pidfile = tmp_path / "work" / "child.pid"  # in the working folder: the sandbox allows it
    code = (f"import os, time\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
            "time.sleep(120)\n")
    script = [{"text": "<summary>wait</summary>",
               "tool_calls": [{"name": "code_run", "args": {"script": code, "timeout": 300}}]},
              {"text": "should not be reached"}]
    agent = GenericAgent(ScriptedClient(script), home=home)
    agent.start()
    events = agent.put_task("sleep")
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = int(pidfile.read_text())
    agent.abort()
    end = drain(events)[-1]
    assert end["result"] == "ABORTED"
    assert len(agent.llmclient.calls) == 1
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the child survived the abort")


def test_an_abort_during_a_call_leaves_the_replys_other_calls_unmade(home, tmp_path):
    write = [{"name": "file_write", "args": {"path": name, "content": "x\n"}}
             for name in ("first.txt", "second.txt")]
    agent = GenericAgent(ScriptedClient([{"text": "<summary>write</summary>",
                                          "tool_calls": write}, {"text": "never"}]),
                         home=home, cwd=tmp_path)
    called = []
    for event in agent.run_task("write two files"):
        if event["type"] == "tool_call":
            called.append(event["args"]["path"])
        if event["type"] == "tool_result":
            agent.abort()  # Ctrl-C while the first call ends
        end = event
    assert end["result"] == "ABORTED" and called == ["first.txt"]
    assert (tmp_path / "first.txt").exists() and not (tmp_path / "second.txt").exists()


def test_abort_cuts_the_model_stream(home):
    client = ScriptedClient([{"text": "x" * 2000}])
    agent = GenericAgent(client, home=home)
    run = agent.run_task("talk")
    texts = []
    for event in run:
        if event["type"] == "text":
            texts.append(event["delta"])
            if len(texts) == 3:
                agent.abort()
        if event["type"] == "task_end":
            end = event
    assert end["result"] == "ABORTED"
    assert len("".join(texts)) < 2000


def test_inline_eval_enters_plan_mode(run_agent, tmp_path):
    plan = tmp_path / "work" / "plan.md"
    plan.write_text("- [ ] step one\n")
    script = [{"text": "<summary>plan</summary>", "tool_calls": [{"name": "code_run", "args": {
        "script": "handler.enter_plan_mode('plan.md')", "inline_eval": True}}]},
        {"text": "ok"}]
    agent, _, events = run_agent(script)
    result = next(e for e in events if e["type"] == "tool_result")["data"]
    assert result == {"status": "success", "result": "'plan.md'"}
    assert agent.handler.working["in_plan_mode"] == "plan.md"


def test_inline_eval_error_is_reported_to_the_model(run_agent):
    script = [{"tool_calls": [{"name": "code_run", "args": {
        "script": "1/0", "inline_eval": "true"}}]}, {"text": "ok"}]
    _, client, _ = run_agent(script, sandbox=Sandbox("full-access"))
    assert "ZeroDivisionError" in client.calls[1]["messages"][0]["tool_results"][0]["content"]


def test_code_run_falls_back_to_the_reply_code_block(run_agent):
    script = [{"text": "<summary>run</summary>\n```python\nprint(6 * 7)\n```",
               "tool_calls": [{"name": "code_run", "args": {}}]}, {"text": "ok"}]
    _, _, events = run_agent(script)
    result = next(e for e in events if e["type"] == "tool_result")["data"]
    assert result["status"] == "success" and "42" in result["stdout"]


def test_file_write_falls_back_to_file_content_block(run_agent, tmp_path):
    script = [{"text": "<file_content>from the reply\n</file_content>",
               "tool_calls": [{"name": "file_write", "args": {"path": "r.txt"}}]},
              {"text": "ok"}]
    run_agent(script)
    assert (tmp_path / "work" / "r.txt").read_text() == "from the reply\n"


def test_tool_errors_reach_the_model_as_text(run_agent):
    script = [{"tool_calls": [{"name": "file_read", "args": {"path": "missing.txt"}}]},
              {"text": "ok"}]
    _, client, events = run_agent(script)
    sent = client.calls[1]["messages"][0]["tool_results"][0]["content"]
    assert sent.startswith('{"status": "error", "msg": "[Error] ') and "missing.txt" in sent
    assert events[-1]["result"] == "CURRENT_TASK_DONE"


def test_a_failing_model_ends_the_queued_task_as_failed(home):
    client = ScriptedClient([{"raise": "overloaded", "status": 529}, {"text": "next task ok"}])
    agent = GenericAgent(client, home=home)
    agent.start()
    end = drain(agent.put_task("first"), timeout=10)[-1]
    assert end["result"] == "FAILED" and end["model_error"] is True
    assert "529" in end["error"] and "overloaded" in end["error"]
    assert drain(agent.put_task("second"), timeout=10)[-1]["text"] == "next task ok"


def test_a_crash_inside_the_loop_still_ends_the_task(home):
    from ga import GenericAgentHandler

    class Broken(GenericAgentHandler):
        def turn_end_callback(self, *args):
            raise RuntimeError("bug in a turn-end rule")

    script = [{"tool_calls": [{"name": "file_read", "args": {"path": "x"}}]}]
    agent = GenericAgent(ScriptedClient(script), home=home, handler_cls=Broken)
    agent.start()
    end = drain(agent.put_task("go"), timeout=10)[-1]
    assert end["result"] == "FAILED" and "bug in a turn-end rule" in end["error"]
    assert end["model_error"] is False


class RetryingClient(ScriptedClient):
    """A model whose provider reports a retry and then waits (as for a ``Retry-After``)
    until the test has seen that retry, or fails for good."""

    def __init__(self, script, seen=None):
        super().__init__(script)
        self.seen = seen

    def chat(self, messages, tools=None):
        self.on_event({"type": "retry", "attempt": 1, "wait": 60.0, "error": "503: busy"})
        if self.seen is not None and not self.seen.wait(WAIT_SECONDS):
            raise AssertionError("the retry was not passed on during the wait")
        return (yield from super().chat(messages, tools))


def test_a_retry_is_passed_on_while_the_provider_waits(home):
    import threading

    seen = threading.Event()
    client = RetryingClient([{"text": "fine"}], seen)
    agent = GenericAgent(client, home=home)
    client.on_event = agent.provider_event
    agent.start()
    events = agent.put_task("go")
    first = events.get(timeout=WAIT_SECONDS)
    while first["type"] in ("task_start", "turn"):
        first = events.get(timeout=WAIT_SECONDS)
    assert first["type"] == "retry" and first["wait"] == 60.0
    seen.set()
    end = drain(events)[-1]
    assert end["result"] == "CURRENT_TASK_DONE" and end["text"] == "fine"


def test_retries_that_came_to_nothing_are_reported_before_the_failure(home):
    client = RetryingClient([{"raise": "503: still busy", "status": 503}])
    agent = GenericAgent(client, home=home)
    client.on_event = agent.provider_event
    events = list(agent.run_task("go"))  # iterated directly: no worker
    kinds = [e["type"] for e in events]
    assert kinds[-2:] == ["retry", "task_end"] and events[-1]["result"] == "FAILED"
