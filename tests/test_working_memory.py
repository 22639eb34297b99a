"""Working memory (SPEC §3): every rule pinned."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from genutil import drain

from agent_loop import StepOutcome
from ga import GenericAgent, GenericAgentHandler, Settings
from llmcore.scripted import ScriptedClient
from memory.prompt import insight_reminder


@pytest.fixture
def agent(home):
    agent = GenericAgent(ScriptedClient([]), home=home)
    agent.system_prompt()  # seeds the memory, as the first task does
    return agent


@pytest.fixture
def handler(agent):
    h = GenericAgentHandler(agent, agent.cwd)
    agent.handler = h
    return h


def call(handler, name, args, content=""):
    """Run one do_ tool as dispatch would; returns (progress lines, outcome)."""
    return drain(handler.dispatch(name, dict(args), SimpleNamespace(content=content, thinking=""),
                                  args.get("_index", 0), args.get("_tool_num", 1)))


def reply(text="", calls=None):
    return SimpleNamespace(content=text, thinking="", tool_calls=[], stop_reason="end_turn")


def end_turn(handler, turn, text="<summary>step</summary>", calls=None, prompt="NEXT"):
    calls = calls or [{"tool_name": "file_read", "args": {"path": f"f{turn}"}, "id": "x"}]
    handler.current_turn = turn
    return handler.turn_end_callback(reply(text), calls, [], turn, prompt, {})


# ---- update_working_checkpoint ---------------------------------------------------------
def test_checkpoint_writes_present_keys_only(handler):
    call(handler, "update_working_checkpoint", {"key_info": "K1", "related_sop": "a_sop.md"})
    call(handler, "update_working_checkpoint", {"key_info": "K2"})
    assert handler.working["key_info"] == "K2"
    assert handler.working["related_sop"] == "a_sop.md"
    call(handler, "update_working_checkpoint", {"related_sop": ""})
    assert handler.working["related_sop"] == "" and handler.working["key_info"] == "K2"


def test_checkpoint_resets_passed_sessions_and_reports(handler):
    handler.working["passed_sessions"] = 5
    handler.working["passed_tasks"] = 2
    handler.current_turn = 3
    progress, outcome = call(handler, "update_working_checkpoint",
                             {"key_info": "K", "related_sop": "s.md"})
    assert handler.working["passed_sessions"] == 0 and handler.working["passed_tasks"] == 0
    assert progress == ["[Info] Updated key_info and related_sop.\n"]
    assert isinstance(outcome, StepOutcome)
    assert outcome.data == {"result": "working key_info updated"}
    assert "### [WORKING MEMORY]" in outcome.next_prompt
    assert "<key_info>K</key_info>" in outcome.next_prompt
    progress, _ = call(handler, "update_working_checkpoint", {"key_info": "K"})
    assert progress == ["[Info] Updated key_info.\n"]
    progress, _ = call(handler, "update_working_checkpoint", {})
    assert progress == ["[Info] Checkpoint made; nothing changed.\n"]


def test_first_turn_checkpoint_adds_do_not_repeat_tip(handler):
    handler.current_turn = 1
    _, first = call(handler, "update_working_checkpoint", {"key_info": "K"})
    handler.current_turn = 4
    _, later = call(handler, "update_working_checkpoint", {"key_info": "K"})
    assert "Do not call update_working_checkpoint again" in first.next_prompt
    assert "Do not call update_working_checkpoint again" not in later.next_prompt


def test_other_tools_can_read_working(run_agent):
    from tools.spec import tool

    class Deploy(GenericAgentHandler):
        @tool
        def do_deploy(self, *, _index: int = 0):
            """Deploy to the target saved in working memory."""
            target = self.working.get("key_info", "").removeprefix("target=")
            return StepOutcome({"deployed_to": target}, next_prompt=self._anchor(_index))

    script = [{"text": "<summary>s</summary>", "tool_calls": [
        {"name": "update_working_checkpoint", "args": {"key_info": "target=box7"}}]},
        {"text": "<summary>d</summary>", "tool_calls": [{"name": "deploy", "args": {}}]},
        {"text": "done"}]
    _, _, events = run_agent(script, handler_cls=Deploy)
    results = [e["data"] for e in events if e["type"] == "tool_result"]
    assert results[-1] == {"deployed_to": "box7"}


# ---- _get_anchor_prompt ----------------------------------------------------------------
def test_anchor_prompt_layout(handler):
    handler.history_info[:] = ["[USER] task", "[Agent] did a"]
    handler.working.update(key_info="KEY", related_sop="memory/x_sop.md")
    handler.current_turn = 2
    anchor = handler._get_anchor_prompt()
    lines = anchor.strip("\n").split("\n")
    assert lines[0] == "### [WORKING MEMORY]"
    assert lines[1:5] == ["<history>", "[USER] task", "[Agent] did a", "</history>"]
    assert lines[5] == "Current turn: 2"
    assert lines[6] == "<key_info>KEY</key_info>"
    assert lines[7] == "If anything is unclear, re-read memory/x_sop.md"


def test_anchor_skip_returns_bare_newline(handler):
    handler.working["key_info"] = "KEY"
    assert handler._get_anchor_prompt(skip=True) == "\n"


def test_anchor_history_every_other_turn(handler):
    handler.history_info[:] = ["[USER] t"]
    handler.current_turn = 3
    assert "<history>" not in handler._get_anchor_prompt()
    handler.current_turn = 4
    assert "<history>" in handler._get_anchor_prompt()


def test_anchor_history_window_is_last_30_lines(handler):
    handler.history_info[:] = ["[USER] t"] + [f"[Agent] s{i}" for i in range(40)]
    handler.current_turn = 2
    anchor = handler._get_anchor_prompt()
    body = anchor.split("<history>\n")[1].split("\n</history>")[0].split("\n")
    assert body == [f"[Agent] s{i}" for i in range(10, 40)]
    assert "<earlier_context>" not in anchor  # not a 4th turn


def test_anchor_earlier_context_folds_per_user_request_every_4th_turn(handler):
    handler.history_info[:] = (["[USER] first"] + [f"[Agent] a{i}" for i in range(3)]
                               + ["[USER] second"] + [f"[Agent] b{i}" for i in range(40)])
    handler.current_turn = 4
    anchor = handler._get_anchor_prompt()
    earlier = anchor.split("<earlier_context>\n")[1].split("\n</earlier_context>")[0]
    assert earlier.split("\n") == ["[USER] first", "[Agent] a2（3 turns）", "[USER] second",
                                   "[Agent] b9（10 turns）"]
    handler.current_turn = 8
    assert "<earlier_context>" in handler._get_anchor_prompt()
    handler.current_turn = 6
    assert "<earlier_context>" not in handler._get_anchor_prompt()


def test_anchor_earlier_context_only_when_history_exceeds_30_lines(handler):
    handler.current_turn = 4
    handler.history_info[:] = ["[USER] t"] + [f"[Agent] s{i}" for i in range(29)]
    assert "<earlier_context>" not in handler._get_anchor_prompt()  # 30 lines: all in history
    handler.history_info.append("[Agent] s29")
    anchor = handler._get_anchor_prompt()
    assert "<earlier_context>\n[USER] t\n</earlier_context>" in anchor  # line 1 of 31 folded


def test_anchor_folds_a_run_of_direct_answers_to_a_bare_agent_tag(handler):
    direct = "[Agent] answered the user directly"
    handler.history_info[:] = (["[USER] hi", direct, "[USER] more", "[Agent] a", direct]
                               + [f"[Agent] s{i}" for i in range(30)])
    handler.current_turn = 4
    anchor = handler._get_anchor_prompt()
    earlier = anchor.split("<earlier_context>\n")[1].split("\n</earlier_context>")[0]
    assert earlier.split("\n") == ["[USER] hi", "[Agent]（1 turns）", "[USER] more",
                                   "[Agent]（2 turns）"]


def test_anchor_has_no_key_info_or_sop_line_when_unset_or_cleared(handler):
    handler.current_turn = 3
    bare = handler._get_anchor_prompt()
    assert "<key_info>" not in bare and "re-read" not in bare
    call(handler, "update_working_checkpoint", {"key_info": "KEY", "related_sop": "s.md"})
    assert "<key_info>KEY</key_info>" in handler._get_anchor_prompt()
    _, outcome = call(handler, "update_working_checkpoint", {"key_info": "", "related_sop": ""})
    assert "<key_info>" not in outcome.next_prompt and "re-read" not in outcome.next_prompt


def test_anchor_related_sop_reminder_in_chinese(home):
    agent = GenericAgent(ScriptedClient([]), home=home, lang="zh")
    h = GenericAgentHandler(agent)
    h.working["related_sop"] = "plan_sop.md"
    assert "有不清晰的地方请再次读取plan_sop.md" in h._get_anchor_prompt()


def test_only_first_call_of_a_turn_carries_the_anchor(run_agent):
    script = [{"text": "<summary>two</summary>", "tool_calls": [
        {"name": "update_working_checkpoint", "args": {"key_info": "KEY"}},
        {"name": "update_working_checkpoint", "args": {"related_sop": "s.md"}}]},
        {"text": "done"}]
    _, client, _ = run_agent(script)
    sent = client.calls[1]["messages"][0]["content"]
    assert sent.count("### [WORKING MEMORY]") == 1


# ---- turn_end_callback -----------------------------------------------------------------
def test_summary_goes_to_history_info(handler):
    end_turn(handler, 1, "<summary>read the\nconfig   file</summary> then more")
    assert handler.history_info[-1] == "[Agent] read the config file"


def test_summary_fallback_strips_code_and_thinking(handler):
    text = "<thinking>secret plan</thinking>Looking at it ```python\nprint(1)\n``` now"
    end_turn(handler, 1, text)
    assert handler.history_info[-1] == "[Agent] Looking at it now"


def test_summary_is_squeezed_to_a_short_line(handler):
    end_turn(handler, 1, "<summary>" + "word " * 100 + "</summary>")
    line = handler.history_info[-1]
    assert len(line) <= len("[Agent] ") + 90 and "\n" not in line


def test_summary_fallback_without_reply_text_names_the_tool_or_a_direct_answer(handler):
    calls = [{"tool_name": "file_read", "args": {"path": "a.txt", "_index": 0}, "id": "x"}]
    end_turn(handler, 1, "<thinking>only thoughts</thinking>", calls=calls)
    assert handler.history_info[-1] == '[Agent] file_read, args: {"path": "a.txt"}'
    end_turn(handler, 2, "", calls=[{"tool_name": "no_tool", "args": {}, "id": ""}])
    assert handler.history_info[-1] == "[Agent] answered the user directly"


def test_summary_line_masks_a_key(home):
    from llmcore.secrets import MASK, Redactor

    key = "sk-test-" + "a1B2c3D4" * 4
    agent = GenericAgent(ScriptedClient([]), home=home, redactor=Redactor([key]))
    h = GenericAgentHandler(agent)
    end_turn(h, 1, f"<summary>logged in with {key}</summary>")
    assert key not in h.history_info[-1] and MASK in h.history_info[-1]


def test_missing_summary_tip_only_when_a_tool_was_called(handler):
    out = end_turn(handler, 1, "no summary here")
    assert "must include <summary>" in out
    assert "must include <summary>" not in end_turn(handler, 2, "<summary>did it</summary>")
    no_tool = [{"tool_name": "no_tool", "args": {}, "id": ""}]
    out = end_turn(handler, 2, "final answer", calls=no_tool)
    assert "<summary>" not in out


def test_passed_sessions_counts_turns_and_warns_at_each_multiple_of_7(handler):
    warnings = {}
    for turn in range(1, 22):
        out = end_turn(handler, turn, calls=[{"tool_name": "file_read",
                                              "args": {"path": str(turn)}, "id": "i"}])
        warnings[turn] = "[DANGER]" in out and "without a checkpoint" in out
        if turn == 7:
            assert "Call update_working_checkpoint to save key context" in out
            assert "switch strategy; re-read the relevant SOPs" in out
    assert handler.working["passed_sessions"] == 21
    assert [t for t, w in warnings.items() if w] == [7, 14, 21]


def test_checkpoint_stops_the_danger_warning(handler):
    for turn in range(1, 6):
        end_turn(handler, turn)
    handler.current_turn = 6
    call(handler, "update_working_checkpoint", {"key_info": "K"})
    end_turn(handler, 6)
    assert handler.working["passed_sessions"] == 0
    out = end_turn(handler, 7)
    assert "without a checkpoint" not in out
    assert handler.working["passed_sessions"] == 1


def test_checkpoint_threshold_configurable(home):
    agent = GenericAgent(ScriptedClient([]), home=home,
                         settings=Settings(checkpoint_warn_turns=2))
    h = GenericAgentHandler(agent)
    assert "without a checkpoint" not in end_turn(h, 1)
    assert "without a checkpoint" in end_turn(h, 2)


def test_periodic_reminders(handler):
    assert "to a **file**" in end_turn(handler, 31)
    assert "to a **file**" not in end_turn(handler, 30)
    assert "Call ask_user" in end_turn(handler, 175)
    assert "Call ask_user" not in end_turn(handler, 174)
    handler.working["in_plan_mode"] = "plan.md"
    assert "Call ask_user to summarize" not in end_turn(handler, 350)


def test_insight_reinjected_every_10_turns(handler):
    insight = insight_reminder(handler.memory, "en").strip()
    assert insight
    assert insight in end_turn(handler, 10)
    assert insight not in end_turn(handler, 11)


@pytest.mark.parametrize(("settings", "turn", "needle"), [
    ({"ask_user_every": 4}, 4, "Call ask_user to summarize"),
    ({"insight_every": 3}, 3, "L1"),
    ({"plan_hint_every": 3, "plan_hint_after": 0}, 3, "[Plan Hint]"),
    ({"plan_limit_turns": 6}, 6, "Plan mode has run 6 turns"),
])
def test_reminder_intervals_configurable(home, settings, turn, needle):
    agent = GenericAgent(ScriptedClient([]), home=home, settings=Settings(**settings))
    agent.system_prompt()  # seeds the memory, as the first task does
    h = GenericAgentHandler(agent)
    needle = insight_reminder(h.memory).strip() if needle == "L1" else needle
    if "plan" in str(settings):
        h.working["in_plan_mode"] = "plan.md"
    assert needle not in end_turn(h, turn - 1)
    assert needle in end_turn(h, turn)


def test_reminder_texts_configurable(home):
    settings = Settings(file_reminder_every=3, texts={"remind_file": "SAVE NOTES {turn}"})
    h = GenericAgentHandler(GenericAgent(ScriptedClient([]), home=home, settings=settings))
    assert "SAVE NOTES 3" in end_turn(h, 3)


def test_plan_mode_hints_and_limit(handler, tmp_path):
    plan = tmp_path / "plan.md"
    plan.write_text("- [ ] one\n")
    handler.enter_plan_mode(str(plan))
    assert handler.working["in_plan_mode"] == str(plan)
    assert not end_turn(handler, 5).startswith("[Plan Hint]")
    out = end_turn(handler, 15)
    assert out.startswith("[Plan Hint]") and str(plan) in out
    assert not end_turn(handler, 16).startswith("[Plan Hint]")
    assert "Plan mode has run 190 turns" in end_turn(handler, 190)


def test_no_plan_hint_or_plan_limit_outside_plan_mode(handler):
    assert "[Plan Hint]" not in end_turn(handler, 15)
    assert "Plan mode has run" not in end_turn(handler, 190)


def test_plan_mode_refuses_completion_without_verification(handler, tmp_path):
    plan = tmp_path / "plan.md"
    plan.write_text("- [x] one\n")
    handler.working["in_plan_mode"] = str(plan)
    resp = SimpleNamespace(content="All tasks complete 🏁", thinking="", stop_reason="end_turn")
    _, outcome = call_no_tool(handler, resp)
    assert outcome.next_prompt and "[VERIFY]" in outcome.next_prompt
    resp.content = "All tasks complete. [VERIFY] VERDICT: pass"
    _, outcome = call_no_tool(handler, resp)
    assert outcome.next_prompt is None
    assert "in_plan_mode" not in handler.working  # no [ ] left: plan mode ends


def call_no_tool(handler, resp):
    return drain(handler.dispatch("no_tool", {}, resp))


def test_master_injection_from_agent_attributes_consumed_once(handler, agent):
    agent.extrakeyinfo = "use port 8080"
    agent.intervene = "stop and summarize"
    out = end_turn(handler, 1)
    assert "[MASTER] stop and summarize" in out
    assert handler.working["key_info"].endswith("\n[MASTER] use port 8080")
    out = end_turn(handler, 2)
    assert "[MASTER]" not in out
    assert handler.working["key_info"].count("[MASTER]") == 1


def test_master_injection_from_task_dir_files(handler, agent, tmp_path):
    agent.task_dir = tmp_path
    (tmp_path / "_keyinfo").write_text("the key is blue")
    (tmp_path / "_intervene").write_text("switch to plan B")
    out = end_turn(handler, 1)
    assert "[MASTER] switch to plan B" in out
    assert "[MASTER] the key is blue" in handler.working["key_info"]
    assert not (tmp_path / "_keyinfo").exists() and not (tmp_path / "_intervene").exists()


def test_turn_end_hooks_get_a_read_only_view(handler, agent):
    seen = []
    agent._turn_end_hooks["probe"] = lambda view: seen.append(view)
    agent._turn_end_hooks["broken"] = lambda view: view.__setitem__("turn", 0)
    end_turn(handler, 3)
    assert seen and seen[0]["turn"] == 3
    with pytest.raises(TypeError):
        seen[0]["turn"] = 1


# ---- runaway-loop guard ----------------------------------------------------------------
def test_same_call_three_turns_warns_six_ends_no_progress(run_agent):
    same = {"text": "<summary>again</summary>",
            "tool_calls": [{"name": "code_run", "args": {"type": "bash", "script": "true"}}]}
    agent, client, events = run_agent([same] * 8)
    assert events[-1]["result"] == "NO_PROGRESS"
    assert len(client.calls) == 6
    prompts = [c["messages"][0]["content"] for c in client.calls[1:]]
    assert "no progress" not in prompts[1]  # after 2 repeats
    assert "[DANGER] You called code_run with the same arguments 3 turns" in prompts[2]


def test_changing_arguments_resets_the_guard(run_agent):
    steps = [{"text": "<summary>s</summary>", "tool_calls": [
        {"name": "code_run", "args": {"type": "bash", "script": f"echo {i % 2}"}}]}
        for i in range(8)] + [{"text": "done"}]
    _, client, events = run_agent(steps)
    assert events[-1]["result"] == "CURRENT_TASK_DONE"
    assert not any("same arguments" in c["messages"][0]["content"] for c in client.calls[1:])


# ---- across tasks ----------------------------------------------------------------------
def test_key_info_carried_to_next_task_with_one_staleness_line(run_agent):
    first = [{"text": "<summary>s</summary>",
              "tool_calls": [{"name": "update_working_checkpoint",
                              "args": {"key_info": "deploy target is box7",
                                       "related_sop": "deploy_sop.md"}}]},
             {"text": "done 1"}]
    agent, client, _ = run_agent(first, task="task one")
    run_agent([{"text": "done 2"}], task="task two", agent=agent)
    run_agent([{"text": "done 3"}], task="task three", agent=agent)
    working = agent.handler.working
    assert working["key_info"].startswith("deploy target is box7")
    assert working["key_info"].count("[Note] key_info") == 1
    assert "set 2 task(s) ago" in working["key_info"]
    assert working["passed_tasks"] == 2 and working["related_sop"] == "deploy_sop.md"
    first_msg_task3 = client.calls[-1]["messages"][-1]["content"]
    assert first_msg_task3.startswith("task three")
    assert "### [WORKING MEMORY]" in first_msg_task3
    assert "<key_info>deploy target is box7" in first_msg_task3
    assert "set 2 task(s) ago" in first_msg_task3
    assert "Current turn: 1\n" in first_msg_task3 and "Current turn: 0" not in first_msg_task3
    assert "<history>\n[USER] task one" in first_msg_task3  # the block is whole


def test_staleness_line_with_a_configured_text_is_replaced_not_stacked(run_agent):
    settings = Settings(texts={"stale_key_info": "(old: {n} tasks back; {{clear}} it if new)"})
    first = [{"text": "<summary>s</summary>", "tool_calls": [
        {"name": "update_working_checkpoint", "args": {"key_info": "target box7"}}]},
        {"text": "done 1"}]
    agent, _, _ = run_agent(first, settings=settings)
    for _ in range(2):
        run_agent([{"text": "done"}], agent=agent)
    line = "(old: 2 tasks back; {clear} it if new)"
    assert agent.handler.working["key_info"] == "target box7\n" + line


def test_passed_tasks_counts_tasks_since_a_checkpoint_without_key_info(run_agent):
    first = [{"text": "<summary>s</summary>", "tool_calls": [
        {"name": "update_working_checkpoint", "args": {"related_sop": "s.md"}}]},
        {"text": "done 1"}]
    agent, _, _ = run_agent(first)
    for _ in range(2):
        run_agent([{"text": "done"}], agent=agent)
    assert agent.handler.working["passed_tasks"] == 2


def test_passed_sessions_keeps_counting_across_tasks(run_agent):
    steps = [{"text": "<summary>s</summary>", "tool_calls": [
        {"name": "update_working_checkpoint", "args": {"key_info": "K"}}]},
        {"text": "<summary>r</summary>", "tool_calls": [
            {"name": "file_read", "args": {"path": "nope.txt"}}]},
        {"text": "done"}]
    agent, _, _ = run_agent(steps)
    after_first = agent.handler.working["passed_sessions"]
    run_agent([{"text": "done again"}], agent=agent)
    assert after_first == 2
    assert agent.handler.working["passed_sessions"] == 3


def test_no_working_block_in_first_message_without_key_info(run_agent):
    _, client, _ = run_agent([{"text": "hi"}], task="hello")
    assert client.calls[0]["messages"][1]["content"] == "hello"


def test_working_memory_not_written_to_disk_by_the_tool(run_agent, home, tmp_path):
    steps = [{"text": "<summary>s</summary>", "tool_calls": [
        {"name": "update_working_checkpoint", "args": {"key_info": "UNIQUE-MARKER-42"}}]},
        {"text": "done"}]
    run_agent(steps)
    for root in (home, tmp_path / "work"):
        for p in root.rglob("*"):
            journals = {"sessions", "logs", "L4_raw_sessions"}  # transcripts, not the tool
            if p.is_file() and not journals & set(p.parts):
                assert "UNIQUE-MARKER-42" not in p.read_text(errors="ignore"), p


def test_history_info_records_user_requests(run_agent):
    agent, _, _ = run_agent([{"text": "<summary>answered</summary>hi"}], task="say hi")
    assert agent.history_info[:2] == ["[USER] say hi", "[Agent] answered"]


def test_settings_reject_unknown_keys():
    from llmcore.base import ConfigError

    with pytest.raises(ConfigError, match="agent.bogus"):
        Settings.from_dict({"bogus": 1}, "config.yaml")
    assert Settings.from_dict({"repeat_warn": 4}).repeat_warn == 4


@pytest.mark.parametrize(("agent", "field", "words"), [
    ({"checkpoint_warn_turn": 5}, "agent.checkpoint_warn_turn",
     "unknown setting; did you mean checkpoint_warn_turns?"),
    ({"checkpoint_warn_turns": 0}, "agent.checkpoint_warn_turns", ">= 1, got 0"),
    ({"insight_every": -1}, "agent.insight_every", ">= 1, got -1"),
    ({"summary_chars": 0}, "agent.summary_chars", ">= 1"),
    ({"history_lines": "30"}, "agent.history_lines", "whole number"),
    ({"plan_hint_after": -1}, "agent.plan_hint_after", ">= 0"),
    ({"repeat_warn": 5, "repeat_stop": 2}, "agent.repeat_warn", "<= repeat_stop (2)"),
    ({"texts": {"nosuch": "x"}}, "agent.texts.nosuch", "unknown text; known: anchor_header"),
    ({"texts": {"remind_file": "Turn {turnx}"}}, "agent.texts.remind_file",
     "unknown placeholder {turnx}; this text takes {turn}"),
    ({"texts": {"summary_missing": "say {what}"}}, "agent.texts.summary_missing",
     "takes no placeholders"),
    ({"texts": {"remind_file": "Turn {turn"}}, "agent.texts.remind_file", "bad braces"),
    ({"texts": {"remind_file": 3}}, "agent.texts.remind_file", "must be a string"),
    ({"texts": ["remind_file"]}, "agent.texts", "mapping"),
])
def test_agent_settings_are_checked(home, tmp_path, capsys, agent, field, words):
    from frontends.cli import main
    from llmcore.base import ConfigError

    with pytest.raises(ConfigError) as err:
        Settings.from_dict(agent, "c.yaml")
    assert err.value.field == field and words in err.value.message
    (home / "config.yaml").write_text(json.dumps({"agent": agent}))
    model = tmp_path / "model.yaml"
    model.write_text(json.dumps([{"text": "done"}]))
    assert main(["-m", f"scripted:{model}", "go"]) == 2
    err = capsys.readouterr().err
    assert field in err and "config.yaml" in err and "Traceback" not in err
    assert main(["config", "check"]) == 2
    assert field in capsys.readouterr().err


def test_agent_texts_may_use_their_placeholders_and_literal_braces(home):
    settings = Settings.from_dict({"file_reminder_every": 2, "plan_hint_after": 0, "texts": {
        "remind_file": "{{save}} at turn {turn}", "anchor_header": "## {{MEMORY}}"}})
    h = GenericAgentHandler(GenericAgent(ScriptedClient([]), home=home, settings=settings))
    assert "{save} at turn 2" in end_turn(h, 2)
    assert "## {MEMORY}" in h._get_anchor_prompt()


def test_text_tables_share_their_placeholders():
    from tools.texts import EN, ZH, placeholders

    assert {k: placeholders(v) for k, v in ZH.items()} == \
        {k: placeholders(v) for k, v in EN.items()}


def test_chinese_reminders(home):
    h = GenericAgentHandler(GenericAgent(ScriptedClient([]), home=home, lang="zh"))
    out = "".join(end_turn(h, t) for t in range(1, 8))
    assert "已连续 7 轮未设检查点" in out
    assert json.dumps(out, ensure_ascii=False)


# ---- no_tool rules ---------------------------------------------------------------------
@pytest.mark.parametrize("step, needle", [
    ({"text": ""}, "Blank response"),
    ({"text": "half a sent", "stop_reason": "max_tokens"}, "max_tokens limit reached"),
    ({"text": "cut off mid", "stop_reason": "error"}, "was cut off"),
    ({"text": "<summary>code</summary>\n```python\n" + "x = 1\n" * 12 + "```"},
     "mostly a large code block"),
])
def test_no_tool_asks_again_instead_of_finishing(run_agent, step, needle):
    _, client, events = run_agent([step, {"text": "final answer"}])
    assert needle in client.calls[1]["messages"][0]["content"]
    assert events[-1]["result"] == "CURRENT_TASK_DONE" and events[-1]["text"] == "final answer"


def test_a_code_block_with_explanation_is_a_final_answer(run_agent):
    text = "Here is the fix:\n```python\n" + "x = 1\n" * 12 + "```\nIt sets x before use."
    _, client, events = run_agent([{"text": text}])
    assert len(client.calls) == 1 and events[-1]["text"] == text


def test_empty_reply_counter_resets_after_a_real_reply(run_agent):
    steps = [{"text": ""}, {"text": ""},
             {"text": "<summary>s</summary>", "tool_calls": [
                 {"name": "file_read", "args": {"path": "x"}}]},
             {"text": ""}, {"text": ""}, {"text": "done"}]
    _, _, events = run_agent(steps)
    assert events[-1]["result"] == "CURRENT_TASK_DONE"


def test_a_task_after_an_ask_user_stop_answers_the_question(run_agent):
    ask = {"text": "<summary>ask</summary>", "tool_calls": [
        {"name": "ask_user", "args": {"question": "Which color?", "candidates": ["red", "blue"]}}]}
    agent, client, _ = run_agent([ask], task="paint it")
    asked = client.history[-1]["content"][-1]
    _, _, events = run_agent([{"text": "red it is"}], task=" 1 ", agent=agent)
    first = client.calls[-1]["messages"][1]
    assert first == {"role": "user", "content": "",
                     "tool_results": [{"tool_use_id": asked["id"], "content": "red"}]}
    assert events[0]["prompt"] == "red"
    assert agent.history_info[-2] == "[USER] red"
    run_agent([{"text": "ok"}], task="2", agent=agent)  # nothing pending now: "2" is a task
    assert client.calls[-1]["messages"][1] == {"role": "user", "content": "2"}


def test_an_answer_to_a_question_that_is_not_a_pick_is_kept_as_typed(run_agent):
    ask = {"text": "<summary>ask</summary>", "tool_calls": [
        {"name": "update_working_checkpoint", "args": {"key_info": "K"}},
        {"name": "ask_user", "args": {"question": "Port?", "candidates": ["80"]}}]}
    agent, client, _ = run_agent([ask], task="deploy")
    asked = client.history[-1]["content"][-1]
    run_agent([{"text": "ok"}], task="3", agent=agent)  # out of range: the text itself
    first = client.calls[-1]["messages"][1]
    assert first["tool_results"][-1] == {"tool_use_id": asked["id"], "content": "3"}
    assert first["content"].startswith("### [WORKING MEMORY]")  # key_info still comes
