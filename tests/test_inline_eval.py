"""code_run with inline_eval (SPEC §4, §7): python evaluated inside the runtime has what it
prints captured and returned to the model masked (never written to the runtime's stdout or
stderr), honours its timeout and abort without blocking the task, and every way out of it,
``GeneratorExit`` included, is an error result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from frontends.cli import main
from ga import GenericAgent
from llmcore.scripted import ScriptedClient
from tools.inline_eval import run_inline
from tools.sandbox import Sandbox

OPENAI_KEY = "sk-proj-" + "Zq9_xW3-" * 8
ROOT = Path(__file__).resolve().parent.parent
FULL_ACCESS = Sandbox("full-access")  # inline code runs unasked only where nothing is confined


def inline(script: str, **args) -> dict:
    return {"tool_calls": [{"name": "code_run", "args": {"script": script, "inline_eval": True,
                                                          **args}}]}


def sent_results(client: ScriptedClient, call: int = 1) -> list[str]:
    return [r["content"] for r in client.calls[call]["messages"][0]["tool_results"]]


def end_inline_threads() -> None:
    for thread in threading.enumerate():
        if thread.name == "ga-inline-eval":
            thread.join(10)


def test_what_inline_code_prints_goes_to_the_model_masked_not_to_stdout(
        home, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    code = ("import os, sys\nprint('KEY=', os.environ['OPENAI_API_KEY'])\n"
            "print('to stderr', file=sys.stderr)\nprint(agent)")
    model = tmp_path / "m.yaml"
    model.write_text(yaml.safe_dump([inline(code), {"text": "done"}]))
    assert main(["-m", f"scripted:{model}", "--sandbox", "full-access", "--json",
                 "print the key"]) == 0
    out, err = capsys.readouterr()
    events = [json.loads(line) for line in out.splitlines()]  # every line is an event
    result = next(e for e in events if e["type"] == "tool_result")["data"]
    assert result["status"] == "success" and result["result"] == "'OK'"
    assert result["stdout"].startswith("KEY= ***\nto stderr\n<ga.GenericAgent object")
    assert OPENAI_KEY not in out + err and "to stderr" not in err
    assert not hasattr(sys.stdout, "sinks")  # the streams are the runtime's own again


def test_inline_output_reaches_the_model_and_an_expression_gives_its_value(home):
    client = ScriptedClient([inline("print('hello from inside')"), inline("6 * 7"),
                             {"text": "done"}])
    agent = GenericAgent(client, home=home, cwd=Path.cwd(), sandbox=FULL_ACCESS)
    list(agent.run_task("run inline"))
    assert "hello from inside" in sent_results(client)[0]
    assert '"result": "42"' in sent_results(client, 2)[0]


def test_inline_code_past_its_timeout_is_left_running_and_the_task_goes_on(home, capsys):
    code = ("import threading\nagent.gate = threading.Event()\nprint('started')\n"
            "agent.gate.wait(20)\nprint('finished late')")
    client = ScriptedClient([inline(code, timeout=1), {"text": "went on"}])
    agent = GenericAgent(client, home=home, cwd=Path.cwd(), sandbox=FULL_ACCESS)
    end = list(agent.run_task("wait forever"))[-1]
    assert end["result"] == "CURRENT_TASK_DONE" and end["text"] == "went on"
    sent = json.loads(sent_results(client)[0])
    assert sent["status"] == "timeout" and sent["stdout"] == "started\n"
    assert "still running after 1 s" in sent["msg"] and "may still change" in sent["msg"]
    print("the console still prints")
    agent.gate.set()
    end_inline_threads()
    out, err = capsys.readouterr()
    assert "the console still prints" in out and "finished late" not in out + err
    assert not hasattr(sys.stdout, "sinks") and not hasattr(sys.stderr, "sinks")


def test_abort_ends_the_wait_for_inline_code(tmp_path):
    abort = threading.Event()
    ns = {"abort": abort, "gate": threading.Event()}
    result = run_inline("abort.set()\ngate.wait()", ns, tmp_path, timeout=600, abort=abort)
    assert result["status"] == "aborted"
    ns["gate"].set()
    end_inline_threads()


def test_other_threads_write_to_the_real_streams_while_inline_code_runs(tmp_path, capsys):
    ns = {"ready": threading.Event(), "gate": threading.Event()}
    results = []
    runner = threading.Thread(target=lambda: results.append(run_inline(
        "print('inside')\nready.set()\ngate.wait()\nprint('inside again')", ns, tmp_path)))
    runner.start()
    assert ns["ready"].wait(10)
    print("from the console")
    print("console error", file=sys.stderr)
    ns["gate"].set()
    runner.join(10)
    out, err = capsys.readouterr()
    assert "from the console" in out and "console error" in err
    assert "inside" not in out + err
    assert results[0]["stdout"] == "inside\ninside again\n"


@pytest.mark.parametrize("exc", ["GeneratorExit", "SystemExit(3)", "KeyboardInterrupt",
                                 "BaseException('odd')", "StopIteration"])
def test_every_way_out_of_inline_code_is_an_error_result(home, exc):
    client = ScriptedClient([inline(f"print('before')\nraise {exc}"), {"text": "went on"}])
    agent = GenericAgent(client, home=home, cwd=Path.cwd(), sandbox=FULL_ACCESS)
    end = list(agent.run_task("raise"))[-1]
    assert end["result"] == "CURRENT_TASK_DONE" and end["text"] == "went on"
    sent = json.loads(sent_results(client)[0])
    assert sent["status"] == "error" and sent["msg"].startswith(exc.split("(")[0])
    assert sent["stdout"] == "before\n"


def test_inline_code_runs_in_the_named_folder(home, tmp_path):
    (tmp_path / "work" / "sub").mkdir()
    client = ScriptedClient([inline("import os\n_r = os.getcwd()", cwd="sub"), {"text": "ok"}])
    list(GenericAgent(client, home=home, cwd=Path.cwd(), sandbox=FULL_ACCESS).run_task("where"))
    assert json.loads(sent_results(client)[0])["result"].endswith("/work/sub'")


@pytest.mark.parametrize("stream,flags", [("stdout", []), ("stderr", ["--json"])])
def test_inline_code_closing_a_stream_leaves_the_runtime_s_streams_open(tmp_path, stream,
                                                                         flags):
    code = f"import sys\nsys.{stream}.write('x' * 10)\nsys.{stream}.close()\nprint('after')"
    model = tmp_path / "m.yaml"
    model.write_text(yaml.safe_dump([inline(code), {"text": "the answer"}]))
    env = {**os.environ, "GA_HOME": str(tmp_path / "h"), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "ga.py"), "-m", f"scripted:{model}",
                           "--sandbox", "full-access", *flags, "close it"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "the answer" in proc.stdout and "Traceback" not in proc.stderr
    assert "lost sys." not in proc.stderr
    if flags:
        events = [json.loads(line) for line in proc.stdout.splitlines()]
        result = next(e for e in events if e["type"] == "tool_result")["data"]
        assert result["status"] == "success" and result["stdout"] == "xxxxxxxxxxafter\n"


def test_inline_code_cannot_detach_the_runtime_s_stdout(tmp_path, capsys):
    result = run_inline("import sys\nsys.stdout.detach()", {}, tmp_path)
    assert result["status"] == "error" and result["msg"].startswith("UnsupportedOperation")
    print("still printing")
    assert "still printing" in capsys.readouterr().out
