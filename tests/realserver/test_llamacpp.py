"""The real `ga` against a real OpenAI-compatible server nobody here wrote.

llama-cpp-python's server runs SmolLM2-135M-Instruct (greedy, temperature 0). The model is
tiny, so the tasks test the runtime's handling of what the server sends — streamed text,
tool calls, history sent back, missing usage, cut replies, a context overflow — not the
model's judgement. Native tool calls are forced with ``tool_choice`` (the only way this
server streams one); text-mode replies are shaped with a llama.cpp grammar (``extra_body``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT = 300  # seconds for one ga run
MAX_TURNS = 3  # a run that goes wrong ends soon (a test may pass its own --max-turns)
PROFILE = {"provider": "openai", "model": "smollm2", "temperature": 0, "max_tokens": 128,
           "context_win": 6000, "max_retries": 1, "backoff_base": 0.01, "read_timeout": 120}


# llama.cpp grammars (GBNF) that make the model write what the test needs
ASK_USER_GRAMMAR = (r'root ::= "<tool_use>{\"name\": \"ask_user\", \"arguments\": '
                    r'{\"question\": \"" [A-Za-z ]{1,40} "?\"}}</tool_use>"')
TEXT_TASK = "Ask me which colour I like best."  # the grammar decides what the model writes
# a short reply whatever the prompt holds (the temp home's path in the system prompt varies,
# so even greedy decoding may otherwise run into max_tokens now and then)
HELLO_GRAMMAR = r'root ::= "Hello! How can I help you today?"'
JSON_EXAMPLE_GRAMMAR = (r'root ::= "Here is an example:\n```json\n'
                        r'[{\"name\": \"Alice\", \"age\": 30}]\n```\n"')


def ga(server, *args: str, **profile) -> tuple[int, str, str]:
    """Run the real ``ga`` on ``server`` with profile ``local``: (exit code, stdout, stderr)."""
    home = Path(os.environ["GA_HOME"])
    cfg = home / "config.yaml"
    local = {**PROFILE, "base_url": server.url, **profile}
    cfg.write_text(yaml.safe_dump({"models": {"local": local}}), encoding="utf-8")
    proc = subprocess.run([sys.executable, str(ROOT / "ga.py"), "--config", str(cfg),
                           "-m", "local", "--max-turns", str(MAX_TURNS), *args],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=RUN_TIMEOUT)
    return proc.returncode, proc.stdout, proc.stderr


def events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines()]


def of_type(evs: list[dict], kind: str) -> list[dict]:
    return [e for e in evs if e["type"] == kind]


def test_one_shot_text_reply_is_the_final_answer(llama):
    code, out, err = ga(llama, "Say hello.", extra_body={"grammar": HELLO_GRAMMAR})
    assert code == 0, err
    assert out.strip() and "Traceback" not in err


def test_json_text_reply_streams_and_counts_tokens_without_server_usage(llama):
    code, out, err = ga(llama, "--json", "Say hello.", extra_body={"grammar": HELLO_GRAMMAR})
    assert code == 0, err
    evs = events(out)
    deltas = "".join(e["delta"] for e in of_type(evs, "text"))
    end = of_type(evs, "task_end")[-1]
    assert len(of_type(evs, "text")) > 1 and end["result"] == "CURRENT_TASK_DONE"
    assert deltas.strip() and end["text"].strip() in deltas
    usage = of_type(evs, "usage")
    assert usage and usage[-1]["input"] > 0 and usage[-1]["output"] > 0  # estimated


def test_json_forced_tool_call_runs_the_tool(llama):
    code, out, err = ga(llama, "--json", "--max-turns", "2", "Ask me which colour I like best.",
                        tool_choice="ask_user")
    assert code == 3, err
    evs = events(out)
    calls = of_type(evs, "tool_call")
    assert [c["name"] for c in calls] == ["ask_user"]
    assert isinstance(calls[0]["args"]["question"], str)
    end = of_type(evs, "task_end")[-1]
    assert end["question"] == calls[0]["args"]["question"]


def test_tool_history_goes_back_to_the_server_each_turn(llama):
    code, out, err = ga(llama, "--json", "--max-turns", "2", "Remember that the sky is blue.",
                        tool_choice="update_working_checkpoint")
    assert code == 4, err  # turn 2 (assistant tool call + tool result) was accepted
    evs = events(out)
    calls = of_type(evs, "tool_call")  # a call cut at max_tokens arrives as bad_json
    named = [c["args"]["name"] if c["name"] == "bad_json" else c["name"] for c in calls]
    assert named == ["update_working_checkpoint"] * 2
    assert all("unknown tool" not in json.dumps(r["data"]) for r in of_type(evs, "tool_result"))
    assert of_type(evs, "task_end")[-1]["result"] == "MAX_TURNS_EXCEEDED"


def test_text_mode_tool_call_from_a_real_stream_runs_the_tool(llama):
    code, out, err = ga(llama, "--json", "--max-turns", "2", TEXT_TASK, tool_mode="text",
                        extra_body={"grammar": ASK_USER_GRAMMAR})
    assert code == 3, err
    evs = events(out)
    assert len(of_type(evs, "text")) > 10  # the tags arrived split over many chunks
    calls = of_type(evs, "tool_call")
    assert [c["name"] for c in calls] == ["ask_user"]
    assert of_type(evs, "task_end")[-1]["question"] == calls[0]["args"]["question"]


def test_text_mode_json_example_in_prose_is_not_a_tool_call(llama):
    code, out, err = ga(llama, "--json", "--max-turns", "2", TEXT_TASK, tool_mode="text",
                        extra_body={"grammar": JSON_EXAMPLE_GRAMMAR})
    assert code == 0, err
    evs = events(out)
    assert not of_type(evs, "tool_call")
    assert '"Alice"' in of_type(evs, "task_end")[-1]["text"]


def test_token_budget_is_enforced_on_estimated_usage(llama):
    code, out, err = ga(llama, "--json", "--max-tokens", "500", "--max-turns", "5",
                        "Remember that the sky is blue.", tool_choice="update_working_checkpoint")
    assert code == 4, err
    evs = events(out)
    assert of_type(evs, "usage")[0]["estimated"] is True
    end = of_type(evs, "task_end")[-1]
    assert end["result"] == "BUDGET_EXCEEDED" and end["turns"] == 1 and "≈" in end["text"]


def test_replies_cut_at_max_tokens_are_reported_as_such(llama):
    code, out, err = ga(llama, "Count from 1 to 100, separated by commas.", max_tokens=4)
    assert code == 1
    assert "max_tokens" in err and "empty repl" not in err


def test_context_overflow_fails_with_a_hint_not_empty_replies(small_llama):
    code, out, err = ga(small_llama, "Say hello.", tool_mode="text")
    assert code == 1
    assert "context" in err.lower() and "empty repl" not in err
    assert "Traceback" not in err
