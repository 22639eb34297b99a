"""`ga batch` keeps the run options a one-shot task has: its tasks are confined by the sandbox
and ask nobody (SPEC §11: a batch has no person to answer), `--max-cost` is a budget per task
(SPEC §15), and `--mcp-config` servers reach every task (SPEC §12)."""

from __future__ import annotations

import json

import pytest
from batchutil import answer, by_id, code, tag, write_tasks
from llm_server import Reply, llm_server, write_config

from frontends.cli import main

__all__ = ["llm_server"]  # the fixture


@pytest.fixture
def cfg(home, llm_server):
    return write_config(home, llm_server,
                        p={"provider": "openai", "model": "m", "max_retries": 0},
                        priced={"provider": "openai", "model": "m", "max_retries": 0,
                                "price": {"input": 10, "output": 30}})


def batch(tasks_file, cfg, *extra, model="p"):
    return main(["batch", str(tasks_file), "--config", cfg, "-m", model, *extra])


def journal_start(home, session: str) -> dict:
    events = [json.loads(line) for line in (home / "sessions" / f"{session}.jsonl").open()]
    return next(e for e in events if e.get("type") == "task_start")


@pytest.mark.parametrize("yolo", [False, True])
def test_batch_tasks_are_confined_and_ask_nobody(tmp_path, home, cfg, llm_server, yolo):
    outside = tmp_path / "outside"
    outside.mkdir()
    llm_server.answer(tag(1), code(f"echo x > {outside}/f.txt; echo rc=$?"), answer("tried"))
    tasks = write_tasks(tmp_path / "tasks.jsonl", [{"task": f"{tag(1)} write there", "id": 1}])
    assert batch(tasks, cfg, *(["--yolo"] if yolo else [])) == 0
    result = by_id(tmp_path / "tasks.results.jsonl")[1]
    assert result["status"] == "done"
    assert (outside / "f.txt").exists() is yolo
    start = journal_start(home, result["session"])
    assert (start["sandbox"], start["approval"]) == (
        ("full-access", "never") if yolo else ("workspace-write", "never"))


def test_approval_always_is_refused_before_anything_runs(tmp_path, home, cfg, llm_server,
                                                         capsys):
    tasks = write_tasks(tmp_path / "tasks.jsonl", [{"task": "a"}])
    assert batch(tasks, cfg, "--approval", "always") == 2
    err = capsys.readouterr().err
    assert "--approval" in err and "approval always needs a person" in err
    assert llm_server.requests == [] and not (tmp_path / "tasks.results.jsonl").exists()


def test_max_cost_needs_a_price_and_ends_a_task_over_it(tmp_path, home, cfg, llm_server,
                                                       capsys):
    tasks = write_tasks(tmp_path / "tasks.jsonl", [{"task": f"{tag(1)} go", "id": 1}])
    assert batch(tasks, cfg, "--max-cost", "1") == 2
    assert "has no price" in capsys.readouterr().err and llm_server.requests == []
    # 100 input + 10 output tokens a request at $10/$30 a million: $0.0013 a request
    llm_server.answer(tag(1), code("echo 1"), code("echo 2"), answer("done"))
    assert batch(tasks, cfg, "--max-cost", "0.002", model="priced") == 4
    result = by_id(tmp_path / "tasks.results.jsonl")[1]
    assert result["status"] == "limit" and "--max-cost" in result["error"]
    assert result["cost"] == pytest.approx(0.0026)


def test_mcp_config_servers_reach_every_task(tmp_path, home, cfg, llm_server):
    servers = tmp_path / "mcp.json"
    servers.write_text(json.dumps({"mcpServers": {"time": {
        "type": "stdio", "command": "mcp-server-time", "args": ["--local-timezone", "UTC"]}}}))
    call = json.dumps({"timezone": "UTC"})
    for n in (1, 2):
        llm_server.answer(tag(n), Reply(text="<summary>time</summary>",
                                        tool_calls=[("mcp__time__get_current_time", call)]),
                          answer("it is late"))
    tasks = write_tasks(tmp_path / "tasks.jsonl",
                        [{"task": f"{tag(n)} what time is it", "id": n} for n in (1, 2)])
    assert batch(tasks, cfg, "--mcp-config", str(servers), "--workers", "2") == 0
    for n in (1, 2):
        asked = llm_server.requests_for(tag(n))
        assert any(t["function"]["name"] == "mcp__time__get_current_time"
                   for t in asked[0]["body"]["tools"])
        result = [m for m in asked[1]["body"]["messages"] if m["role"] == "tool"][-1]
        assert '"timezone": "UTC"' in result["content"] and "datetime" in result["content"]
