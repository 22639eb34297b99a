"""Cost where the user sees it (SPEC §15): --max-cost, ga sessions, the REPL's /cost and the
usage line; nothing shows a cost without prices."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pexpect
import yaml
from genutil import quit_repl

from frontends.cli import main

ROOT = Path(__file__).resolve().parent.parent
PRICE = {"input": 3.0, "output": 15.0}  # a step below: 1000 in, 100 out = $0.0045


def steps(n: int) -> list[dict]:
    calls = [{"text": f"<summary>step {i}</summary>", "usage": {"input": 1000, "output": 100},
              "tool_calls": [{"name": "update_working_checkpoint",
                              "args": {"key_info": f"fact {i}"}}]} for i in range(n)]
    return calls + [{"text": "done", "usage": {"input": 1000, "output": 100}}]


def setup(tmp_path, home, priced=True, n=1) -> Path:
    a = tmp_path / "a.yaml"
    a.write_text(yaml.safe_dump(steps(n)))
    b = tmp_path / "b.yaml"
    b.write_text(yaml.safe_dump(steps(n)))
    models = {"a": {"provider": "scripted", "script": str(a)},
              "b": {"provider": "scripted", "script": str(b)}}
    if priced:
        models["a"]["price"] = PRICE
    path = home / "config.yaml"
    path.write_text(yaml.safe_dump({"default": "a", "models": models}))
    return path


def test_max_cost_ends_the_task_with_exit_4_naming_the_option(tmp_path, home, capsys):
    setup(tmp_path, home, n=6)
    assert main(["--max-cost", "0.008", "go"]) == 4
    err = capsys.readouterr().err
    assert "ga: stopped: cost budget of $0.0080 reached ($0.0090 spent, --max-cost)" in err
    assert main(["--json", "--max-cost", "$0.004", "go"]) == 4
    end = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert end["result"] == "BUDGET_EXCEEDED" and end["turns"] == 1 and end["cost"] == 0.0045


def test_max_cost_without_a_price_is_refused_before_the_run(tmp_path, home, capsys):
    setup(tmp_path, home)
    assert main(["-m", "b", "--max-cost", "1", "go"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ga: --max-cost: model b has no price") and err.count("\n") == 1
    assert not (home / "sessions").exists() or not list((home / "sessions").iterdir())


def test_max_cost_takes_only_an_amount_above_zero(tmp_path, home, capsys):
    setup(tmp_path, home)
    for bad in ("0", "-1", "lots", "inf"):
        assert main(["--max-cost", bad, "go"]) == 2
        assert "--max-cost" in capsys.readouterr().err


def test_the_usage_line_shows_the_cost_only_with_prices(tmp_path, home, capsys):
    setup(tmp_path, home, n=1)
    assert main(["go"]) == 0
    assert "tokens: 2000 in (0 cached), 200 out, cost $0.0090" in capsys.readouterr().err
    assert main(["-m", "b", "go"]) == 0
    err = capsys.readouterr().err
    assert "tokens: 2000 in (0 cached), 200 out" in err and "cost" not in err


def test_sessions_list_and_show_the_cost_only_where_there_is_one(tmp_path, home, capsys):
    setup(tmp_path, home, n=1)
    assert main(["-m", "b", "go"]) == 0
    capsys.readouterr()
    assert main(["sessions"]) == 0
    assert "cost" not in capsys.readouterr().out  # no prices anywhere: no column
    assert main(["go"]) == 0
    capsys.readouterr()
    assert main(["sessions"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    at = header.split().index("cost")
    assert header.split()[at - 1] == "tokens"
    assert [row.split()[at + 1] for row in rows] == ["$0.0090", "go"]  # after date and time
    assert main(["sessions", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows[0]["cost"] == 0.009 and "cost" not in rows[1]
    assert main(["sessions", "show", rows[0]["id"]]) == 0
    assert "■ done (2 turns) · cost $0.0090" in capsys.readouterr().out


def test_repl_cost_says_what_the_session_spent_or_why_it_cannot(tmp_path, home):
    setup(tmp_path, home, n=1)
    env = {**os.environ, "GA_HOME": str(home), "PYTHONPATH": str(ROOT), "GA_LANG": "en"}
    child = pexpect.spawn(sys.executable, [str(ROOT / "ga.py"), "-m", "b"], env=env,
                          encoding="utf-8", timeout=20, dimensions=(30, 160))
    child.expect("ga> ")
    child.sendline("/cost")
    child.expect(r"no cost to show: model b has no price; give its profile price:")
    child.expect("ga> ")
    child.sendline("/model a")
    child.expect("ga> ")
    child.sendline("/cost")
    child.expect("no cost yet: this session has made no request")
    child.expect("ga> ")
    child.sendline("go")
    child.expect(r"cost \$0\.0090")
    child.expect("ga> ")
    child.sendline("/cost")
    child.expect(r"session \S+: \$0\.0090 so far \(last task \$0\.0090\)")
    child.expect("ga> ")
    assert quit_repl(child) == 0


def test_a_cost_budget_ends_the_task_when_a_reply_comes_unpriced(home):
    from frontends.runner import TokenBudget
    from ga import GenericAgent
    from llmcore.scripted import ScriptedClient

    agent = GenericAgent(ScriptedClient(steps(3), name="cheap"), home=home, cwd=".")
    agent.listeners.append(TokenBudget(agent, None, max_cost=1.0))
    end = list(agent.run_task("go"))[-1]  # e.g. after a /model switch to a profile
    assert end["result"] == "BUDGET_EXCEEDED" and end["turns"] == 1
    assert end["text"] == "cost budget of $1.0000 cannot be kept: cheap has no price (--max-cost)"
