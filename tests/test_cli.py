"""CLI options added for sessions and limits: --max-tokens, --json purity, `--`, session id."""

from __future__ import annotations

import json

import pytest
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


@pytest.mark.parametrize("argv", [["--max-turns", "0"], ["--max-turns", "-1"],
                                  ["--max-tokens", "-5"], ["--max-tokens", "0"],
                                  ["--max-turns", "many"]])
def test_a_limit_below_one_is_a_usage_error(argv, tmp_path, home, capsys):
    assert main(["-m", script(tmp_path, [{"text": "x"}]), *argv, "go"]) == 2
    assert f"argument {argv[0]}:" in capsys.readouterr().err
    assert not (home / "sessions").exists()


def test_an_empty_home_is_a_usage_error(tmp_path, capsys):
    for argv in (["--home", "", "go"], ["--home", "", "sessions"], ["--home=", "memory"]):
        assert main(["-m", script(tmp_path, [{"text": "x"}]), *argv]) == 2
        assert "ga: --home: an empty path" in capsys.readouterr().err
    assert not (tmp_path / "work" / "sessions").exists()


def test_a_task_argument_that_is_not_utf8_runs(tmp_path, home, capsys):
    bad = b"fix \xff this".decode("utf-8", "surrogateescape")  # as Python decodes argv
    assert main(["-m", script(tmp_path, [{"text": "fixed"}]), bad]) == 0
    assert capsys.readouterr().out == "fixed\n"
    journal = next((home / "sessions").glob("*.jsonl")).read_text(encoding="utf-8")
    assert "fix \ufffd this" in journal


def test_task_dir_naming_a_file_is_a_usage_error(tmp_path, capsys):
    afile = tmp_path / "notes.txt"
    afile.write_text("keep me")
    assert main(["-m", script(tmp_path, [{"text": "x"}]), "--task", str(afile),
                 "--input", "hi"]) == 2
    assert f"--task: {afile} is a file; --task takes a folder" in capsys.readouterr().err
    assert afile.read_text() == "keep me"
    assert main(["-m", script(tmp_path, [{"text": "x"}]), "--task", str(afile)]) == 2
    assert "is a file" in capsys.readouterr().err
