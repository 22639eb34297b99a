"""Session journal: events per line, state after each turn, resume, torn lines, listing."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from frontends.cli import main
from frontends.journal import (
    Journal,
    claim_session,
    find_session,
    latest_for_cwd,
    list_sessions,
    load_session,
)

ROOT = Path(__file__).resolve().parent.parent
WAIT_SECONDS = 30


def script(tmp_path, steps, name="script.yaml") -> str:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(steps, allow_unicode=True))
    return f"scripted:{p}"


CHECKPOINT = {"text": "<summary>note goal</summary>noting",
              "tool_calls": [{"name": "update_working_checkpoint",
                              "args": {"key_info": "target is port 8042"}}]}


def only_session(home: Path) -> Path:
    files = list((home / "sessions").glob("*.jsonl"))
    assert len(files) == 1, files
    return files[0]


def test_task_events_are_journaled_with_working_memory(home, tmp_path, capsys):
    model = script(tmp_path, [CHECKPOINT, {"text": "all done"}])
    assert main(["-m", model, "do it"]) == 0
    path = only_session(home)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    types = [r["type"] for r in records]
    assert types[0] == "session_start" and "task_start" in types and types[-1] in (
        "task_end", "state")
    assert any(r["type"] == "tool_call" and r["name"] == "update_working_checkpoint"
               for r in records)
    assert any(r["type"] == "text" and r["text"] == "all done" for r in records)
    state = load_session(path)
    assert state.working["key_info"] == "target is port 8042"
    assert state.history_info[0] == "[USER] do it"
    assert state.history[0]["content"][0]["text"] == "do it"
    assert path.stem in capsys.readouterr().err


def test_resume_restores_history_and_key_info(home, tmp_path, capsys):
    assert main(["-m", script(tmp_path, [CHECKPOINT, {"text": "first done"}]), "first"]) == 0
    sid = only_session(home).stem
    second = script(tmp_path, [{"text": "second done"}], "two.yaml")
    capsys.readouterr()
    assert main(["-m", second, "--json", "--resume", sid, "second"]) == 0
    state = load_session(only_session(home))
    texts = [b.get("text", "") for m in state.history for b in m["content"]]
    assert "first" in texts and "first done" in texts and "second done" in texts
    # the carried key_info reached the new task's first message, with its staleness note
    second_user = next(m for m in state.history if m["role"] == "user"
                       and "second" in m["content"][0].get("text", ""))
    assert "target is port 8042" in second_user["content"][0]["text"]
    assert "[USER] first" in state.history_info and "[USER] second" in state.history_info
    assert state.tasks == 2


def test_a_session_open_in_another_process_is_refused_not_overwritten(home, tmp_path, capsys):
    assert main(["-m", script(tmp_path, [CHECKPOINT, {"text": "first done"}]), "first"]) == 0
    path = only_session(home)
    before = path.read_text()
    held = claim_session(path)  # as a running `ga --resume` holds it
    second = script(tmp_path, [{"text": "second done"}], "two.yaml")
    capsys.readouterr()
    assert main(["-m", second, "--resume", path.stem, "second"]) == 2
    err = capsys.readouterr().err
    assert f"session {path.stem} is open in process {os.getpid()}" in err
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, str(ROOT / "ga.py"), "-m", second, "--continue",
                           "second"], capture_output=True, text=True, timeout=WAIT_SECONDS,
                          env=env)
    assert proc.returncode == 2 and f"open in process {os.getpid()}" in proc.stderr
    assert path.read_text() == before
    held.lock.release()
    assert main(["-m", second, "--resume", path.stem, "second"]) == 0
    assert load_session(path).tasks == 2


def test_a_lock_left_by_a_dead_process_does_not_block_resume(home, tmp_path, capsys):
    assert main(["-m", script(tmp_path, [{"text": "first done"}]), "first"]) == 0
    path = only_session(home)
    path.with_suffix(".lock").write_text("999999\n")  # its holder is gone: no flock on it
    assert main(["-m", script(tmp_path, [{"text": "again"}], "two.yaml"), "--resume",
                 path.stem, "second"]) == 0


def test_a_new_run_removes_locks_whose_holder_was_killed(home, tmp_path, capsys):
    sessions = home / "sessions"
    sessions.mkdir()
    killed = sessions / "20260101-000000-dead.jsonl"
    hold = ("import os, signal, sys; from pathlib import Path; "
            "from frontends.session_lock import SessionLock; "
            "SessionLock(Path(sys.argv[1])).acquire(); os.kill(os.getpid(), signal.SIGKILL)")
    proc = subprocess.run([sys.executable, "-c", hold, str(killed)], timeout=WAIT_SECONDS,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == -signal.SIGKILL and killed.with_suffix(".lock").exists()
    live = claim_session(_journal(sessions / "20260101-000000-live.jsonl"))
    assert main(["-m", script(tmp_path, [{"text": "done"}]), "a new task"]) == 0
    assert not killed.with_suffix(".lock").exists()
    assert live.lock.path.exists()  # held by this process: not stale
    live.lock.release()


def _journal(path: Path) -> Path:
    path.write_text(json.dumps({"type": "session_start", "id": path.stem}) + "\n")
    return path


def test_continue_picks_the_latest_session_of_this_cwd(home, tmp_path, capsys):
    other = tmp_path / "other"
    other.mkdir()
    assert main(["-m", script(tmp_path, [{"text": "a"}]), "here task"]) == 0
    assert main(["-m", script(tmp_path, [{"text": "b"}], "b.yaml"), "-C", str(other),
                 "there task"]) == 0
    here = latest_for_cwd(home, Path.cwd())
    assert load_session(here).first_prompt == "here task"
    assert main(["-m", script(tmp_path, [{"text": "c"}], "c.yaml"), "--continue", "more"]) == 0
    assert load_session(here).tasks == 2


def test_continue_without_a_session_is_a_usage_error(tmp_path, capsys):
    assert main(["-m", script(tmp_path, [{"text": "a"}]), "--continue", "x"]) == 2
    assert "--continue" in capsys.readouterr().err


def test_torn_last_line_is_skipped_and_reported(home, tmp_path, capsys):
    assert main(["-m", script(tmp_path, [CHECKPOINT, {"text": "ok"}]), "go"]) == 0
    path = only_session(home)
    with open(path, "a") as f:
        f.write('{"type": "state", "working": {"key_info": "cut')
    state = load_session(path)
    assert state.working["key_info"] == "target is port 8042"
    assert state.torn == [len(path.read_text().splitlines())]
    # resuming appends on a fresh line, so the new events stay readable
    capsys.readouterr()
    assert main(["-m", script(tmp_path, [{"text": "again"}], "r.yaml"), "--resume",
                 path.stem[:12], "more"]) == 0
    assert "unreadable" in capsys.readouterr().err
    again = load_session(path)
    assert len(again.torn) == 1 and again.tasks == 2
    readable = []
    for line in path.read_text().splitlines():
        try:
            readable.append(json.loads(line)["type"])
        except json.JSONDecodeError:
            continue
    assert "session_resume" in readable


def test_sessions_command_lists_id_model_prompt_turns_tokens(home, tmp_path, capsys):
    model = script(tmp_path, [{"text": "ok", "usage": {"input": 30, "output": 12}}])
    assert main(["-m", model, "count the files"]) == 0
    capsys.readouterr()
    assert main(["sessions"]) == 0
    out = capsys.readouterr().out
    sid = only_session(home).stem
    row = next(line for line in out.splitlines() if line.startswith(sid))
    assert "count the files" in row and re.search(r"\s1\s+42\s", row)
    cwd = str(Path.cwd())
    assert cwd[:15] in row and cwd[-10:] in row and "scripted:" in row


def test_journal_never_contains_an_api_key(home, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SOME_API_KEY", "sk-very-secret-value-123")
    (home / "config.yaml").write_text("tools: {env_keep: [SOME_API_KEY]}\n")  # child sees it
    model = script(tmp_path, [{"tool_calls": [{"name": "code_run", "args": {
        "type": "bash", "script": "echo $SOME_API_KEY"}}]}, {"text": "done"}])
    assert main(["-m", model, "show env"]) == 0
    text = only_session(home).read_text()
    assert "sk-very-secret-value-123" not in text and "***" in text


def test_history_file_seeds_and_export_round_trips(home, tmp_path, capsys):
    seed = tmp_path / "seed.json"
    seed.write_text(json.dumps({
        "history": [{"role": "user", "content": [{"type": "text", "text": "earlier question"}]},
                    {"role": "assistant", "content": [{"type": "text", "text": "earlier answer"}]}],
        "history_info": ["[USER] earlier question"],
        "working": {"key_info": "seeded fact"}}))
    assert main(["-m", script(tmp_path, [{"text": "ok"}]), "--history", str(seed), "next"]) == 0
    sid = only_session(home).stem
    out = tmp_path / "export.json"
    assert main(["sessions", "export", sid, str(out)]) == 0
    data = json.loads(out.read_text())
    texts = [b.get("text", "") for m in data["history"] for b in m["content"]]
    assert texts[:2] == ["earlier question", "earlier answer"]
    assert "seeded fact" in data["working"]["key_info"]
    assert data["history_info"][0] == "[USER] earlier question"


def test_find_session_by_prefix_and_listing_order(home, tmp_path):
    from llmcore.scripted import ScriptedClient

    class FakeAgent:
        cwd = tmp_path
        handler = None
        history_info: list = []
        llmclient = ScriptedClient([])

    first = Journal(home, FakeAgent())
    first.write({"type": "task_start", "prompt": "one"})
    first.close()
    time.sleep(0.01)
    second = Journal(home, FakeAgent(), "zz-custom")
    second.write({"type": "task_start", "prompt": "two"})
    second.close()
    os.utime(second.path, (time.time() + 5, time.time() + 5))
    assert [s.first_prompt for s in list_sessions(home)] == ["two", "one"]
    assert find_session(home, "zz-c") == second.path
    assert find_session(home, "nope") is None


def test_resume_after_sigkill_mid_task_sees_same_key_info_and_history(home, tmp_path):
    marker = Path.cwd() / "started.txt"  # in the working folder: the sandbox allows it
    steps = [CHECKPOINT,
             {"text": "<summary>long run</summary>running",
              "tool_calls": [{"name": "code_run", "args": {
                  "type": "bash", "script": f"touch {marker}; sleep 60"}}]}]
    env = {**os.environ, "GA_HOME": str(home), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, str(ROOT / "ga.py"), "-m",
                             script(tmp_path, steps), "long job"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + WAIT_SECONDS
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "the long code_run never started"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=WAIT_SECONDS)
    path = only_session(home)
    before = load_session(path)
    assert before.working["key_info"] == "target is port 8042"
    seen_history = [m for m in before.history]
    assert any(b.get("name") == "update_working_checkpoint"
               for m in seen_history for b in m["content"])

    from ga import GenericAgent
    from llmcore.scripted import ScriptedClient

    client = ScriptedClient([{"text": "resumed ok"}])
    agent = GenericAgent(client, home=home, cwd=Path.cwd())
    agent.restore(before.history, before.history_info, before.working)
    list(agent.run_task("carry on"))
    assert client.history[: len(seen_history)] == seen_history
    first_message = client.calls[0]["messages"][-1]["content"]
    assert "target is port 8042" in first_message
    assert agent.history_info[: len(before.history_info)] == before.history_info
    # the same through the command line: the resumed session carries on in the same journal
    assert main(["-m", script(tmp_path, [{"text": "cli resumed"}], "r.yaml"), "--json",
                 "--resume", path.stem, "carry on"]) == 0
    after = load_session(path)
    assert after.history[: len(seen_history)] == seen_history
    assert after.working["key_info"].startswith("target is port 8042")
    assert after.tasks == 2


def test_journal_redacts_the_clients_config_keys(home, tmp_path):
    from llmcore import make_client

    config = home / "config.yaml"
    config.write_text(yaml.safe_dump({"models": {"local": {
        "provider": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1",
        "api_key": "cfg-key-abcdef-987654"}}}))
    client = make_client("local", config_path=str(config), home=home)

    class Agent:
        cwd = tmp_path
        handler = None
        history_info: list = []
        llmclient = client

    journal = Journal(home, Agent())
    journal.write({"type": "tool_result", "data": "api_key: cfg-key-abcdef-987654"})
    journal.close()
    text = journal.path.read_text()
    assert "cfg-key-abcdef-987654" not in text and "***" in text


def test_the_repl_resume_picker_moves_to_the_sessions_folder_unless_c_was_given(home,
                                                                                tmp_path):
    from frontends.runner import Session
    from ga import GenericAgent
    from llmcore.scripted import ScriptedClient

    proj = tmp_path / "proj"
    proj.mkdir()
    assert main(["-m", script(tmp_path, [{"text": "ok"}]), "-C", str(proj), "start"]) == 0
    path = only_session(home)
    for keep_cwd, expected in ((False, proj), (True, Path.cwd())):
        agent = GenericAgent(ScriptedClient([]), home=home, cwd=Path.cwd())
        session = Session(agent, home, Journal(home, agent), keep_cwd=keep_cwd)
        session.resume(claim_session(path))
        assert agent.cwd == expected
        session.close()
