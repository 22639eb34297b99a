"""What plugins see through the loop's hooks (SPEC §2): every call the model made with its
id, and the end of every task, turn and model request that began, also when it failed."""

from __future__ import annotations

import pytest
from test_loop import EchoHandler, drive

from agent_loop import agent_runner_loop
from llmcore.base import LLMError
from llmcore.scripted import ScriptedClient

EVENTS = ("agent_before", "turn_before", "llm_before", "llm_after", "tool_before",
          "tool_after", "turn_after", "agent_after")


def recorder(handler) -> list[tuple[str, dict]]:
    seen: list[tuple[str, dict]] = []
    for event in EVENTS:
        handler.hooks.on(event, lambda ctx, e=event: seen.append((e, dict(ctx))))
    return seen


def test_tool_hooks_carry_the_call_id_and_skip_the_runtimes_own_no_tool():
    handler = EchoHandler()
    seen = recorder(handler)
    drive([{"tool_calls": [{"name": "echo", "args": {"text": "a"}},
                           {"name": "plain", "args": {}}]}, {"text": "done"}], handler)
    calls = [(e, ctx["tool_name"], ctx["call_id"]) for e, ctx in seen if e.startswith("tool_")]
    assert calls == [("tool_before", "echo", "call_1_0"), ("tool_after", "echo", "call_1_0"),
                     ("tool_before", "plain", "call_1_1"), ("tool_after", "plain", "call_1_1")]


def test_tool_after_carries_the_exception_a_tool_raised():
    handler = EchoHandler()
    seen = recorder(handler)
    drive([{"tool_calls": [{"name": "boom", "args": {}}, {"name": "plain", "args": {}}]},
           {"text": "done"}], handler)
    after = [ctx for e, ctx in seen if e == "tool_after"]
    assert isinstance(after[0]["error"], RuntimeError) and str(after[0]["error"]) == "kaput"
    assert after[0]["outcome"].data["status"] == "error"
    assert after[1]["error"] is None


def test_a_model_that_fails_for_good_still_ends_the_request_turn_and_task_for_plugins():
    handler = EchoHandler()
    seen = recorder(handler)
    with pytest.raises(LLMError):
        drive([{"tool_calls": [{"name": "plain", "args": {}}]},
               {"raise": "overloaded", "status": 529}], handler)
    order = [e for e, _ in seen]
    assert order[-5:] == ["turn_before", "llm_before", "llm_after", "turn_after", "agent_after"]
    failed = seen[-3][1]
    assert failed["response"] is None and isinstance(failed["error"], LLMError)
    assert failed["error"].status == 529
    assert isinstance(seen[-1][1]["error"], LLMError) and seen[-1][1]["turn"] == 2


def test_a_run_closed_while_the_model_streams_ends_for_plugins():
    handler = EchoHandler()
    seen = recorder(handler)
    gen = agent_runner_loop(ScriptedClient([{"text": "a long reply"}]), "SYS", "task", handler,
                            [])
    while next(gen)["type"] != "text":
        pass
    gen.close()
    assert [e for e, _ in seen][-3:] == ["llm_after", "turn_after", "agent_after"]
    assert isinstance(seen[-1][1]["error"], GeneratorExit)


def test_the_handler_names_its_session(run_agent, home):
    from ga import GenericAgent

    agent = GenericAgent(ScriptedClient([{"text": "ok"}]), home=home, cwd=".")
    agent.session_id = "20250101-000000-abcd"  # as a journal sets it
    ids = []
    agent.hooks.on("agent_before", lambda ctx: ids.append(ctx["handler"].session_id))
    run_agent([], agent=agent)
    assert ids == ["20250101-000000-abcd"]
