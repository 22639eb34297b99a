"""Approval questions at a real terminal (SPEC §11): the REPL and a one-shot run in a
pseudo-terminal answer `[y/a/n]` lines; Ctrl-C at the question aborts the task."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pexpect
import yaml
from genutil import quit_repl

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 30
ASK = r"\[y/a/n\] "


def script(tmp_path: Path, steps: list) -> str:
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(steps))
    return f"scripted:{path}"


def code(script_text: str, **args) -> dict:
    return {"name": "code_run", "args": {"type": "bash", "script": script_text, **args}}


def spawn(home: Path, *args: str) -> pexpect.spawn:
    env = {**os.environ, "GA_HOME": str(home), "PYTHONPATH": str(ROOT), "GA_LANG": "en"}
    return pexpect.spawn(sys.executable, [str(ROOT / "ga.py"), *args], env=env,
                         cwd=os.getcwd(), encoding="utf-8", timeout=TIMEOUT,
                         dimensions=(40, 200))


def journal(home: Path) -> list[dict]:
    (path,) = (home / "sessions").glob("*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_repl_asks_yes_always_no_with_a_message_and_ctrl_c_aborts_the_task(home, tmp_path):
    model = script(tmp_path, [
        {"text": "<summary>work</summary>", "tool_calls": [
            code("echo one > one.txt"), code("echo two > two.txt"),
            code("echo three > three.txt"),
            {"name": "file_write", "args": {"path": "notes.txt", "content": "n\n"}}]},
        {"text": "first task done"},
        {"text": "<summary>more</summary>", "tool_calls": [
            {"name": "file_write", "args": {"path": "late.txt", "content": "x"}}]},
        {"text": "after the abort"}])
    child = spawn(home, "-m", model, "--approval", "always")
    child.expect("approval always")  # the banner shows the pair
    child.expect("ga> ")
    child.sendline("do the work")
    child.expect("code_run wants to run this bash code")
    child.expect("echo one > one.txt")
    child.expect(ASK)
    child.sendline("y")
    child.expect(ASK)
    child.sendline("a")  # code_run is not asked about again this session
    child.expect("file_write wants to make this change")
    child.expect(r"\+n")
    child.expect(ASK)
    child.sendline("n")
    child.expect("message for the model")
    child.sendline("write it to README instead")
    child.expect("first task done")
    child.expect("ga> ")
    assert all((Path.cwd() / f).exists() for f in ("one.txt", "two.txt", "three.txt"))
    assert not (Path.cwd() / "notes.txt").exists()
    child.sendline("one more")
    child.expect(ASK)
    child.sendintr()  # Ctrl-C at the question: the task is aborted, the REPL stays
    child.expect("ga> ")
    assert not (Path.cwd() / "late.txt").exists()
    child.sendline("/session.sandbox=full-access")  # a model option, not the sandbox
    child.expect("error")
    child.expect("ga> ")
    child.sendline("/sandbox read-only")
    child.expect("sandbox read-only")
    child.expect("ga> ")
    child.sendline("/approval")
    child.expect("approval always")
    child.expect("ga> ")
    assert quit_repl(child) == 0
    records = journal(home)
    decisions = [(r["tool"], r["decision"]) for r in records if r["type"] == "approval"]
    assert decisions == [("code_run", "yes"), ("code_run", "always"), ("code_run", "always"),
                         ("file_write", "no")]
    declined = [r["data"] for r in records if r["type"] == "tool_result"
                and r["name"] == "file_write"][0]
    assert declined["msg"] == "declined by the user: write it to README instead"
    ends = [r["result"] for r in records if r["type"] == "task_end"]
    assert ends == ["CURRENT_TASK_DONE", "ABORTED"]


def test_an_always_for_a_tool_grants_none_of_its_escalations_later(home, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    model = script(tmp_path, [
        {"text": "<summary>one</summary>", "tool_calls": [code("echo one")]},
        {"text": "first task done"},
        {"text": "<summary>two</summary>", "tool_calls": [
            code(f"echo out > {outside}/x.txt", escalate=True, reason="write outside")]},
        {"text": "second task done"}])
    child = spawn(home, "-m", model, "--approval", "always")
    child.expect("ga> ")
    child.sendline("first")
    child.expect(ASK)
    child.sendline("a")  # every code_run, under approval always
    child.expect("first task done")
    child.expect("ga> ")
    child.sendline("/approval on-request")
    child.expect("approval on-request")
    child.expect("ga> ")
    child.sendline("second")
    child.expect("outside the sandbox")  # an escalation is asked about all the same
    child.expect(ASK)
    child.sendline("n")
    child.expect("message for the model")
    child.sendline("")
    child.expect("second task done")
    child.expect("ga> ")
    assert quit_repl(child) == 0
    assert not (outside / "x.txt").exists()


def test_one_shot_at_a_terminal_asks_for_an_escalation_by_default(home, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    model = script(tmp_path, [
        {"text": "<summary>install</summary>", "tool_calls": [
            code(f"echo ok > {outside}/installed.txt", escalate=True,
                 reason="install the tool for every project")]},
        {"text": "installed"}])
    child = spawn(home, "-m", model, "install it")
    child.expect("outside the sandbox")
    child.expect("reason: install the tool for every project")
    child.expect(ASK)
    child.sendline("y")
    child.expect("installed")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert (outside / "installed.txt").read_text() == "ok\n"
    start = next(r for r in journal(home) if r["type"] == "task_start")
    assert (start["sandbox"], start["approval"]) == ("workspace-write", "on-request")


def test_ctrl_c_at_the_question_ends_a_one_shot_run_with_130(home, tmp_path):
    model = script(tmp_path, [
        {"text": "<summary>edit</summary>", "tool_calls": [
            {"name": "file_write", "args": {"path": "x.txt", "content": "x"}}]},
        {"text": "never reached"}])
    child = spawn(home, "-m", model, "--approval", "always", "write x")
    child.expect(ASK)
    child.sendintr()
    child.expect("interrupted")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    assert not (Path.cwd() / "x.txt").exists()
    end = [r for r in journal(home) if r["type"] == "task_end"]
    assert end and end[-1]["result"] == "ABORTED"


def test_the_question_shows_a_path_the_model_chose_inert(home, tmp_path):
    from test_terminal import assert_inert

    evil = "evil\x1b[2J\x1b]0;pwned\x07notes.txt"  # would clear the screen under the question
    model = script(tmp_path, [{"text": "<summary>w</summary>", "tool_calls": [
        {"name": "file_write", "args": {"path": evil, "content": "x"}}]}, {"text": "done"}])
    child = spawn(home, "-m", model, "--approval", "always", "write it")
    child.expect(ASK)
    asked = child.before
    child.sendline("n")
    child.expect("message for the model")
    child.sendline("")
    child.expect(pexpect.EOF)
    assert_inert(asked.encode())
    assert "make this change to " in asked and "evil\\x1b[2J\\x1b]0;pwned\\x07notes.txt" in asked
