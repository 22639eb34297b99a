"""The working-memory rules that need no handler: their settings (config ``agent:``), the
one-line squeeze of a turn's summary, the repeated-call run, folding older summary lines,
dropping a line a text template rendered, plan-mode checks, and the ``ask_user`` question a
conversation ended on, which the next task answers. ``ga.GenericAgentHandler`` and
``ga.GenericAgent`` apply them.
"""

from __future__ import annotations

import json
import re
import string
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

from agent_loop import json_default
from llmcore.base import ConfigError, unknown_key
from llmcore.history import unanswered_call
from tools.sandbox import SETTINGS as SANDBOX_SETTINGS
from tools.texts import check_overrides

SETTING_MINIMUM = {"plan_hint_after": 0}  # every other agent: setting is >= 1
COMPLETION_WORDS = ("任务完成", "全部完成", "已完成所有", "🏁", "all tasks complete",
                    "task complete", "all steps complete", "plan complete")
VERIFY_WORDS = ("VERDICT", "[VERIFY]")
CODE_ONLY_SLACK_CHARS = 30  # prose allowed beside a reply's one big code block


@dataclass
class Settings:
    """Thresholds of the working-memory rules; every one configurable (config ``agent:``)."""

    checkpoint_warn_turns: int = 7
    file_reminder_every: int = 31
    ask_user_every: int = 175
    insight_every: int = 10
    plan_hint_every: int = 5
    plan_hint_after: int = 10
    plan_limit_turns: int = 190
    repeat_warn: int = 3
    repeat_stop: int = 6
    history_lines: int = 30
    history_every: int = 2
    earlier_every: int = 4
    earlier_max_parts: int = 70
    summary_chars: int = 80
    long_prompt_chars: int = 2000
    retry_reply_limit: int = 3
    texts: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict, path: str | None = None) -> Settings:
        """The validated ``agent:`` section; a bad key or value is a ConfigError. The
        sandbox keys are left to ``tools.sandbox.Settings``."""
        known = [f.name for f in fields(cls)]
        data = {k: v for k, v in data.items() if k not in SANDBOX_SETTINGS}
        for key, value in data.items():
            if key not in known:
                raise unknown_key(path, f"agent.{key}", key, [*known, *SANDBOX_SETTINGS],
                                  "setting")
            if key == "texts":
                check_overrides(value, path, "agent.texts")
                continue
            least = SETTING_MINIMUM.get(key, 1)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ConfigError(path, f"agent.{key}",
                                  f"must be a whole number >= {least}, got {value!r}")
        settings = cls(**data)
        if settings.repeat_warn > settings.repeat_stop:
            raise ConfigError(path, "agent.repeat_warn",
                              f"must be <= repeat_stop ({settings.repeat_stop}), "
                              f"got {settings.repeat_warn}")
        return settings


def squeeze(text: str, limit: int, redact: Callable[[str], str] | None = None) -> str:
    """One short line: newlines folded, head and tail kept; ``redact`` masks secrets first
    (a key cut in two is no longer recognised)."""
    line = " ".join((redact(text) if redact else text).split())
    return line if len(line) <= limit else line[: limit // 2] + " ... " + line[-limit // 2:]


def turn_summary(reply: str, tool_calls: list[dict], directly: str) -> tuple[str, bool]:
    """What a turn did, for its history line (to be squeezed): the reply's ``<summary>``
    outside code and thinking, else the reply without them, else its first call
    (``directly`` when it called none); and whether the reply gave a ``<summary>``."""
    clean = re.sub(r"```.*?```|<thinking>.*?</thinking>", "", reply, flags=re.DOTALL)
    m = re.search(r"<summary>(.*?)</summary>", clean, re.DOTALL)
    if m:
        return m.group(1), True
    first = tool_calls[0]
    if clean.strip():
        return clean, False
    if first["tool_name"] == "no_tool":
        return directly, False
    args = {k: v for k, v in first["args"].items() if not k.startswith("_")}
    return f"{first['tool_name']}, args: {json.dumps(args, ensure_ascii=False)}", False


def call_signature(tool_calls: list[dict]) -> str | None:
    calls = [c for c in tool_calls if c["tool_name"] != "no_tool"]
    if not calls:
        return None
    return json.dumps([[c["tool_name"], {k: v for k, v in c["args"].items()
                                          if not k.startswith("_")}] for c in calls],
                      sort_keys=True, ensure_ascii=False, default=json_default)


def repeat_run(signatures: list[str | None]) -> int:
    """How many turns in a row, the last one included, made the same calls with the same
    arguments (``call_signature``s); 0 when the last one called no tool."""
    last = signatures[-1] if signatures else None
    run = 0
    for past in reversed(signatures):
        if last is None or past != last:
            break
        run += 1
    return run


def fold_earlier(lines: list[str], fallback: str, max_parts: int) -> str:
    """Older summary lines folded per user request as "<last summary>（N turns）"."""
    parts: list[str] = []
    count, last = 0, ""
    for line in lines + ["[USER]"]:
        if line.startswith("[USER]"):
            if count:
                parts.append(f"{'[Agent]' if last == fallback else last}（{count} turns）")
            parts.append(line)
            count, last = 0, ""
        else:
            count, last = count + 1, line
    return "\n".join(parts[:-1][-max_parts:])


def drop_rendered(text: str, template: str) -> str:
    """``text`` without what ``template`` rendered in it, whatever number filled it."""
    body = "".join(re.escape(literal) + (r"\d+" if name is not None else "")
                   for literal, name, _, _ in string.Formatter().parse(template))
    return re.sub(rf"\n?{body}", "", text)


def claims_completion(text: str) -> bool:
    low = text.lower()
    return any(w in low for w in COMPLETION_WORDS)


def has_verification(text: str) -> bool:
    return any(w in text for w in VERIFY_WORDS)


def is_code_block_only(text: str) -> bool:
    blocks = list(re.finditer(r"```[a-zA-Z0-9_]*\n[\s\S]{50,}?```", text))
    if len(blocks) != 1 or text[blocks[0].end():].strip():
        return False
    rest = text.replace(blocks[0].group(0), "")
    rest = re.sub(r"<(thinking|summary)>[\s\S]*?</\1>", "", rest, flags=re.IGNORECASE)
    return len(re.sub(r"\s+", "", rest)) <= CODE_ONLY_SLACK_CHARS


def plan_open_items(plan_path: str) -> int | None:
    try:
        return Path(plan_path).read_text(encoding="utf-8", errors="replace").count("[ ]")
    except OSError:
        return None


def pick_answer(text: str, candidates: Any) -> str:
    """An answer to an ``ask_user`` question: a number picks that candidate (1-based)."""
    pick = text.strip()
    if pick.isdigit() and isinstance(candidates, list) and 1 <= int(pick) <= len(candidates):
        return str(candidates[int(pick) - 1])
    return text


@dataclass
class OpenQuestion:
    """The ``ask_user`` call a conversation ended on, unanswered, and what it kept for its
    answer (the agent's ``open_turn``: ``{call, turn, results}``, the turn it stopped and the
    results of that turn's other calls): the next task answers it and goes on from there."""

    call: dict
    kept: dict

    @classmethod
    def find(cls, history: list[dict], open_turn: dict) -> OpenQuestion | None:
        asked = unanswered_call(history, "ask_user")
        if asked is None:
            return None
        return cls(asked, open_turn if open_turn.get("call") == asked["id"] else {})

    @property
    def turn(self) -> int:
        return self.kept.get("turn", 0)

    def answer(self, text: str) -> str:
        """The answer ``text`` gives ("2" picks the second candidate)."""
        return pick_answer(text, (self.call.get("input") or {}).get("candidates"))

    def results(self, message: str) -> list[dict]:
        """What the answer is sent as: the results of the question's turn, then this call's."""
        return [*self.kept.get("results", []), {"tool_use_id": self.call["id"],
                                                "content": message}]


def kept_open(asked: OpenQuestion | None, result: dict, turn: int) -> dict:
    """The ``open_turn`` after a task (``asked``: the question the conversation ends on now):
    a question it stopped on keeps that turn and the results of its other calls; a failed
    answer keeps what the question had."""
    if asked is None or result.get("result") != "EXITED":
        return asked.kept if asked is not None else {}
    return {"call": asked.call["id"], "turn": turn, "results": result.get("turn_results") or []}
