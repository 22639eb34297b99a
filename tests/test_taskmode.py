"""Task mode (--task DIR): the file protocol of SPEC §7; func mode; --bg."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from frontends.cli import main, options_only
from frontends.journal import load_session

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 30
ROUND_END = "[ROUND END]"


def script(tmp_path, steps, name="script.yaml") -> str:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(steps, allow_unicode=True))
    return f"scripted:{p}"


def wait_for(predicate, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def ends_round(path: Path) -> bool:
    return path.exists() and path.read_text().rstrip().endswith(ROUND_END)


def test_two_rounds_with_keyinfo_intervene_and_stop(tmp_path, home):
    task = tmp_path / "child"
    steps = [
        {"text": "round one answer"},
        {"text": "<summary>look</summary>looking", "tool_calls": [
            {"name": "code_run", "args": {"type": "bash", "script": "echo looked"}}]},
        {"text": "<summary>long</summary>long run", "tool_calls": [
            {"name": "code_run", "args": {"type": "bash",
                                          "script": "echo started-$((40+2)); sleep 60"}}]},
        {"text": "never reached"}]
    env = {**os.environ, "GA_HOME": str(home), "PYTHONPATH": str(ROOT),
           "GA_TASK_REPLY_WAIT": str(TIMEOUT)}
    proc = subprocess.Popen([sys.executable, str(ROOT / "ga.py"), "-m", script(tmp_path, steps),
                             "--task", str(task), "--input", "first question"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: ends_round(task / "output.txt"), "round 1")
        assert "round one answer" in (task / "output.txt").read_text()
        (task / "_keyinfo").write_text("master fact: use port 9")
        (task / "_intervene").write_text("hurry up")
        (task / "reply.txt").write_text("second question")
        out1 = task / "output1.txt"
        wait_for(lambda: out1.exists() and "started-42" in out1.read_text(), "the long run")
        assert not (task / "reply.txt").exists()
        (task / "_stop").write_text("")
        wait_for(lambda: ends_round(out1), "the stopped round 2 to end")
        assert "never reached" not in out1.read_text()
        (task / "_stop").write_text("")  # while waiting for a reply: end the child
        _, err = proc.communicate(timeout=TIMEOUT)
    finally:
        proc.kill()
    assert not (task / "_stop").exists() and not (task / "_keyinfo").exists()
    sid = err.split("ga --resume ")[-1].split(")")[0]
    state = load_session(home / "sessions" / f"{sid}.jsonl")
    assert "[MASTER] master fact: use port 9" in state.working["key_info"]
    sent = [b.get("text", "") for m in state.history if m["role"] == "user"
            for b in m["content"]]
    assert any("[MASTER] hurry up" in t for t in sent)
    assert "second question" in sent and "first question" in sent


LONG_RUN = {"text": "<summary>long</summary>long run", "tool_calls": [
    {"name": "code_run", "args": {"type": "bash", "script": "echo started-$((40+2)); sleep 60"}}]}


def start_child(tmp_path, home, task: Path, steps: list) -> subprocess.Popen:
    env = {**os.environ, "GA_HOME": str(home), "PYTHONPATH": str(ROOT), "GA_LANG": "en",
           "GA_TASK_REPLY_WAIT": str(TIMEOUT)}
    return subprocess.Popen([sys.executable, str(ROOT / "ga.py"), "-m", script(tmp_path, steps),
                             "--task", str(task), "--input", "go"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_running(task: Path) -> None:
    out = task / "output.txt"
    wait_for(lambda: out.exists() and "started-42" in out.read_text(), "the long run")


@pytest.mark.parametrize("sig, code, words", [
    (signal.SIGTERM, 143, "terminated (SIGTERM)"), (signal.SIGHUP, 129, "hung up (SIGHUP)"),
    (signal.SIGINT, 130, "interrupted")])
def test_a_signalled_child_ends_its_round_saying_how(tmp_path, home, sig, code, words):
    """A parent polling for [ROUND END] (sop/subagent_sop.md) sees the child ended."""
    task = tmp_path / "child"
    proc = start_child(tmp_path, home, task, [LONG_RUN, {"text": "never reached"}])
    try:
        wait_running(task)
        proc.send_signal(sig)
        assert proc.wait(TIMEOUT) == code
    finally:
        proc.kill()
        proc.communicate()
    lines = (task / "output.txt").read_text().rstrip().splitlines()
    assert lines[-2:] == [f"■ {words}", ROUND_END]


def test_stop_file_ends_the_round_as_stopped_and_the_child_waits_for_a_reply(tmp_path, home,
                                                                              capsys):
    task = tmp_path / "child"
    proc = start_child(tmp_path, home, task, [LONG_RUN, {"text": "second answer"}])
    try:
        wait_running(task)
        (task / "_stop").write_text("")
        wait_for(lambda: ends_round(task / "output.txt"), "the stopped round to end")
        (task / "reply.txt").write_text("go on")  # the child still listens
        wait_for(lambda: ends_round(task / "output1.txt"), "the next round")
        (task / "_stop").write_text("")  # while waiting for a reply: end the child
        assert proc.wait(TIMEOUT) == 0
    finally:
        proc.kill()
        _, err = proc.communicate()
    lines = (task / "output.txt").read_text().rstrip().splitlines()
    assert lines[-2:] == ["■ stopped (_stop file)", ROUND_END]
    assert "second answer" in (task / "output1.txt").read_text()
    assert "ga: stopped (_stop file)" in err
    (journal,) = (home / "sessions").glob("*.jsonl")
    ends = [json.loads(line) for line in journal.read_text().splitlines()
            if '"task_end"' in line]
    assert [e.get("reason") for e in ends] == ["stopped (_stop file)", None]
    assert main(["--home", str(home), "sessions", "show", journal.stem]) == 0
    shown = capsys.readouterr().out
    assert "■ stopped (_stop file)" in shown and "interrupted" not in shown


def test_a_stopped_last_round_exits_0(tmp_path, home):
    task = tmp_path / "child"
    proc = start_child(tmp_path, home, task, [LONG_RUN])
    try:
        wait_running(task)
        (task / "_stop").write_text("")
        wait_for(lambda: ends_round(task / "output.txt"), "the stopped round to end")
        (task / "_stop").write_text("")
        assert proc.wait(TIMEOUT) == 0
    finally:
        proc.kill()
        proc.communicate()


def test_input_clears_old_outputs_and_history_json_seeds(tmp_path, home, monkeypatch, capsys):
    monkeypatch.setenv("GA_TASK_REPLY_WAIT", "0")
    task = tmp_path / "child"
    task.mkdir()
    (task / "output3.txt").write_text("stale")
    (task / "_history.json").write_text(json.dumps([
        {"role": "user", "content": [{"type": "text", "text": "old question"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "old answer"}]}]))
    code = main(["-m", script(tmp_path, [{"text": "fresh answer"}]), "--task", str(task),
                 "--input", "new question"])
    assert code == 0
    assert not (task / "output3.txt").exists()
    assert (task / "input.txt").read_text() == "new question"
    out = (task / "output.txt").read_text()
    assert "fresh answer" in out and out.rstrip().endswith(ROUND_END)
    state = load_session(next((home / "sessions").glob("*.jsonl")))
    texts = [b.get("text") for m in state.history for b in m["content"]]
    assert texts[:3] == ["old question", "old answer", "new question"]


def test_task_mode_without_input_is_a_usage_error(tmp_path, capsys):
    assert main(["-m", script(tmp_path, [{"text": "x"}]), "--task", str(tmp_path / "t")]) == 2
    assert "input.txt" in capsys.readouterr().err


def test_func_mode_writes_stem_out_txt(tmp_path, capsys):
    job = tmp_path / "jobs" / "summarise.txt"
    job.parent.mkdir()
    job.write_text("summarise the thing")
    assert main(["-m", script(tmp_path, [{"text": "the summary"}]), "--func", str(job)]) == 0
    assert (job.parent / "summarise.out.txt").read_text().strip() == "the summary"


def test_func_ask_user_writes_the_question_and_the_command_that_answers(tmp_path, home,
                                                                         capsys):
    job = tmp_path / "deploy.txt"
    job.write_text("deploy the site")
    path = tmp_path / "script.yaml"
    ask = {"text": "<summary>ask</summary>asking", "tool_calls": [{"name": "ask_user", "args": {
        "question": "Which port?", "candidates": ["80", "8080"]}}]}
    assert main(["-m", script(tmp_path, [ask]), "--home", str(home), "--func", str(job)]) == 3
    lines = (tmp_path / "deploy.out.txt").read_text().splitlines()
    assert lines[:3] == ["Which port?", "  1. 80", "  2. 8080"]
    command = lines[-1].strip()
    assert shlex.split(command)[-1] == "ANSWER"
    path.write_text(yaml.safe_dump([{"text": "deploying on 8080"}]))  # the model's next turn
    capsys.readouterr()
    assert main(shlex.split(command)[1:-1] + ["2"]) == 0  # the parent answers as told
    assert capsys.readouterr().out.endswith("deploying on 8080\n")


def assert_bg_child_answered(task, pid: int) -> None:
    """The detached child ran its round into task/output.txt; reap it if it is ours."""
    wait_for(lambda: ends_round(task / "output.txt"), "the background child")
    assert "bg answer" in (task / "output.txt").read_text()
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def test_bg_detaches_and_prints_the_pid(tmp_path, home, monkeypatch, capsys):
    monkeypatch.setenv("GA_TASK_REPLY_WAIT", "0")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    task = tmp_path / "bgchild"
    code = main(["-m", script(tmp_path, [{"text": "bg answer"}]), "--task", str(task),
                 "--input", "go", "--bg"])
    assert code == 0
    pid = int(capsys.readouterr().out.strip())
    assert pid != os.getpid()
    assert (task / "input.txt").read_text() == "go"
    assert_bg_child_answered(task, pid)


def test_bg_without_any_input_exits_2_before_detaching(tmp_path, home, capsys):
    task = tmp_path / "newdir"
    assert main(["-m", script(tmp_path, [{"text": "x"}]), "--task", str(task), "--bg"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and f"{task / 'input.txt'} not found" in err
    assert "--input TEXT or the task text" in err
    assert not (home / "logs" / "bg").exists()  # nothing was started


def test_func_bg_with_a_missing_file_exits_2_before_detaching(tmp_path, home, capsys):
    job = tmp_path / "missing.txt"
    assert main(["-m", script(tmp_path, [{"text": "x"}]), "--func", str(job), "--bg"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and f"--func: cannot read {job}" in err
    assert not (home / "logs" / "bg").exists()


def test_task_text_is_the_input_of_task_mode(tmp_path, home, monkeypatch):
    monkeypatch.setenv("GA_TASK_REPLY_WAIT", "0")
    task = tmp_path / "child"
    task.mkdir()
    (task / "output.txt").write_text("stale")
    assert main(["-m", script(tmp_path, [{"text": "the answer"}]), "--task", str(task),
                 "what", "is", "it"]) == 0
    assert (task / "input.txt").read_text() == "what is it"
    assert "the answer" in (task / "output.txt").read_text()


def test_task_text_and_input_together_are_a_usage_error(tmp_path, home, capsys):
    task = tmp_path / "child"
    assert main(["-m", script(tmp_path, [{"text": "x"}]), "--task", str(task), "--input", "a",
                 "b"]) == 2
    assert "--input: give the input once" in capsys.readouterr().err
    assert not task.exists()


def test_func_with_task_text_is_a_usage_error(tmp_path, home, capsys):
    job = tmp_path / "job.txt"
    job.write_text("the prompt")
    assert main(["-m", script(tmp_path, [{"text": "x"}]), "--func", str(job), "more"]) == 2
    assert f"--func: the prompt is {job}'s text" in capsys.readouterr().err
    assert not (tmp_path / "job.out.txt").exists()


def test_bg_with_task_text_writes_it_as_the_input(tmp_path, home, monkeypatch, capsys):
    monkeypatch.setenv("GA_TASK_REPLY_WAIT", "0")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    task = tmp_path / "bgchild"
    model = script(tmp_path, [{"text": "bg answer"}])
    assert main(["-m", model, "--task", str(task), "--bg", "say", "hi"]) == 0
    pid = int(capsys.readouterr().out.strip())
    assert (task / "input.txt").read_text() == "say hi"
    assert_bg_child_answered(task, pid)


def test_the_background_child_gets_the_options_without_the_task_text():
    argv = ["-m", "oa", "--task", "d", "say", "--bg", "-C", "x", "hi", "--input", "t", "--", "-z"]
    assert options_only(argv) == ["-m", "oa", "--task", "d", "--bg", "-C", "x", "--input", "t",
                                  "--"]
