"""Approval (SPEC §11): one gate in dispatch for every tool, the question as data that a
front end answers. Here the front end is the test's own thread answering the agent's
worker, as the REPL's thread does (the terminal itself: test_approval_tty.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
import yaml

from agent_loop import Hooks
from frontends.cli import main
from frontends.journal import load_session
from frontends.plugins import PluginAPI, handler_with_plugins
from ga import GenericAgent
from llmcore.base import ConfigError
from llmcore.scripted import ScriptedClient
from tools.approval import ApprovalRequest
from tools.sandbox import Sandbox
from tools.spec import tool
from tools.web import BrowserConfig

ROOT = Path(__file__).resolve().parent.parent
WAIT_SECONDS = 30  # sanity bound for an event the worker sends
ATTACHED = BrowserConfig(cdp_url="http://127.0.0.1:9")  # offered; never reached when declined


def step(*calls: dict) -> dict:
    return {"text": "<summary>act</summary>", "tool_calls": list(calls)}


def call(name: str, **args) -> dict:
    return {"name": name, "args": args}


def run(agent: GenericAgent, answer: Callable[[ApprovalRequest], tuple[str, str]],
        task: str = "go") -> tuple[list[ApprovalRequest], list[dict]]:
    """Run a task on the agent's worker; answer each question on this thread."""
    agent.start()
    events = agent.put_task(task)
    asked, seen = [], []
    while True:
        event = events.get(timeout=WAIT_SECONDS)
        seen.append(event)
        if event["type"] == "approval_request":
            asked.append(event["request"])
            event["request"].answer(*answer(event["request"]))
        if event["type"] == "task_end":
            agent.tasks.put(None)
            return asked, seen


def results(seen: list[dict]) -> list:
    return [e["data"] for e in seen if e["type"] == "tool_result"]


def agent_for(home: Path, steps: list, approval: str, mode: str = "workspace-write",
              handler_cls=None) -> GenericAgent:
    return GenericAgent(ScriptedClient([*steps, {"text": "done"}]), home=home, cwd=Path.cwd(),
                        approval=approval, sandbox=Sandbox(mode), browser=ATTACHED,
                        handler_cls=handler_cls)


def test_always_asks_before_every_tool_that_changes_something_showing_what_it_does(home):
    Path("f.txt").write_text("one\ntwo\n")

    @tool
    def do_deploy(self, target: str):
        """Deploy (a plugin's tool).

        Args:
            target: Where to.
        """
        return f"deployed to {target}"

    api = PluginAPI(Hooks())
    api.load("a test plugin", lambda a: a.tool(do_deploy))
    steps = [step(call("file_read", path="f.txt"),
                  call("update_working_checkpoint", key_info="k"),
                  call("code_run", type="bash", script="echo ran"),
                  call("file_write", path="n.txt", content="hello\n"),
                  call("file_patch", path="f.txt", old_content="two", new_content="2"),
                  call("web_execute_js", script="document.title"),
                  call("code_run", script="handler.working", inline_eval=True),
                  call("deploy", target="prod"))]
    agent = agent_for(home, steps, "always", handler_cls=handler_with_plugins(api))
    asked, seen = run(agent, lambda r: ("no", "") if r.tool in ("web_execute_js", "deploy")
                      else ("yes", ""))
    assert [(r.tool, r.kind) for r in asked] == [
        ("code_run", "script"), ("file_write", "diff"), ("file_patch", "diff"),
        ("web_execute_js", "js"), ("code_run", "inline_eval"), ("deploy", "call")]
    script, write, patch, js, inline, plugin = asked
    assert script.text == "echo ran" and script.language == "bash"
    assert "+hello" in write.text and write.new_text == "hello\n" and write.old_text is None
    assert "-two" in patch.text and "+2" in patch.text and patch.old_text == "one\ntwo\n"
    assert js.text == "document.title" and json.loads(plugin.text) == {"target": "prod"}
    ids = [e["id"] for e in seen if e["type"] == "tool_call"]
    assert [r.call_id for r in asked] == [ids[i] for i in (2, 3, 4, 5, 6, 7)]
    decisions = [(e["tool"], e["decision"]) for e in seen if e["type"] == "approval"]
    assert decisions == [("code_run", "yes"), ("file_write", "yes"), ("file_patch", "yes"),
                         ("web_execute_js", "no"), ("code_run", "yes"), ("deploy", "no")]
    out = results(seen)
    assert out[2]["stdout"] == "ran\n" and Path("n.txt").read_text() == "hello\n"
    assert Path("f.txt").read_text() == "one\n2\n"
    assert out[5] == {"status": "declined", "msg": "declined by the user"}
    assert out[7]["msg"] == "declined by the user"


def test_always_answered_always_is_not_asked_again_for_that_tool(home):
    steps = [step(call("code_run", type="bash", script="echo 1"),
                  call("code_run", type="bash", script="echo 2"),
                  call("file_write", path="a.txt", content="x"))]
    asked, seen = run(agent_for(home, steps, "always"), lambda r: ("always", ""))
    assert [r.tool for r in asked] == ["code_run", "file_write"]
    assert [e["decision"] for e in seen if e["type"] == "approval"] == ["always"] * 3
    assert [r["stdout"] for r in results(seen)[:2]] == ["1\n", "2\n"]


def test_a_refusal_with_a_message_reaches_the_model_and_the_run_goes_on(home):
    steps = [step(call("code_run", type="bash", script="rm -rf build"))]
    agent = agent_for(home, steps, "always")
    _, seen = run(agent, lambda r: ("no", "keep the build folder"))
    assert results(seen)[0] == {"status": "declined",
                                "msg": "declined by the user: keep the build folder"}
    sent = agent.llmclient.calls[1]["messages"][0]["tool_results"][0]["content"]
    assert "declined by the user: keep the build folder" in sent
    assert seen[-1]["result"] == "CURRENT_TASK_DONE"


def test_on_request_offers_escalate_and_asks_only_for_escalations(home, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    steps = [step(call("code_run", type="bash", script="echo in > in.txt"),
                  call("code_run", type="bash", script=f"echo out > {outside}/a.txt",
                       escalate=True, reason="install into the shared folder"),
                  call("file_write", path=str(outside / "b.txt"), content="b",
                       escalate="true", reason="the shared config"),
                  call("file_write", path=str(outside / "c.txt"), content="c"))]
    agent = agent_for(home, steps, "on-request")
    schema = {t["function"]["name"]: t["function"]["parameters"]["properties"]
              for t in agent.tools_schema()}
    assert {n for n, p in schema.items() if "escalate" in p} == {
        "code_run", "file_write", "file_patch"}
    assert schema["code_run"]["reason"]["type"] == "string"
    asked, seen = run(agent, lambda r: ("yes", ""))
    assert [(r.tool, r.why, r.reason) for r in asked] == [
        ("code_run", "escalate", "install into the shared folder"),
        ("file_write", "escalate", "the shared config")]
    assert (outside / "a.txt").read_text() == "out\n"  # approved: ran outside the sandbox
    assert (outside / "b.txt").read_text() == "b" and not (outside / "c.txt").exists()
    refused = results(seen)[3]["msg"]
    assert "workspace-write" in refused and "escalate: true" in refused


def test_a_declined_escalation_does_not_run(home, tmp_path):
    steps = [step(call("code_run", type="bash", script=f"echo out > {tmp_path}/a.txt",
                       escalate=True, reason="why not"))]
    asked, seen = run(agent_for(home, steps, "on-request"), lambda r: ("no", ""))
    assert len(asked) == 1 and not (tmp_path / "a.txt").exists()
    assert results(seen)[0]["status"] == "declined"


@pytest.mark.parametrize("approval", ["never", "always"])
def test_escalate_is_offered_only_under_on_request_and_ignored_elsewhere(home, tmp_path,
                                                                        approval):
    steps = [step(call("code_run", type="bash", script=f"echo out > {tmp_path}/a.txt",
                       escalate=True, reason="please"))]
    agent = agent_for(home, steps, approval)
    assert not any("escalate" in t["function"]["parameters"]["properties"]
                   for t in agent.tools_schema())
    asked, seen = run(agent, lambda r: ("yes", ""))
    assert len(asked) == (approval == "always")
    assert not (tmp_path / "a.txt").exists()  # asked or not, it ran inside the sandbox
    assert results(seen)[0]["exit_code"] != 0


def test_never_asks_nothing_and_refuses_inline_eval_with_a_hint(home):
    steps = [step(call("code_run", script="print(agent)", inline_eval=True),
                  call("code_run", script="handler.enter_plan_mode('plan.md')",
                       inline_eval=True),
                  call("code_run", type="bash", script="echo fine"))]
    asked, seen = run(agent_for(home, steps, "never"), lambda r: ("yes", ""))
    refused, plan, fine = results(seen)
    assert asked == []
    assert refused["status"] == "declined" and "approval is never" in refused["msg"]
    assert "handler.enter_plan_mode" in refused["msg"]  # the one form that needs no approval
    assert plan == {"status": "success", "result": "'plan.md'"} and fine["stdout"] == "fine\n"


@pytest.mark.parametrize("spelling", [
    {"type": " python"}, {"type": "PYTHON\n"}, {"type": "Python ", "inline_eval": "true"}])
def test_inline_eval_is_judged_by_its_arguments_as_the_tool_reads_them(home, tmp_path,
                                                                      spelling):
    ran = tmp_path / "ran"
    inline = {"inline_eval": True, "script": f"open({str(ran)!r}, 'w')", **spelling}
    model = tmp_path / "m.yaml"
    model.write_text(yaml.safe_dump([step(call("code_run", **inline)), {"text": "done"}]))
    proc = ga("--json", "-m", f"scripted:{model}", "go")  # no terminal: approval never
    assert proc.returncode == 0, proc.stderr
    (result,) = [json.loads(line)["data"] for line in proc.stdout.splitlines()
                 if '"tool_result"' in line]
    assert result["status"] == "declined" and "approval is never" in result["msg"]
    assert not ran.exists()


def test_the_question_shows_the_code_and_text_taken_from_the_reply(home):
    Path("src.txt").write_text("from src\n")
    Path("f.txt").write_text("one\ntwo\n")
    steps = [
        {"text": "The plan:\n```bash\necho hidden > hidden.txt\n```\n",
         "tool_calls": [call("code_run", type=" bash", escalate=True, reason="check")]},
        {"text": "Writing it.\n```\necho from-reply\n```\n",
         "tool_calls": [call("file_write", path="run.sh", content="", escalate=True,
                             reason="a placeholder"),
                        call("file_patch", path="f.txt", old_content="two",
                             new_content="{{file:src.txt:1:1}}", escalate=True, reason="r")]}]
    asked, seen = run(agent_for(home, steps, "on-request"), lambda r: ("yes", ""))
    script, write, patch = asked
    assert (script.text, script.language) == ("echo hidden > hidden.txt", "bash")
    assert write.new_text == "echo from-reply\n" and "+echo from-reply" in write.text
    assert patch.new_text == "one\nfrom src\n" and "+from src" in patch.text
    assert Path("hidden.txt").read_text() == "hidden\n"  # what ran is what was shown
    assert Path("run.sh").read_text() == write.new_text
    assert Path("f.txt").read_text() == patch.new_text


def test_inline_eval_needs_approval_under_confining_modes_only(home):
    steps = [step(call("code_run", script="_r = 1 + 1", inline_eval=True))]
    asked, seen = run(agent_for(home, steps, "on-request"), lambda r: ("yes", ""))
    assert [(r.kind, r.why) for r in asked] == [("inline_eval", "inline_eval")]
    assert results(seen)[0]["result"] == "2"
    asked, seen = run(agent_for(home, steps, "on-request", "full-access"),
                      lambda r: ("no", ""))
    assert asked == [] and results(seen)[0]["result"] == "2"


def test_an_unanswered_question_is_declined_when_nobody_waits_for_it(home):
    steps = [step(call("code_run", type="bash", script="echo never"))]
    agent = agent_for(home, steps, "always")
    events = list(agent.run_task("go"))  # consumed here, answered by nobody
    (result,) = [e["data"] for e in events if e["type"] == "tool_result"]
    assert result["status"] == "declined" and "nobody answered" in result["msg"]


def test_abort_while_asking_ends_the_task_and_leaves_nothing_waiting(home):
    steps = [step(call("code_run", type="bash", script="echo never"))]
    agent = agent_for(home, steps, "always")
    worker = agent.start()
    events = agent.put_task("go")
    while events.get(timeout=WAIT_SECONDS)["type"] != "approval_request":
        pass
    agent.abort()
    seen = []
    while not seen or seen[-1]["type"] != "task_end":
        seen.append(events.get(timeout=WAIT_SECONDS))
    assert seen[-1]["result"] == "ABORTED"
    assert "not run" in results(seen)[0]["msg"]
    agent.tasks.put(None)
    worker.join(WAIT_SECONDS)
    assert not worker.is_alive()


def test_the_model_cannot_change_sandbox_or_approval(home):
    agent = agent_for(home, [step(call("code_run", type="bash", script="echo hi",
                                       sandbox="full-access", approval="never"))], "always")
    with pytest.raises(ConfigError):
        agent.llmclient.set_option("sandbox", "full-access")  # /session.sandbox=...
    asked, _ = run(agent, lambda r: ("yes", ""))
    assert len(asked) == 1
    assert agent.sandbox.mode == "workspace-write" and agent.approvals.mode == "always"


# ---- the command line ------------------------------------------------------------------
def ga(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "ga.py"), *argv], cwd=cwd,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(("agent_cfg", "field", "says"), [
    ({"sandbox": "workspace_write"}, "agent.sandbox", "did you mean workspace-write?"),
    ({"approval": "sometimes"}, "agent.approval", "never, on-request, always"),
    ({"writable_roots": "/tmp"}, "agent.writable_roots", "list of folders"),
    ({"network": "off"}, "agent.network", "true or false"),
    ({"sandox": "read-only"}, "agent.sandox", "did you mean sandbox?"),
])
def test_bad_sandbox_settings_exit_2_naming_file_and_field(home, tmp_path, agent_cfg, field,
                                                          says):
    config = home / "config.yaml"
    config.write_text(yaml.safe_dump({"agent": agent_cfg}))
    model = tmp_path / "m.yaml"
    model.write_text(yaml.safe_dump([{"text": "done"}]))
    for argv in (("-m", f"scripted:{model}", "hi"), ("config", "check")):
        proc = ga(*argv)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert str(config) in proc.stderr and field in proc.stderr and says in proc.stderr


def test_yolo_with_sandbox_or_approval_is_a_usage_error(tmp_path, capsys):
    model = tmp_path / "m.yaml"
    model.write_text(yaml.safe_dump([{"text": "done"}]))
    assert main(["--yolo", "--sandbox", "read-only", "-m", f"scripted:{model}", "hi"]) == 2
    assert "--yolo" in capsys.readouterr().err


def test_approval_always_without_a_terminal_is_a_usage_error(tmp_path, capsys):
    model = tmp_path / "m.yaml"
    model.write_text(yaml.safe_dump([{"text": "done"}]))
    assert main(["--approval", "always", "-m", f"scripted:{model}", "hi"]) == 2
    assert "needs a person to answer" in capsys.readouterr().err


def test_the_pair_is_in_task_start_the_journal_and_kept_by_resume(home, tmp_path, capsys):
    model = tmp_path / "m.yaml"
    model.write_text(yaml.safe_dump([{"text": "done"}] * 3))

    def start(*argv: str) -> dict:
        assert main(["--json", "-m", f"scripted:{model}", *argv]) == 0
        lines = capsys.readouterr().out.splitlines()
        return json.loads(lines[0])

    first = start("--sandbox", "read-only", "one")
    assert (first["sandbox"], first["approval"]) == ("read-only", "never")
    (path,) = (home / "sessions").glob("*.jsonl")
    assert load_session(path).sandbox == "read-only"
    kept = start("--resume", path.stem, "two")
    assert kept["sandbox"] == "read-only"
    again = start("--resume", path.stem, "--sandbox", "full-access", "three")
    assert again["sandbox"] == "full-access"


def test_config_check_shows_the_pair(home):
    (home / "config.yaml").write_text(yaml.safe_dump(
        {"agent": {"sandbox": "read-only", "approval": "always", "network": False}}))
    out = ga("config", "check").stdout
    assert "sandbox: read-only (" in out and "approval: always" in out
    assert "network: off" in out



def test_an_escalated_edit_shows_where_a_symlink_really_writes(home, tmp_path):
    target = tmp_path / "bashrc"
    target.write_text("alias ls='ls'\n")
    Path("innocent.txt").symlink_to(target)
    steps = [step(call("file_write", path="innocent.txt", content="x\n", escalate=True,
                       reason="tidy"))]
    asked, _ = run(agent_for(home, steps, "on-request"), lambda r: ("no", ""))
    assert asked[0].path == str(target) and asked[0].old_text == "alias ls='ls'\n"
    assert target.read_text() == "alias ls='ls'\n"


def test_an_approved_edit_writes_only_the_path_that_was_shown(home, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    Path("d").mkdir()
    shown = str(Path(os.path.realpath("d")) / "x.txt")
    steps = [step(call("file_write", path="d/x.txt", content="x\n", escalate=True,
                       reason="tidy"))]

    def swap_then_yes(request: ApprovalRequest) -> tuple[str, str]:
        Path("d").rename("d_old")  # while the person reads the question
        Path("d").symlink_to(outside)
        return "yes", ""

    asked, seen = run(agent_for(home, steps, "on-request"), swap_then_yes)
    assert asked[0].path == shown
    assert not (outside / "x.txt").exists()
    result = results(seen)[0]
    assert result["status"] == "error" and "approved writing" in result["msg"], result


def test_a_question_is_masked_before_it_is_capped(home):
    from tools.approval import QUESTION_CHARS

    key = "sk-proj-" + "q" * 30
    script = "echo '" + "x" * (QUESTION_CHARS - 16) + f" {key} end'"  # the key across the cap
    agent = agent_for(home, [step(call("code_run", type="bash", script=script))], "always")
    asked, _ = run(agent, lambda r: ("no", ""))
    assert "x *** end" in asked[0].text and "sk-proj" not in asked[0].text
