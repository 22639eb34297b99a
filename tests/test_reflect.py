"""Reflect mode (--reflect SCRIPT): init/check/on_done, ONCE, reload, errors, the log."""

from __future__ import annotations

import json
import os
import shlex
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import yaml

from frontends.cli import main

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 30


def model(tmp_path, steps) -> str:
    p = tmp_path / "script.yaml"
    p.write_text(yaml.safe_dump(steps))
    return f"scripted:{p}"


def wait_for(predicate, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


ONCE_SCRIPT = '''
import json
INTERVAL = 0.01
ONCE = True
OUT = None

def init(args):
    global OUT
    OUT = args["out"]
    open(OUT + ".init", "w").write(json.dumps(args))

def check():
    return "write the report"

def on_done(result):
    open(OUT + ".done", "w").write(result)
'''


def test_once_runs_one_task_with_init_args_on_done_and_log(tmp_path, home, capsys):
    script = tmp_path / "nightly.py"
    script.write_text(ONCE_SCRIPT)
    out = tmp_path / "o"
    code = main(["-m", model(tmp_path, [{"text": "report written"}, {"text": "second"}]),
                 "--reflect", str(script), "--out", str(out), "--flag"])
    assert code == 0
    args = json.loads(Path(str(out) + ".init").read_text())
    assert args["out"] == str(out) and args["flag"] is True
    assert Path(str(out) + ".done").read_text() == "report written"
    log = home / "logs" / "reflect" / f"nightly_{time.strftime('%Y-%m-%d')}.log"
    text = log.read_text()
    assert "write the report" in text and "report written" in text
    assert "second" not in capsys.readouterr().out  # ONCE: no second task


CHANGING_V1 = '''
INTERVAL = 0.02
CALLS = []

def check():
    CALLS.append(1)
    open(MARK, "a").write("x")
    if len(CALLS) > 1:
        raise ValueError("check broke")
    return None
'''

CHANGING_V2 = '''
INTERVAL = 0.02
ONCE = True

def check():
    return "task from the new version"
'''


def test_changed_script_is_reloaded_and_check_errors_are_survived(tmp_path, home, capsys):
    script = tmp_path / "watch.py"
    mark = tmp_path / "mark.txt"
    script.write_text(f"MARK = {str(mark)!r}\n" + CHANGING_V1)
    result: dict = {}
    argv = ["-m", model(tmp_path, [{"text": "new version ran"}]), "--reflect", str(script)]
    runner = threading.Thread(target=lambda: result.update(code=main(argv)), daemon=True)
    runner.start()
    wait_for(lambda: mark.exists() and len(mark.read_text()) >= 3, "check() to keep running")
    script.write_text(CHANGING_V2)
    later = time.time() + 10
    os.utime(script, (later, later))
    runner.join(TIMEOUT)
    assert not runner.is_alive()
    assert result["code"] == 0
    captured = capsys.readouterr()
    assert "check broke" in captured.err
    assert "new version ran" in captured.out


def test_exit_from_check_stops_without_a_task(tmp_path, capsys):
    script = tmp_path / "stop.py"
    script.write_text("def check():\n    return '/exit'\n")
    assert main(["-m", model(tmp_path, [{"text": "never"}]), "--reflect", str(script)]) == 0
    out, err = capsys.readouterr()
    assert "never" not in out
    assert err.count("ga: reflect:") == 1  # says once what it waits for
    assert f"ga: reflect: calling check() of {script} every 5 s and running the task it " \
           "returns; Ctrl-C stops\n" in err


def test_broken_script_is_a_usage_error(tmp_path, capsys):
    script = tmp_path / "broken.py"
    script.write_text("def check(:\n")
    assert main(["-m", model(tmp_path, []), "--reflect", str(script)]) == 2
    assert "broken.py" in capsys.readouterr().err


def test_scheduler_example_runs_due_jobs_once(tmp_path, home, capsys):
    folder = home / "schedule"
    folder.mkdir()
    (folder / "a_once.md").write_text("---\nrepeat: once\n---\nsay the date {date}\n")
    (folder / "b_hourly.md").write_text("---\nrepeat: every_2h\n---\nhourly job\n")
    sched = ROOT / "examples" / "scheduler.py"
    steps = [{"text": "did once"}, {"text": "did hourly"}]
    wrapper = tmp_path / "sched_once.py"
    wrapper.write_text(f"exec(open({str(sched)!r}).read())\nINTERVAL = 0.01\nONCE = True\n")
    m = model(tmp_path, steps)
    assert main(["-m", m, "--reflect", str(wrapper)]) == 0
    assert main(["-m", m, "--reflect", str(wrapper)]) == 0
    state = json.loads((folder / ".schedule_state.json").read_text())
    assert set(state) == {"a_once.md", "b_hourly.md"}
    log = next((home / "logs" / "reflect").glob("sched_once_*.log")).read_text()
    assert f"say the date {time.strftime('%Y-%m-%d')}" in log and "hourly job" in log


def test_reflect_example_runs_as_its_docstring_says(tmp_path, home, capsys):
    example = ROOT / "examples" / "reflect_every_minute.py"
    (command,) = [line.strip() for line in example.read_text().splitlines()
                  if line.strip().startswith("ga --reflect")]
    argv = [str(example) if word == "examples/reflect_every_minute.py" else word
            for word in shlex.split(command)[1:]]
    assert main(["-m", model(tmp_path, [{"text": "appended"}]), *argv, "--once"]) == 0
    log = next((home / "logs" / "reflect").glob("reflect_every_minute_*.log")).read_text()
    assert "[task] Append the time to heartbeat.txt" in log and "appended" in log


def test_scheduler_repeat_rules():
    import importlib.util

    spec = importlib.util.spec_from_file_location("sched", ROOT / "examples" / "scheduler.py")
    sched = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sched)
    now = datetime(2025, 5, 5, 10, 0)
    assert sched.is_due({"repeat": "once"}, None, now)
    assert not sched.is_due({"repeat": "once"}, now, now)
    assert sched.is_due({"repeat": "every_30m"}, now - timedelta(minutes=31), now)
    assert not sched.is_due({"repeat": "every_2h"}, now - timedelta(minutes=90), now)
    assert sched.is_due({"repeat": "daily", "at": "09:00"}, now - timedelta(days=1), now)
    assert not sched.is_due({"repeat": "daily", "at": "11:00"}, now - timedelta(days=1), now)
    assert not sched.is_due({"repeat": "daily", "at": "09:00"}, now - timedelta(minutes=30), now)
    assert sched.is_due({"repeat": "weekly"}, now - timedelta(days=8), now)
    assert not sched.is_due({"repeat": "weekly"}, now - timedelta(days=2), now)
    settings, prompt = sched.parse_job("---\nrepeat: daily  # every day\nat: '08:30'\n---\nGo\n")
    assert settings == {"repeat": "daily", "at": "08:30"} and prompt == "Go"
