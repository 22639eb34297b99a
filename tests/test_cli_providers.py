"""The whole stack through the real SDKs: `ga` against the local test server."""

from __future__ import annotations

import io
import json
import re

import pytest
from llm_server import HTML_PAGE, KINDS, Reply, llm_server, write_config

from frontends.cli import main
from frontends.console import LiveRenderer

__all__ = ["llm_server"]  # the fixture

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
@pytest.mark.parametrize("tool_mode", ["native", "text"])
def test_a_lone_surrogate_in_a_reply_becomes_a_replacement_character(home, tmp_path,
                                                                     llm_server, kind,
                                                                     tool_mode, capsys):
    cfg = write_config(home, llm_server, p={"provider": kind, "model": "m",
                                            "tool_mode": tool_mode})
    args = json.dumps({"path": "out.txt", "content": "x\ud800y"})  # escaped in the JSON
    assert "\\ud800" in args
    call = f'<tool_use>{{"name": "file_write", "arguments": {args}}}</tool_use>'
    first = Reply(text="<summary>write\ud800</summary>",
                  tool_calls=[("file_write", args)] if tool_mode == "native" else [])
    if tool_mode == "text":
        first.text += call
    llm_server.queue(first, Reply(text="bad \ud800 char"))
    code = main(["-m", "p", "--config", cfg, "write the file"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.endswith("bad \ufffd char\n") and "failed" not in err
    assert (tmp_path / "work" / "out.txt").read_text() == "x\ufffdy"
    journal = next((home / "sessions").glob("*.jsonl")).read_text(encoding="utf-8")
    assert "bad \ufffd char" in journal and '"type": "task_end"' in journal
    assert "bad \ufffd char" in next((home / "logs").glob("llm-*.log")).read_text()


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


@pytest.mark.parametrize("fault", [{"page": HTML_PAGE}, {"bad_event_after": 0}])
def test_a_200_that_is_no_api_stream_fails_with_one_clear_line(home, llm_server, fault,
                                                                capsys):
    cfg = write_config(home, llm_server, p={"provider": "openai", "model": "m",
                                            "max_retries": 1})
    llm_server.queue(*[Reply(text="x", **fault)] * 2)
    assert main(["-m", "p", "--config", cfg, "go"]) == 1
    err = capsys.readouterr().err
    failure = [line for line in err.splitlines() if line.startswith("ga: p [openai]")]
    assert len(failure) == 1 and "bad response" in failure[0]
    assert llm_server.openai_url in failure[0]
    assert "Traceback" not in err and "empty" not in err


def test_replies_cut_at_max_tokens_fail_saying_so(home, llm_server, capsys):
    cfg = write_config(home, llm_server, p={"provider": "openai", "model": "m"})
    llm_server.queue(*[Reply(text="Let me write a very long", stop="max_tokens")] * 3)
    assert main(["-m", "p", "--config", cfg, "go"]) == 1
    err = capsys.readouterr().err
    assert "3 replies cut at max_tokens: raise max_tokens or shorten the task" in err
    assert "empty" not in err


def no_usage_turn(i: int) -> Reply:
    args = json.dumps({"type": "python", "script": f"print({i})"})
    return Reply(text=f"<summary>step {i}</summary>running", no_usage=True,
                 tool_calls=[("code_run", args)])


def test_estimated_usage_is_marked_and_enforces_max_tokens(home, llm_server, capsys):
    cfg = write_config(home, llm_server, p={"provider": "openai", "model": "m"})
    llm_server.queue(*[no_usage_turn(i) for i in range(6)], Reply(text="done", no_usage=True))
    code = main(["-m", "p", "--config", cfg, "--max-tokens", "3000", "go"])
    err = capsys.readouterr().err
    assert code == 4 and "token budget of 3000 reached (≈" in err
    assert len(llm_server.requests) < 7
    assert re.search(r"tokens: ≈\d+ in .*≈\d+ out", err)
    assert main(["sessions"]) == 0
    assert re.search(r"\s≈\d+\s", capsys.readouterr().out)


def test_a_failed_prompt_is_not_sent_again_on_resume(home, llm_server, capsys):
    cfg = write_config(home, llm_server, p={"provider": "openai", "model": "m"})
    llm_server.queue(Reply(status=404, body={"detail": "Not Found"}))
    assert main(["-m", "p", "--config", cfg, "Say hi"]) == 1
    err = capsys.readouterr().err
    assert "Not Found" in err and llm_server.openai_url in err
    sid = next((home / "sessions").glob("*.jsonl")).stem
    llm_server.queue(Reply(text="Created."))
    assert main(["-m", "p", "--config", cfg, "--resume", sid, "Create the file a.txt"]) == 0
    sent = llm_server.bodies()[-1]["messages"]
    assert "Say hi" not in json.dumps(sent)
    assert [m["role"] for m in sent] == ["system", "user"]


def test_repl_status_line_marks_estimated_tokens():
    out = io.StringIO()
    render = LiveRenderer(out=out, status=lambda: "[p] session s1")
    render({"type": "usage", "input": 1200, "cached": 0, "output": 40, "estimated": True})
    render({"type": "task_end", "result": "CURRENT_TASK_DONE"})
    assert "[p] session s1 · tokens: ≈1200 in (0 cached), ≈40 out" in out.getvalue()


def tool_results_sent(kind: str, body: dict) -> list[str]:
    """The tool results a request carries, as text, in each API's own shape."""
    if kind == "openai":
        return [m["content"] for m in body["messages"] if m["role"] == "tool"]
    if kind == "openai-responses":
        return [i["output"] for i in body["input"] if i.get("type") == "function_call_output"]
    blocks = [b for m in body["messages"] if isinstance(m["content"], list)
              for b in m["content"] if b["type"] == "tool_result"]
    return [b["content"] if isinstance(b["content"], str)
            else "".join(part["text"] for part in b["content"]) for b in blocks]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("tool_mode", ["native", "text"])
def test_a_resumed_answer_by_number_is_the_ask_user_calls_result(home, llm_server, kind,
                                                                  tool_mode, capsys):
    cfg = write_config(home, llm_server, p={"provider": kind, "model": "m", "api_key": KEY,
                                            "tool_mode": tool_mode})
    ask = json.dumps({"question": "Which color?", "candidates": ["red", "blue"]})
    if tool_mode == "native":
        first = Reply(text="<summary>ask</summary>", tool_calls=[("ask_user", ask)])
    else:
        first = Reply(text=f'<summary>ask</summary><tool_use>{{"name": "ask_user", '
                      f'"arguments": {ask}}}</tool_use>')
    llm_server.queue(first, Reply(text="Blue it is."))
    assert main(["-m", "p", "--config", cfg, "paint it"]) == 3
    sid = next((home / "sessions").glob("*.jsonl")).stem
    assert main(["--config", cfg, "--resume", sid, "2"]) == 0
    assert capsys.readouterr().out.endswith("Blue it is.\n")
    body = llm_server.bodies()[-1]
    sent = json.dumps(body)
    assert "was interrupted" not in sent and '"2"' not in sent
    if tool_mode == "native":
        assert tool_results_sent(kind, body) == ["blue"]
    else:  # text mode: the result goes back as a <tool_result> text block
        assert '">\\nblue\\n</tool_result>' in sent


REPLY = "hello there, this is the whole reply."
BROKEN_TWICE = [Reply(text=REPLY, bad_event_after=5), Reply(text=REPLY, drop_after=6),
                Reply(text=REPLY)]


def test_a_retried_reply_starts_over_in_json_the_journal_and_the_archive(home, llm_server,
                                                                         capsys):
    cfg = write_config(home, llm_server, p={"provider": "openai", "model": "m", "api_key": KEY})
    llm_server.queue(*BROKEN_TWICE)
    assert main(["-m", "p", "--config", cfg, "--json", "go"]) == 0
    out, err = capsys.readouterr()
    events = [json.loads(line) for line in out.splitlines()]
    retries = [e for e in events if e["type"] == "retry"]
    assert [(r["model"], r["status"], r["attempt"]) for r in retries] == [
        ("p", "bad response", 1), ("p", "connection", 2)]
    shown = ""
    for e in events:  # what a consumer keeps: a retry drops the turn's streamed text
        shown = "" if e["type"] == "retry" else shown + e.get("delta", "")
    assert shown == REPLY and events[-1]["text"] == REPLY
    assert err.count("; retry ") == 2  # the diagnostics still go to stderr
    journal = next((home / "sessions").glob("*.jsonl")).read_text()
    texts = [json.loads(line)["text"] for line in journal.splitlines()
             if json.loads(line)["type"] == "text"]
    assert texts == [REPLY]
    archived = "".join(p.read_text() for p in (home / "memory").rglob("*") if p.is_file())
    assert REPLY in archived and "hello there, thihello" not in archived


def test_a_retried_reply_ends_its_partial_line_and_says_it_starts_over(home, llm_server,
                                                                       capsys):
    cfg = write_config(home, llm_server, p={"provider": "openai", "model": "m", "api_key": KEY})
    llm_server.queue(*BROKEN_TWICE)
    assert main(["-m", "p", "--config", cfg, "go"]) == 0
    out, err = capsys.readouterr()
    assert out == REPLY + "\n"
    assert re.search(r"^hello there, thi\nga: p: bad response: .*; retry 1 in \d\.\ds — the "
                     r"reply starts over\nhello there, this is\nga: p: connection: .*; retry 2 "
                     r"in \d\.\ds — the reply starts over\n" + re.escape(REPLY) + "\n", err, re.M)


def test_the_repl_drops_a_restarted_reply_instead_of_rendering_it():
    out = io.StringIO()
    render = LiveRenderer(out=out)
    for event in ({"type": "turn", "turn": 1}, {"type": "text", "delta": "hello there, thi"},
                  {"type": "retry", "model": "p", "status": "connection", "message": "reset",
                   "attempt": 1, "wait": 0.5}, {"type": "text", "delta": REPLY},
                  {"type": "task_end", "result": "CURRENT_TASK_DONE"}):
        render(event)
    shown = out.getvalue()
    assert "ga: p: connection: reset; retry 1 in 0.5s — the reply starts over\n" in shown
    assert "hello there, thi\n" not in shown and REPLY in shown


def test_a_failover_after_partial_text_starts_the_reply_over_too(home, llm_server, capsys):
    cfg = write_config(home, llm_server, a={"provider": "openai", "model": "m", "api_key": KEY,
                                            "max_retries": 0},
                       b={"provider": "openai", "model": "m2", "api_key": KEY},
                       both={"mixin": ["a", "b"]})
    llm_server.queue(Reply(text=REPLY, drop_after=6), Reply(text=REPLY))
    assert main(["-m", "both", "--config", cfg, "--json", "go"]) == 0
    out, err = capsys.readouterr()
    events = [json.loads(line) for line in out.splitlines()]
    at = next(i for i, e in enumerate(events) if e["type"] == "model_switch")
    assert events[at]["from"] == "a" and events[at]["to"] == "b"
    assert "".join(e.get("delta", "") for e in events[at:]) == REPLY
    assert "".join(e.get("delta", "") for e in events[:at]) != ""  # a partial reply came first
    assert "ga: switching model a -> b (" in err
    journal = [json.loads(line) for line in
               next((home / "sessions").glob("*.jsonl")).read_text().splitlines()]
    assert [r["text"] for r in journal if r["type"] == "text"] == [REPLY]
