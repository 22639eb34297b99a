"""The interactive REPL, driven in a pseudo-terminal through scripted models."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest
import yaml
from genutil import quit_repl
from llm_server import Reply, llm_server, write_config

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 20
__all__ = ["llm_server"]  # the fixture
LONG_RUN = "sleep 60 & echo $! > sleeper.pid; echo started-$((40+2)); wait"


def write_script(path: Path, steps: list) -> Path:
    path.write_text(yaml.safe_dump(steps, allow_unicode=True))
    return path


@pytest.fixture
def two_models(tmp_path, home):
    a = write_script(tmp_path / "a.yaml", [{"text": "Hello from model A, the answer is 42."}])
    b = write_script(tmp_path / "b.yaml", [
        {"text": "<summary>ask</summary>Need a choice.", "tool_calls": [
            {"name": "ask_user", "args": {"question": "Which color?",
                                          "candidates": ["red", "blue"]}}]},
        {"text": "Model B noted the colour."},
        {"text": "<summary>long</summary>running", "tool_calls": [
            {"name": "code_run", "args": {"type": "bash", "script": LONG_RUN}}]},
        {"text": "after the abort"}])
    (home / "config.yaml").write_text(yaml.safe_dump({"default": "a", "models": {
        "a": {"provider": "scripted", "script": str(a)},
        "b": {"provider": "scripted", "script": str(b)}}}))
    return home


def spawn(home: Path, *args: str) -> pexpect.spawn:
    env = {**os.environ, "GA_HOME": str(home), "PYTHONPATH": str(ROOT), "GA_LANG": "en"}
    return pexpect.spawn(sys.executable, [str(ROOT / "ga.py"), *args], env=env, cwd=os.getcwd(),
                         encoding="utf-8", timeout=TIMEOUT, dimensions=(30, 160))


def gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def wait_gone(pid: int) -> bool:
    deadline = time.monotonic() + TIMEOUT
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return gone(pid)


def test_repl_task_model_switch_ask_user_ctrl_c_and_exit(two_models, tmp_path):
    work = Path.cwd()
    child = spawn(two_models)
    child.expect("ga> ")
    child.sendline("say hello")
    child.expect("answer is 42")
    child.expect("ga> ")
    child.sendline("/model")
    child.expect(r"\* a")
    child.expect("ga> ")
    child.sendline("/model b")
    child.expect("conversation kept")
    child.expect("ga> ")
    child.sendline("pick a colour")
    child.expect("Which color")
    child.expect("2. blue")
    child.expect("answer> ")
    child.sendline("2")
    child.expect("Model B noted")
    child.expect("ga> ")
    child.sendline("run the long job")
    child.expect("started-42")
    pid = int((work / "sleeper.pid").read_text())
    child.sendintr()
    child.expect("ga> ")
    assert wait_gone(pid), "the aborted code_run's process group is still alive"
    child.sendline("/export out.json")
    child.expect("exported")
    child.expect("ga> ")
    assert quit_repl(child) == 0
    data = json.loads((work / "out.json").read_text())
    user_texts = [b.get("text", "") for m in data["history"] if m["role"] == "user"
                  for b in m["content"]]
    assert user_texts[0] == "say hello"          # history from model A kept after /model b
    results = [b.get("content") for m in data["history"] if m["role"] == "user"
               for b in m["content"] if b["type"] == "tool_result"]
    assert "blue" in results  # the inline answer by number is the ask_user call's result
    assert "say hello" in (two_models / "repl_history").read_text()


def test_second_ctrl_c_quits_and_resume_picker_restores(two_models):
    child = spawn(two_models)
    child.expect("ga> ")
    child.sendline("say hello")
    child.expect("answer is 42")
    child.expect("ga> ")
    child.sendintr()
    child.expect("Ctrl-C again")
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    sid = next((two_models / "sessions").glob("*.jsonl")).stem
    child = spawn(two_models)
    child.expect("ga> ")
    child.sendline("/session.temperature=0.2")
    child.expect("temperature = 0.2")
    child.sendline("/session.bogus=1")
    child.expect("error: .*bogus")
    child.sendline("/help")
    child.expect("/resume")
    child.sendline("/resume")
    child.expect(sid)
    child.expect("session> ")
    child.sendline("1")
    child.expect(f"resumed session {sid}")
    child.sendline("/exit")
    child.expect(pexpect.EOF)


def test_piped_stdin_runs_one_shot(tmp_path, home):
    a = write_script(tmp_path / "a.yaml", [{"text": "piped answer"}])
    env = {**os.environ, "GA_HOME": str(home), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "ga.py"), "-m", f"scripted:{a}"],
                          input="task from stdin", env=env, capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert "piped answer" in proc.stdout
    journal = next((home / "sessions").glob("*.jsonl")).read_text()
    assert "task from stdin" in journal


def test_ctrl_c_in_one_shot_kills_the_run_and_exits_130(tmp_path, home):
    model = write_script(tmp_path / "long.yaml", [
        {"text": "<summary>long</summary>running", "tool_calls": [
            {"name": "code_run", "args": {"type": "bash", "script": LONG_RUN}}]}])
    child = spawn(home, "-m", f"scripted:{model}", "run the long job")
    child.expect("started-42")
    pid = int((Path.cwd() / "sleeper.pid").read_text())
    child.sendintr()
    child.expect("interrupted")
    child.expect(r"ga: session (\S+)")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    assert wait_gone(pid)


def test_repl_export_and_line_history_mask_keys(tmp_path, home):
    key = "key-of-another-profile-7777777"
    a = write_script(tmp_path / "a.yaml", [{"text": "noted"}])
    (home / "config.yaml").write_text(yaml.safe_dump({"default": "a", "models": {
        "a": {"provider": "scripted", "script": str(a)},
        "b": {"provider": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1",
              "api_key": key}}}))
    child = spawn(home)
    child.expect("ga> ")
    child.sendline(f"my key is {key} remember it")
    child.expect("noted")
    child.expect("ga> ")
    child.sendline("/export out.json")
    child.expect("exported")
    child.expect("ga> ")
    quit_repl(child)
    exported = (Path.cwd() / "out.json").read_text()
    assert "my key is ***" in exported and key not in exported
    history = (home / "repl_history").read_text()
    assert "my key is ***" in history and key not in history


def test_a_refused_model_switch_keeps_the_current_model(home, llm_server):
    write_config(home, llm_server, local={"provider": "openai", "model": "m"})
    llm_server.queue(Reply(text="answer from the local model"))
    child = spawn(home, "-m", "local")
    child.expect("ga> ")
    child.sendline("/model openai:gpt-x")
    child.expect("error: .*no API key.*OPENAI_API_KEY.*; still using local")
    child.expect("ga> ")
    child.sendline("/model")
    child.expect(r"\* local")
    child.expect("ga> ")
    child.sendline("say something")
    child.expect("answer from the local model")
    child.expect("ga> ")
    assert quit_repl(child) == 0 and "Traceback" not in child.before
    assert llm_server.bodies()[0]["model"] == "m"


def test_the_resume_confirmation_shows_key_info_without_the_staleness_note(tmp_path, home):
    import io

    from frontends.cli import main
    from frontends.journal import Journal
    from frontends.repl import Repl
    from frontends.runner import Session
    from ga import GenericAgent
    from llmcore.scripted import ScriptedClient

    first = write_script(tmp_path / "first.yaml", [
        {"text": "<summary>note</summary>noting", "tool_calls": [
            {"name": "update_working_checkpoint", "args": {"key_info": "target is port 8042"}}]},
        {"text": "noted"}])
    later = write_script(tmp_path / "later.yaml", [{"text": "ok"}])
    assert main(["-m", f"scripted:{first}", "start"]) == 0
    sid = next((home / "sessions").glob("*.jsonl")).stem
    assert main(["-m", f"scripted:{later}", "--resume", sid, "go on"]) == 0  # key_info aged
    agent = GenericAgent(ScriptedClient([]), home=home, cwd=Path.cwd())
    repl = Repl(Session(agent, home, Journal(home, agent)))
    repl.out = io.StringIO()
    repl.cmd_resume("1")
    repl.session.close()
    confirmation = repl.out.getvalue().splitlines()[-1]
    assert f"resumed session {sid}:" in confirmation
    assert "key_info: target is port 8042, in " in confirmation
