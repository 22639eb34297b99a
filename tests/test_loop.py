"""The turn loop of agent_loop.py (SPEC §2)."""

from __future__ import annotations

import json

from agent_loop import (
    BaseHandler,
    Hooks,
    StepOutcome,
    _clean_content,
    _compact_tool_args,
    agent_runner_loop,
)
from llmcore.scripted import ScriptedClient


class EchoHandler(BaseHandler):
    def __init__(self):
        super().__init__()
        self.seen = []

    def do_echo(self, args, response):  # generator form
        self.seen.append((args["_index"], args["_tool_num"], args.get("text")))
        yield f"echo {args.get('text')}\n"
        return StepOutcome({"echo": args.get("text")}, next_prompt=f"next-{args['_index']}")

    def do_plain(self, args, response):  # plain form
        return StepOutcome("plain ok", next_prompt="go on")

    def do_boom(self, args, response):
        raise RuntimeError("kaput")

    def do_no_tool(self, args, response):
        return StepOutcome(response.content, next_prompt=None)


def drive(script, handler=None, max_turns=10):
    client = ScriptedClient(script)
    handler = handler or EchoHandler()
    gen = agent_runner_loop(client, "SYS", "task", handler, [], max_turns=max_turns)
    events = []
    while True:
        try:
            events.append(next(gen))
        except StopIteration as stop:
            return stop.value, events, client, handler


def test_final_answer_ends_task_done():
    result, events, client, _ = drive([{"text": "all done"}])
    assert result == {"result": "CURRENT_TASK_DONE", "data": "all done"}
    assert "".join(e["delta"] for e in events if e["type"] == "text") == "all done"
    assert client.calls[0]["messages"][0] == {"role": "system", "content": "SYS"}


def test_generator_and_plain_tools_and_progress_events():
    script = [{"text": "a", "tool_calls": [{"name": "echo", "args": {"text": "hi"}},
                                           {"name": "plain", "args": {}}]},
              {"text": "fin"}]
    result, events, client, handler = drive(script)
    assert result["result"] == "CURRENT_TASK_DONE"
    assert {"type": "progress", "text": "echo hi\n"} in events
    results = [e for e in events if e["type"] == "tool_result"]
    assert [r["data"] for r in results] == [{"echo": "hi"}, "plain ok"]
    assert handler.seen == [(0, 2, "hi")]
    second = client.calls[1]["messages"]
    assert len(second) == 1 and second[0]["role"] == "user"
    assert [r["content"] for r in second[0]["tool_results"]] == ['{"echo": "hi"}', "plain ok"]
    assert second[0]["content"] == "next-0\ngo on"


def test_tool_index_and_count_for_several_calls():
    script = [{"tool_calls": [{"name": "echo", "args": {"text": str(i)}} for i in range(3)]},
              {"text": "fin"}]
    _, _, _, handler = drive(script)
    assert handler.seen == [(0, 3, "0"), (1, 3, "1"), (2, 3, "2")]


def test_unknown_tool_is_reported_and_loop_goes_on():
    result, events, client, _ = drive([{"tool_calls": [{"name": "nope", "args": {}}]},
                                       {"text": "ok"}])
    assert result["result"] == "CURRENT_TASK_DONE"
    msg = client.calls[1]["messages"][0]
    assert "unknown tool nope" in msg["content"]
    assert "unknown tool nope" in msg["tool_results"][0]["content"]


def test_a_model_call_to_the_internal_no_tool_is_an_unknown_tool():
    script = [{"text": "<summary>end</summary>", "tool_calls": [{"name": "no_tool", "args": {}}]},
              {"text": "ok"}]
    result, events, client, _ = drive(script)
    assert len(client.calls) == 2  # the call did not end the task
    assert "unknown tool no_tool" in client.calls[1]["messages"][0]["tool_results"][0]["content"]
    assert result == {"result": "CURRENT_TASK_DONE", "data": "ok"}


def test_invalid_json_arguments_become_bad_json():
    script = [{"tool_calls": [{"name": "echo", "raw_args": '{"text": "hi"'}]}, {"text": "ok"}]
    result, events, client, handler = drive(script)
    assert handler.seen == []
    sent = client.calls[1]["messages"][0]
    assert "not valid JSON" in sent["content"]
    assert '{"text": "hi"' in sent["content"]  # a preview of what was received
    assert "echo" in sent["content"]
    assert result["result"] == "CURRENT_TASK_DONE"


def test_tool_arguments_with_raw_newlines_in_strings_are_accepted():
    raw = '{"text": "line one\nline two\tend"}'  # control characters JSON wants escaped
    _, _, client, handler = drive([{"tool_calls": [{"name": "echo", "raw_args": raw}]},
                                   {"text": "ok"}])
    assert handler.seen == [(0, 1, "line one\nline two\tend")]
    assert "not valid JSON" not in client.calls[1]["messages"][0]["content"]


def test_a_call_cut_at_max_tokens_says_so():
    script = [{"tool_calls": [{"name": "echo", "raw_args": '{"text": "a long'}],
               "stop_reason": "max_tokens"}, {"text": "ok"}]
    _, _, client, handler = drive(script)
    assert handler.seen == []
    sent = client.calls[1]["messages"][0]["content"]
    assert "not valid JSON" in sent and "cut off at max_tokens" in sent


def test_non_object_json_arguments_are_bad_json_too():
    for raw in ("null", "[1, 2]", '"text"'):
        _, _, client, handler = drive([{"tool_calls": [{"name": "echo", "raw_args": raw}]},
                                       {"text": "ok"}])
        assert handler.seen == []
        assert "not valid JSON" in client.calls[1]["messages"][0]["content"]


def test_raising_tool_reports_error_and_run_goes_on():
    result, events, client, _ = drive([{"tool_calls": [{"name": "boom", "args": {}}]},
                                       {"text": "recovered"}])
    assert result == {"result": "CURRENT_TASK_DONE", "data": "recovered"}
    assert "kaput" in client.calls[1]["messages"][0]["tool_results"][0]["content"]


def test_max_turns_exceeded():
    script = [{"tool_calls": [{"name": "echo", "args": {"text": str(i)}}]} for i in range(5)]
    result, events, _, _ = drive(script, max_turns=3)
    assert result["result"] == "MAX_TURNS_EXCEEDED"
    assert [e["turn"] for e in events if e["type"] == "turn"] == [1, 2, 3]


def test_should_exit_ends_with_exited():
    class H(EchoHandler):
        def do_stop(self, args, response):
            return StepOutcome({"q": 1}, next_prompt="", should_exit=True)

    result, _, _, _ = drive([{"tool_calls": [{"name": "stop", "args": {}}]}], H())
    assert result == {"result": "EXITED", "data": {"q": 1}, "turn_results": []}


def test_an_exit_returns_the_results_of_the_calls_before_it():
    class H(EchoHandler):
        def do_stop(self, args, response):
            return StepOutcome({"q": 1}, next_prompt="", should_exit=True)

    result, _, client, _ = drive([{"tool_calls": [
        {"name": "echo", "args": {"text": "a"}}, {"name": "stop", "args": {}},
        {"name": "echo", "args": {"text": "never"}}]}], H())
    assert result["turn_results"] == [{"tool_use_id": "call_1_0", "content": '{"echo": "a"}'}]


def test_turns_count_on_from_the_handlers_turn_and_max_turns_limits_the_run():
    handler = EchoHandler()
    handler.current_turn = 4  # an answered question's task goes on from its turn 4
    script = [{"tool_calls": [{"name": "echo", "args": {"text": str(i)}}]} for i in range(3)]
    result, events, _, _ = drive(script, handler, max_turns=2)
    assert result["result"] == "MAX_TURNS_EXCEEDED"
    assert [e["turn"] for e in events if e["type"] == "turn"] == [5, 6]


def test_done_hooks_run_before_the_task_may_finish():
    handler = EchoHandler()
    handler._done_hooks.append("verify your work")
    result, _, client, _ = drive([{"text": "done"}, {"text": "verified"}], handler)
    assert result["data"] == "verified"
    assert client.calls[1]["messages"][0]["content"] == "verify your work"


def test_exit_request_ends_the_task():
    class H(EchoHandler):
        def turn_end_callback(self, *a):
            self.exit_request = {"result": "NO_PROGRESS", "data": "x"}
            return "p"

    script = [{"tool_calls": [{"name": "plain", "args": {}}]}] * 3
    result, _, client, _ = drive(script, H())
    assert result == {"result": "NO_PROGRESS", "data": "x"}
    assert len(client.calls) == 1


def test_an_abort_during_a_call_leaves_the_rest_of_the_reply_uncalled():
    class H(EchoHandler):
        def do_interrupted(self, args, response):  # aborted while it ran (Ctrl-C, a cancel)
            self.exit_request = {"result": "ABORTED", "data": None}
            return StepOutcome("cut short", next_prompt="go on")

    script = [{"tool_calls": [{"name": "interrupted", "args": {}},
                              {"name": "echo", "args": {"text": "late"}}]}, {"text": "never"}]
    result, events, client, handler = drive(script, H())
    assert result["result"] == "ABORTED" and handler.seen == []
    assert [e["name"] for e in events if e["type"] == "tool_call"] == ["interrupted"]
    assert len(client.calls) == 1


def test_failing_hook_is_reported_and_never_breaks_the_loop(caplog):
    handler = EchoHandler()
    fired = []
    handler.hooks.on("turn_before", lambda ctx: 1 / 0)
    handler.hooks.on("tool_after", lambda ctx: fired.append(ctx["tool_name"]))
    for event in ("agent_before", "llm_before", "llm_after", "turn_after", "agent_after"):
        handler.hooks.on(event, lambda ctx, e=event: fired.append(e))
    result, _, _, _ = drive([{"tool_calls": [{"name": "plain", "args": {}}]}, {"text": "ok"}],
                            handler)
    assert result["result"] == "CURRENT_TASK_DONE"
    assert "ZeroDivisionError" in caplog.text
    assert fired[:4] == ["agent_before", "llm_before", "llm_after", "plain"]
    assert fired[-1] == "agent_after"


def test_every_turn_a_plugin_sees_begin_also_ends_the_last_one_included():
    handler = EchoHandler()
    seen = []
    for event in ("turn_before", "turn_after", "agent_after"):
        handler.hooks.on(event, lambda ctx, e=event: seen.append((e, ctx["turn"])))
    drive([{"tool_calls": [{"name": "plain", "args": {}}]}, {"text": "ok"}], handler)
    assert seen == [("turn_before", 1), ("turn_after", 1), ("turn_before", 2),
                    ("turn_after", 2), ("agent_after", 2)]


def test_unknown_hook_event_fails_at_registration():
    import pytest

    with pytest.raises(ValueError, match="unknown hook event"):
        Hooks().on("turn_middle", print)


def test_thinking_and_usage_events():
    script = [{"text": "x", "thinking": "hmm", "usage": {"input": 5, "cached": 2, "output": 3}}]
    _, events, _, _ = drive(script)
    assert {"type": "thinking", "delta": "hmm"} in events
    assert {"type": "usage", "input": 5, "cached": 2, "output": 3} in events


def test_compact_tool_args():
    assert _compact_tool_args("file_read", {"path": "out/sub/report.txt", "_index": 0,
                                            "_tool_num": 1}) == '{"path": "out/sub/report.txt"}'
    deep = "projects/" + "nested/" * 12 + "report.txt"
    shown = json.loads(_compact_tool_args("file_write", {"path": deep}))["path"]
    assert len(shown) == 60 and shown.startswith("projects/nested/")
    assert shown.endswith("/report.txt") and "…" in shown
    long = "k" * 80
    assert _compact_tool_args("update_working_checkpoint", {"key_info": long}) == "k" * 60 + "..."
    assert _compact_tool_args("ask_user", {"question": "Which?", "candidates": ["a", "b"]}) == (
        "Which?\n- a\n- b")
    out = _compact_tool_args("code_run", {"script": "x" * 300})
    assert out.endswith("...") and len(out) == 123


def test_clean_content():
    code = "```python\n" + "\n".join(f"line{i}" for i in range(10)) + "\n```"
    cleaned = _clean_content(f"Intro\n\n\n\n{code}\n<file_content>secret</file_content>"
                             "<tool_use>{\"name\": \"x\"}</tool_use>")
    assert "line4" in cleaned and "line5" not in cleaned
    assert "... (10 lines)" in cleaned
    assert "secret" not in cleaned and "tool_use" not in cleaned
    assert "\n\n\n" not in cleaned
    short = "```\na\nb\n```"
    assert _clean_content(short) == short
