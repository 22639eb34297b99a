"""CLI options added for sessions and limits: --max-tokens, --json purity, `--`, session id."""

from __future__ import annotations

import json

import yaml

from frontends.cli import main

STEP = {"text": "<summary>work</summary>working", "usage": {"input": 60, "output": 10},
        "tool_calls": [{"name": "code_run", "args": {"type": "bash", "script": "echo hi"}}]}


def script(tmp_path, steps) -> str:
    p = tmp_path / "script.yaml"
    p.write_text(yaml.safe_dump(steps))
    return f"scripted:{p}"


def varied(n: int) -> list[dict]:
    steps = []
    for i in range(n):
        step = json.loads(json.dumps(STEP))
        step["tool_calls"][0]["args"]["script"] = f"echo {i}"
        steps.append(step)
    return steps


def test_token_budget_ends_the_task_with_exit_4(tmp_path, capsys):
    code = main(["-m", script(tmp_path, varied(6) + [{"text": "done"}]), "--max-tokens", "150",
                 "go"])
    err = capsys.readouterr().err
    assert code == 4
    assert "stopped: token budget of 150 reached" in err and "--max-tokens" in err


def test_token_budget_not_reached_finishes(tmp_path, capsys):
    code = main(["-m", script(tmp_path, varied(2) + [{"text": "done"}]), "--max-tokens",
                 "1000", "go"])
    assert code == 0


def test_json_mode_budget_keeps_stdout_pure_json(tmp_path, capsys):
    code = main(["-m", script(tmp_path, varied(6)), "--json", "--max-tokens", "100", "go"])
    out, err = capsys.readouterr()
    assert code == 4
    events = [json.loads(line) for line in out.splitlines()]
    assert events[-1]["type"] == "task_end" and events[-1]["result"] == "BUDGET_EXCEEDED"
    assert "ga: session " in err


def test_session_id_goes_to_stderr(tmp_path, home, capsys):
    assert main(["-m", script(tmp_path, [{"text": "ok"}]), "go"]) == 0
    out, err = capsys.readouterr()
    sid = next((home / "sessions").glob("*.jsonl")).stem
    assert sid in err and sid not in out


def test_double_dash_runs_a_management_word_as_a_task(tmp_path, home, capsys):
    assert main(["-m", script(tmp_path, [{"text": "ran as a task"}]), "--", "sessions"]) == 0
    assert "ran as a task" in capsys.readouterr().out


def test_unknown_option_is_a_usage_error(tmp_path, capsys):
    assert main(["-m", script(tmp_path, [{"text": "x"}]), "--bogus", "1", "go"]) == 2


def test_bg_needs_task_or_func(tmp_path, capsys):
    assert main(["-m", script(tmp_path, [{"text": "x"}]), "--bg", "go"]) == 2
    assert "--bg" in capsys.readouterr().err


def test_input_needs_task_dir(tmp_path, capsys):
    assert main(["-m", script(tmp_path, [{"text": "x"}]), "--input", "hi", "go"]) == 2
    assert "--input" in capsys.readouterr().err
