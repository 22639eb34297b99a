"""The whole stack through the real SDKs: `ga` against the local test server."""

from __future__ import annotations

import json

import pytest
from llm_server import Reply, llm_server, write_config

from frontends.cli import main

__all__ = ["llm_server"]  # the fixture

KINDS = ["openai", "openai-responses", "anthropic"]
KEY = "sk-test-SECRET-4f9a1b"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("tool_mode", ["native", "text"])
def test_tool_task_end_to_end_through_each_provider(home, tmp_path, llm_server, kind,
                                                     tool_mode, capsys):
    cfg = write_config(home, llm_server, p={"provider": kind, "model": "m", "api_key": KEY,
                                            "tool_mode": tool_mode})
    args = json.dumps({"path": "out.txt", "content": "written by the model"})
    if tool_mode == "native":
        first = Reply(text="<summary>write</summary>Writing.", tool_calls=[("file_write", args)])
    else:
        first = Reply(text='<summary>write</summary>Writing.\n<tool_use>{"name": "file_write", '
                      f'"arguments": {args}}}</tool_use>')
    llm_server.queue(first, Reply(text="The file is written."))
    code = main(["-m", "p", "--config", cfg, "write the file"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert (tmp_path / "work" / "out.txt").read_text() == "written by the model"
    assert "The file is written." in out
    second = json.dumps(llm_server.bodies()[-1])
    assert "working memory" in second.lower() or "WORKING MEMORY" in second
    assert KEY not in out + err


@pytest.mark.parametrize("kind", KINDS)
def test_provider_failure_exits_1_with_one_clear_line(home, llm_server, kind, capsys):
    cfg = write_config(home, llm_server, p={"provider": kind, "model": "m", "api_key": KEY,
                                            "max_retries": 1})
    llm_server.queue(*[Reply(status=503, message="down for maintenance")] * 2)
    assert main(["-m", "p", "--config", cfg, "go"]) == 1
    err = capsys.readouterr().err
    failure = [line for line in err.splitlines() if "503" in line and "retry" not in line]
    assert len(failure) == 1 and "down for maintenance" in failure[0] and "p" in failure[0]
    assert "Traceback" not in err and KEY not in err


def test_bad_config_field_exits_2_naming_file_and_field(home, capsys):
    cfg = home / "config.yaml"
    cfg.write_text("models:\n  p: {provider: openai, model: m, temprature: 0.2}\n")
    assert main(["-m", "p", "go"]) == 2
    err = capsys.readouterr().err
    assert str(cfg) in err and "temprature" in err and "Traceback" not in err


def test_a_config_file_key_never_reaches_the_session_journal(home, llm_server, capsys):
    key = "plainkey-from-config-9d8e7f"  # not key-shaped: only knowing the key can mask it
    cfg = write_config(home, llm_server, p={"provider": "openai", "model": "m", "api_key": key})
    llm_server.queue(Reply(text=f"I found the key {key} in config.yaml"))
    assert main(["-m", "p", "--config", cfg, "what is in the config?"]) == 0
    journal = next((home / "sessions").glob("*.jsonl")).read_text()
    assert "I found the key" in journal and key not in journal
