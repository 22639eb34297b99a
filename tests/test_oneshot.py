"""One-shot `ga "TASK"`: output streams, exit codes, --json (SPEC §7)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from frontends.cli import main

ROOT = Path(__file__).resolve().parent.parent


def script(tmp_path, steps) -> str:
    p = tmp_path / "script.yaml"
    p.write_text(yaml.safe_dump(steps, allow_unicode=True))
    return f"scripted:{p}"


def test_demo_task_writes_runs_and_answers(capsys, tmp_path):
    code = main(["-m", f"scripted:{ROOT / 'examples' / 'demo.yaml'}", "make hello.py"])
    out, err = capsys.readouterr()
    assert code == 0
    assert (tmp_path / "work" / "hello.py").read_text() == "print('hello')\n"
    assert "🛠️ code_run(" in err and "\nhello\n" in err
    assert out == "Done: `hello.py` prints `hello`, and running it confirmed the output.\n"


def test_ask_user_exits_3_and_prints_the_question(capsys, tmp_path):
    model = script(tmp_path, [{"text": "<summary>ask</summary>", "tool_calls": [
        {"name": "ask_user", "args": {"question": "Which port?", "candidates": ["80", "8080"]}}]}])
    code = main(["-m", model, "deploy"])
    out = capsys.readouterr().out
    assert code == 3
    assert "Which port?" in out and "1. 80" in out and "2. 8080" in out


def test_no_progress_exits_4(capsys, tmp_path):
    same = {"tool_calls": [{"name": "code_run", "args": {"type": "bash", "script": "true"}}]}
    code = main(["-m", script(tmp_path, [same] * 7), "loop"])
    assert code == 4
    assert "ga: stopped: no progress: code_run was called with the same arguments 6 turns" in (
        capsys.readouterr().err)


def test_max_turns_exits_4(capsys, tmp_path):
    steps = [{"tool_calls": [{"name": "code_run", "args": {"type": "bash",
                                                           "script": f"echo {i}"}}]}
             for i in range(5)]
    assert main(["-m", script(tmp_path, steps), "--max-turns", "2", "go"]) == 4
    assert "ga: stopped: the turn limit (2 turns, --max-turns) was reached" in (
        capsys.readouterr().err)


def test_three_empty_replies_fail_with_exit_1_asking_again_only_twice(capsys, tmp_path):
    code = main(["-m", script(tmp_path, [{"text": ""}] * 3), "go"])
    assert code == 1
    err = capsys.readouterr().err
    assert "the model returned 3 empty replies" in err
    assert err.count("asking again") == 2  # the 3rd empty reply is not asked again


def test_model_failure_exits_1_with_one_line_and_the_session(capsys, tmp_path):
    code = main(["-m", script(tmp_path, [{"raise": "overloaded", "status": 529}]), "go"])
    err = capsys.readouterr().err
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("ga: scripted")
    assert lines[0].endswith(": 529: overloaded")
    assert lines[1].startswith("ga: session ")  # SPEC §7: the session id goes to stderr


def test_bad_script_is_a_config_error_exit_2(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("- text: [unclosed\n")
    assert main(["-m", f"scripted:{bad}", "go"]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "Traceback" not in err


def test_missing_cwd_is_a_usage_error(capsys, tmp_path):
    model = script(tmp_path, [{"text": "x"}])
    assert main(["-m", model, "-C", str(tmp_path / "nope"), "go"]) == 2
    assert "--cwd" in capsys.readouterr().err


def test_cwd_option_moves_the_tools(capsys, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    model = script(tmp_path, [{"tool_calls": [{"name": "file_write",
                                               "args": {"path": "x.txt", "content": "x"}}]},
                              {"text": "ok"}])
    assert main(["-m", model, "-C", str(target), "go"]) == 0
    assert (target / "x.txt").read_text() == "x"


def test_json_mode_prints_only_json_events(capsys, tmp_path):
    model = script(tmp_path, [
        {"text": "<summary>w</summary>", "thinking": "t",
         "tool_calls": [{"name": "file_write", "args": {"path": "a.txt", "content": "A"}}],
         "usage": {"input": 10, "output": 2}},
        {"text": "done"}])
    assert main(["-m", model, "--json", "go"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    events = [json.loads(line) for line in lines]
    types = {e["type"] for e in events}
    assert types <= {"task_start", "turn", "text", "thinking", "tool_call", "tool_result",
                     "usage", "task_end"}
    assert {"tool_call", "tool_result", "usage", "thinking"} <= types
    call = next(e for e in events if e["type"] == "tool_call")
    assert call["name"] == "file_write" and call["args"]["path"] == "a.txt" and call["id"]
    sid = next((tmp_path / "home" / "sessions").glob("*.jsonl")).stem
    assert events[0]["session_id"] == sid  # what --resume needs, from the first line on
    assert events[-1] == {"type": "task_end", "result": "CURRENT_TASK_DONE", "turns": 2,
                          "text": "done", "session_id": sid}


def test_the_task_end_text_is_the_answer_without_summary_markup(capsys, tmp_path):
    model = script(tmp_path, [{"text": "<summary>all checked</summary>The answer is 42."}])
    assert main(["-m", model, "--json", "go"]) == 0
    end = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert end["type"] == "task_end" and end["text"] == "The answer is 42."
    journal = next((tmp_path / "home" / "sessions").glob("*.jsonl")).read_text()
    assert '"text": "The answer is 42."' in journal


def test_json_ask_user_carries_question_and_candidates(capsys, tmp_path):
    model = script(tmp_path, [{"tool_calls": [
        {"name": "ask_user", "args": {"question": "Q?", "candidates": ["a"]}}]}])
    assert main(["-m", model, "--json", "go"]) == 3
    end = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert end["question"] == "Q?" and end["candidates"] == ["a"] and end["result"] == "EXITED"


def test_no_user_tools_drops_them_from_the_schema(tmp_path, capsys):
    from llmcore.scripted import ScriptedClient

    seen = {}
    original = ScriptedClient.chat

    def spy(self, messages, tools=None):
        seen["names"] = {t["function"]["name"] for t in tools}
        return (yield from original(self, messages, tools))

    ScriptedClient.chat = spy
    try:
        main(["-m", script(tmp_path, [{"text": "x"}]), "--no-user-tools", "go"])
    finally:
        ScriptedClient.chat = original
    assert "ask_user" not in seen["names"] and "start_long_term_update" not in seen["names"]
    assert "code_run" in seen["names"]


def test_plugin_adds_a_tool_and_a_hook(tmp_path, home, capsys):
    plugins = home / "plugins"
    plugins.mkdir()
    (plugins / "greet.py").write_text(
        "from agent_loop import StepOutcome\n"
        "from tools.spec import tool\n"
        "def register(api):\n"
        "    @api.tool\n"
        "    @tool\n"
        "    def do_greet(self, name: str):\n"
        "        '''Greet someone.\n\n        Args:\n            name: Who.\n        '''\n"
        "        return StepOutcome('hello ' + name, next_prompt='\\n')\n"
        "    api.on('agent_after', lambda ctx: print('PLUGIN-DONE'))\n")
    (plugins / "broken.py").write_text("raise RuntimeError('nope')\n")
    model = script(tmp_path, [{"tool_calls": [{"name": "greet", "args": {"name": "bo"}}]},
                              {"text": "ok"}])
    assert main(["-m", model, "--json", "go"]) == 0
    out, err = capsys.readouterr()
    results = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    assert any(e.get("data") == "hello bo" for e in results if e["type"] == "tool_result")
    assert "PLUGIN-DONE" in out
    assert "broken.py" in err and "nope" in err


def test_real_ga_command_runs_the_demo(tmp_path):
    env = {**os.environ, "GA_HOME": str(tmp_path / "h"), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "ga.py"), "-m",
         f"scripted:{ROOT / 'examples' / 'demo.yaml'}", "make hello.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "hello.py").exists()
    assert "Done" in proc.stdout


def test_long_prompt_is_saved_to_a_file_and_referenced(run_agent, home):
    task = "x" * 2500
    _, client, _ = run_agent([{"text": "ok"}], task=task)
    sent = client.calls[0]["messages"][1]["content"]
    assert len(sent) < 1000 and "2500 chars" in sent
    saved = next((home / "prompts").glob("*.txt"))
    assert saved.read_text() == task and str(saved) in sent


def test_finished_cli_session_is_archived_in_l4_under_its_journal_id(tmp_path, home, capsys):
    main(["-m", script(tmp_path, [{"text": "<summary>s</summary>forty-two"}]), "ultimate q"])
    journal = next((home / "sessions").glob("*.jsonl"))
    archived = home / "memory" / "L4_raw_sessions" / f"{journal.stem}.md"
    assert "ultimate q" in archived.read_text() and "forty-two" in archived.read_text()
    assert journal.stem in (home / "memory" / "L4_raw_sessions" / "index.txt").read_text()


def test_working_memory_thresholds_come_from_config(tmp_path, home, capsys):
    (home / "config.yaml").write_text(
        "agent:\n  repeat_warn: 2\n  repeat_stop: 3\n")
    same = {"tool_calls": [{"name": "code_run", "args": {"type": "bash", "script": "true"}}]}
    assert main(["-m", script(tmp_path, [same] * 5), "loop"]) == 4
    journal = next((home / "sessions").glob("*.jsonl")).read_text()
    assert journal.count('"type": "turn"') == 3


def test_bad_agent_setting_is_a_config_error(tmp_path, home, capsys):
    (home / "config.yaml").write_text("agent:\n  repeat_wran: 2\n")
    assert main(["-m", script(tmp_path, [{"text": "x"}]), "go"]) == 2
    err = capsys.readouterr().err
    assert "config.yaml" in err and "agent.repeat_wran" in err and "Traceback" not in err


def test_summary_tags_render_as_a_marked_line_even_when_split_across_chunks():
    from frontends.console import SummaryFilter

    text = "<summary>read the config</summary>Now I look at it. a < b"
    for size in (1, 2, 3, 5, 8, 100):
        f = SummaryFilter()
        out = "".join(f.feed(text[i:i + size]) for i in range(0, len(text), size)) + f.flush()
        assert out == "» read the config\nNow I look at it. a < b", size


def test_text_mode_shows_summaries_without_tags(capsys):
    main(["-m", f"scripted:{ROOT / 'examples' / 'demo.yaml'}", "make hello.py"])
    out, err = capsys.readouterr()
    assert "<summary>" not in out + err and "» write hello.py\nWriting the script." in err


def test_plugin_from_an_installed_package_entry_point(tmp_path, monkeypatch, home, capsys,
                                                       request):
    from frontends.plugins import installed_plugins  # read once per process: read again

    installed_plugins.cache_clear()
    request.addfinalizer(installed_plugins.cache_clear)
    site = tmp_path / "site"
    dist = site / "gaplug-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: gaplug\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[genericagent.plugins]\necho = gaplug_mod\n")
    (site / "gaplug_mod.py").write_text(
        "from agent_loop import StepOutcome\n"
        "def register(api):\n"
        "    def do_shout(self, args, response):\n"
        "        '''Shout.'''\n"
        "        return StepOutcome(str(args.get('w', '')).upper(), next_prompt='\\n')\n"
        "    api.tool(do_shout)\n")
    monkeypatch.syspath_prepend(str(site))
    model = script(tmp_path, [{"tool_calls": [{"name": "shout", "args": {"w": "hey"}}]},
                              {"text": "ok"}])
    assert main(["-m", model, "--json", "go"]) == 0
    events = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert any(e["type"] == "tool_result" and e["data"] == "HEY" for e in events)


def test_help_path_imports_neither_the_agent_nor_the_sdks():
    code = ("import sys\nfrom frontends.cli import build_parser\nbuild_parser()\n"
            "print(sorted(m for m in ('ga', 'openai', 'anthropic', 'rich', 'memory') "
            "if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr



def test_verbose_shows_full_args_and_output_panels_compact_shows_one_line(capsys, tmp_path):
    long_script = "print(len('" + "x" * 150 + "'))"
    steps = [{"tool_calls": [{"name": "code_run", "args": {"script": long_script}}]},
             {"text": "ok"}]
    main(["-m", script(tmp_path, steps), "go"])
    compact = capsys.readouterr().err
    main(["-m", script(tmp_path, steps), "-v", "go"])
    verbose = capsys.readouterr().err
    assert "🛠️ code_run(" in compact and "..." in compact and "x" * 150 not in compact
    assert "code_run result" not in compact
    assert "x" * 150 in verbose.replace("\n", "").replace("│", "").replace(" ", "")
    assert "code_run result" in verbose and '"exit_code": 0' in verbose and "150" in verbose
