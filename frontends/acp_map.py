"""What ``ga acp`` tells an editor (SPEC §13): the agent's events as ACP ``session/update``
objects, a task's end as a stop reason, an approval question as ``session/request_permission``.

The mapping (our ``--json`` events → ``sessionUpdate``):
``text`` → ``agent_message_chunk`` (inline ``<thinking>`` → ``agent_thought_chunk``,
``<summary>`` in the console's form); ``thinking``, ``retry``, ``model_switch``, ``notice`` →
``agent_thought_chunk``; ``tool_call`` → ``tool_call`` (in_progress); ``progress`` →
``tool_call_update`` content (the call's live output); ``tool_result`` → ``tool_call_update``
completed or failed (an edit adds a ``diff`` item); ``usage`` → ``usage_update``; plan mode's
checklist → ``plan``; an ``ask_user`` stop → a message with the question and its numbered
candidates; ``approval_request`` → ``session/request_permission`` (the call's card pending,
what it would run or its diff; allow_once, allow_always, reject_once), and once allowed the
card is in_progress again.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Iterable, Iterator

from agent_loop import _compact_tool_args, json_default
from tools import clip
from tools.approval import ALWAYS, NO, YES, ApprovalRequest

from .approve import question_line
from .console import ASK_USER, RESTART_NOTE, SummaryFilter, tool_outcome
from .runner import LIMIT_MESSAGES, end_message

MESSAGE, THOUGHT, USER = "agent_message_chunk", "agent_thought_chunk", "user_message_chunk"
KINDS = {"file_read": "read", "file_write": "edit", "file_patch": "edit",
         "code_run": "execute", "web_execute_js": "execute", "web_scan": "fetch",
         "update_working_checkpoint": "think"}  # any other tool: "other"
EDITS = ("file_write", "file_patch")
STOP_REASONS = {"CURRENT_TASK_DONE": "end_turn", "EXITED": "end_turn",
                "MAX_TURNS_EXCEEDED": "max_turn_requests", "NO_PROGRESS": "max_turn_requests",
                "BUDGET_EXCEEDED": "max_tokens", "ABORTED": "cancelled"}  # else a failure
RESULT_CHARS = 8_000  # of a tool's result, shown in its card
PROGRESS_CHARS = 8_000  # the end of a running call's live output, shown in its card
DIFF_MAX_BYTES = 100_000  # a file edited beyond this size is shown without its diff
DEFAULT_CONTEXT_TOKENS = 35_000  # usage_update size for a client without a profile
THINKING_TAG = re.compile(r"(</?thinking>)")
PLAN_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s*\[([ xX])\]\s*(.*\S)")
# session/request_permission's options: (optionId = kind, label, our decision)
PERMISSIONS = (("allow_once", "Allow", YES), ("allow_always", "Always allow {key}", ALWAYS),
               ("reject_once", "Reject", NO))
DECISIONS = {option: decision for option, _, decision in PERMISSIONS}
BACKTICKS = re.compile(r"`{3,}")


def chunk(kind: str, text: str) -> dict:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


def text_item(text: str) -> dict:
    """A tool call's content item holding ``text``."""
    return {"type": "content", "content": {"type": "text", "text": text}}


def stop_reason(end: dict) -> str | None:
    """The ``stopReason`` of a ``task_end``; None for a failure (a JSON-RPC error)."""
    return STOP_REASONS.get(end.get("result"))


def failure_line(end: dict) -> str:
    """A failed task's one-line message, for the JSON-RPC error."""
    return " ".join((end_message(end) or "the task failed").split())


def question_text(end: dict) -> str:
    """An ``ask_user`` stop as the editor shows it: the question and numbered candidates."""
    lines = [f"❓ {end.get('question', '')}", ""]
    lines += [f"{i}. {c}" for i, c in enumerate(end.get("candidates") or [], 1)]
    return "\n\n" + "\n".join(lines).rstrip() + "\n"


class MarkupSplitter(SummaryFilter):
    """Streamed reply text as the answer and the thought an editor shows: inline
    ``<thinking>…</thinking>`` is thought, ``<summary>`` tags take the console's form."""

    TAGS = (*SummaryFilter.TAGS, "<thinking>", "</thinking>")

    def __init__(self) -> None:
        super().__init__()
        self.thinking = False

    def split(self, text: str) -> list[dict]:
        updates = []
        for piece in THINKING_TAG.split(self.complete(text)):
            if piece in ("<thinking>", "</thinking>"):
                self.thinking = piece == "<thinking>"
            elif piece:
                updates.append(chunk(THOUGHT if self.thinking else MESSAGE, self.shown(piece)))
        return updates

    def rest(self) -> list[dict]:
        text = self.flush()
        return [chunk(THOUGHT if self.thinking else MESSAGE, text)] if text else []


def file_text(path: str) -> tuple[bool, str | None]:
    """(usable for a diff, text): a missing file is usable and has no text; a large, binary
    or unreadable one is not usable."""
    try:
        if os.path.getsize(path) > DIFF_MAX_BYTES:
            return False, None
        with open(path, encoding="utf-8") as f:
            return True, f.read()
    except FileNotFoundError:
        return True, None
    except (OSError, UnicodeDecodeError):
        return False, None


def plan_entries(path: Path) -> list[dict] | None:
    """A plan file's checklist as ACP plan entries: ticked items completed, the first open
    one in progress; None when the file cannot be read."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    entries, current = [], False
    for line in text.splitlines():
        m = PLAN_ITEM.match(line)
        if m is None:
            continue
        status = "completed" if m.group(1) != " " else "pending" if current else "in_progress"
        current = current or status == "in_progress"
        entries.append({"content": m.group(2), "priority": "medium", "status": status})
    return entries


class Updates:
    """One session's agent events as ``session/update`` objects, in order. ``watch`` is an
    agent listener: it runs on the worker's thread, before an edit and after it, and keeps
    the file's text for the edit's diff item."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.markup = MarkupSplitter()
        self.call = ""  # the call whose live output arrives now (its ACP id)
        self.output = ""  # that output, its last PROGRESS_CHARS
        self.held: dict | None = None  # an ask_user call, until its result
        self.ids: dict[str, str] = {}  # our call id -> its ACP id, until the result
        self.titles: dict[str, str] = {}  # ACP id -> its card's title, until the result
        self.asked: set[str] = set()  # ACP ids of calls waiting for the person's answer
        self.used: dict[str, int] = {}  # how often each of our call ids was seen
        self.before: dict[str, tuple[str, str | None]] = {}  # edit call id -> (path, text)
        self.diffs: dict[str, dict] = {}  # edit call id -> its diff item
        self.plan: list[dict] | None = None  # the plan entries last sent

    def __call__(self, event: dict) -> list[dict]:
        on = getattr(self, f"on_{event.get('type')}", None)
        return on(event) if on is not None else []

    def live(self, event: dict) -> list[dict]:
        """The updates of a running task's event, with the plan when plan mode changed it."""
        updates = self(event)
        if event.get("type") in ("turn", "tool_result"):
            updates += self.plan_update()
        return updates

    def replay(self, records: Iterable[dict]) -> Iterator[dict]:
        """A journal's records as updates (``session/load``): prompts as user messages."""
        for record in records:
            kind = record.get("type")
            if kind == "task_start":
                yield from self.markup.rest()
                yield chunk(USER, str(record.get("prompt") or ""))
            elif kind in ("text", "thinking"):
                yield from self({"type": kind, "delta": str(record.get("text") or "")})
            else:
                yield from self(record)
        yield from self.markup.rest()

    def where(self, path: str) -> str:
        """A tool's path argument as an absolute path (as the handler resolves it)."""
        return os.path.abspath(os.path.join(self.agent.cwd, os.path.expanduser(path)))

    # ---- events --------------------------------------------------------------------------
    def on_text(self, e: dict) -> list[dict]:
        return self.markup.split(str(e.get("delta") or ""))

    def on_thinking(self, e: dict) -> list[dict]:
        return [chunk(THOUGHT, str(e.get("delta") or ""))]

    def on_retry(self, e: dict) -> list[dict]:
        from llmcore.session import event_text

        self.markup = MarkupSplitter()
        return [chunk(THOUGHT, f"\n{event_text(e)}{RESTART_NOTE}\n")]

    on_model_switch = on_retry

    def on_notice(self, e: dict) -> list[dict]:
        return [chunk(THOUGHT, f"\n{e.get('text', '')}\n")]

    def on_turn(self, e: dict) -> list[dict]:
        return self.markup.rest()

    def on_tool_call(self, e: dict) -> list[dict]:
        updates = self.markup.rest()
        call_id = str(e.get("id") or "call")
        seen = self.used[call_id] = self.used.get(call_id, 0) + 1
        self.ids[call_id] = self.call = call_id if seen == 1 else f"{call_id}#{seen}"
        self.output = ""
        if e.get("name") == ASK_USER:  # shown only when it does not stop with its question
            self.held = e
            return updates
        return [*updates, self.start(e)]

    def start(self, e: dict) -> dict:
        name, args = str(e.get("name")), e.get("args") or {}
        call_id = self.ids.get(str(e.get("id") or "call"))
        title = self.titles[call_id] = f"{name}({_compact_tool_args(name, args)})"
        update = {"sessionUpdate": "tool_call", "toolCallId": call_id, "title": title,
                  "kind": KINDS.get(name, "other"), "status": "in_progress", "rawInput": args}
        if isinstance(args.get("path"), str) and args["path"]:
            update["locations"] = [{"path": self.where(args["path"])}]
        return update

    def on_progress(self, e: dict) -> list[dict]:
        if not self.call or self.held is not None:
            return []
        self.output = (self.output + str(e.get("text") or ""))[-PROGRESS_CHARS:]
        return [{"sessionUpdate": "tool_call_update", "toolCallId": self.call,
                 "content": [text_item(self.output)]}]

    def on_tool_result(self, e: dict) -> list[dict]:
        call_id, data = str(e.get("id") or "call"), e.get("data")
        updates = []
        if e.get("name") == ASK_USER:
            held, self.held = self.held, None
            if isinstance(data, dict) and data.get("status") == "INTERRUPT":
                self.ids.pop(call_id, None)
                self.call = ""
                return []  # the question ends the prompt (on_task_end)
            if held is not None:
                updates.append(self.start(held))
        shown = data if isinstance(data, str) else json.dumps(
            data, ensure_ascii=False, indent=1, default=json_default)
        content = [text_item(clip(shown, RESULT_CHARS))]
        diff = self.diffs.pop(call_id, None)
        if diff is not None:
            content.append(diff)
        status = "failed" if tool_outcome(data)[1] else "completed"
        acp_id = self.ids.pop(call_id, call_id)
        self.titles.pop(acp_id, None)
        updates.append({"sessionUpdate": "tool_call_update", "toolCallId": acp_id,
                        "status": status, "content": content})
        self.call = ""
        return updates

    def on_approval(self, e: dict) -> list[dict]:
        """The person answered: an allowed call runs (its card in progress again)."""
        call_id = self.ids.get(str(e.get("id") or "call"), "")
        if call_id not in self.asked:
            return []  # allowed for the session earlier: nobody was asked
        self.asked.discard(call_id)
        if e.get("decision") == NO:
            return []  # its result says it was declined
        return [{"sessionUpdate": "tool_call_update", "toolCallId": call_id,
                 "status": "in_progress"}]

    def permission(self, request: ApprovalRequest) -> dict:
        """The ``toolCall`` of a ``session/request_permission``: the call's card, pending,
        holding the question and what the call would run (or its diff)."""
        call_id = self.ids.get(request.call_id, request.call_id)
        self.asked.add(call_id)
        title = self.titles.get(call_id) or request.tool
        return {"toolCallId": call_id, "title": title, "kind": KINDS.get(request.tool, "other"),
                "status": "pending", "content": question_content(request)}

    def on_usage(self, e: dict) -> list[dict]:
        profile = getattr(self.agent.llmclient, "profile", None)
        size = getattr(profile, "context_win", DEFAULT_CONTEXT_TOKENS)
        used = int(e.get("input") or 0) + int(e.get("output") or 0)
        return [{"sessionUpdate": "usage_update", "used": used, "size": size}] if used else []

    def on_task_end(self, e: dict) -> list[dict]:
        updates = self.markup.rest()
        if e.get("question") is not None:
            updates.append(chunk(MESSAGE, question_text(e)))
        elif e.get("result") in LIMIT_MESSAGES:
            updates.append(chunk(MESSAGE, f"\n\n{end_message(e)}\n"))
        return updates

    def plan_update(self) -> list[dict]:
        working = getattr(self.agent.handler, "working", None) or {}
        plan = working.get("in_plan_mode")
        entries = plan_entries(Path(self.agent.cwd, plan)) if plan else None
        if entries is None or entries == self.plan:
            return []
        self.plan = entries
        return [{"sessionUpdate": "plan", "entries": entries}]

    # ---- the worker's side ---------------------------------------------------------------
    def watch(self, event: dict) -> None:
        if event.get("name") not in EDITS:
            return
        call_id = str(event.get("id") or "call")
        if event.get("type") == "tool_call":
            path = self.where(str((event.get("args") or {}).get("path") or ""))
            usable, text = file_text(path)
            if usable:
                self.before[call_id] = (path, text)
        elif event.get("type") == "tool_result" and call_id in self.before:
            path, old = self.before.pop(call_id)
            usable, new = file_text(path)
            if usable and new is not None and new != old:
                redact = self.agent.redactor
                self.diffs[call_id] = {"type": "diff", "path": path, "newText": redact(new),
                                       "oldText": None if old is None else redact(old)}


# ---- approval (SPEC §11) -------------------------------------------------------------------
def question_content(request: ApprovalRequest) -> list[dict]:
    """The question as a tool call's content: what the call wants (and the model's reason),
    then the diff of an edit or the code, script or arguments."""
    what = question_line(request)
    what += f"\n\nreason: {request.reason}" if request.reason else ""
    if request.kind == "diff" and request.path and request.new_text is not None:
        return [text_item(what), {"type": "diff", "path": request.path,
                                  "oldText": request.old_text, "newText": request.new_text}]
    return [text_item(what), text_item(fenced(request.text, request.language))]


def fenced(text: str, language: str) -> str:
    """``text`` as a Markdown code block, its fence longer than any backtick run in it."""
    fence = "`" * max([3, *(len(run) + 1 for run in BACKTICKS.findall(text))])
    return f"{fence}{language}\n{text}\n{fence}"


def permission_options(request: ApprovalRequest) -> list[dict]:
    """allow_once, allow_always (this tool, or inline_eval, for the session), reject_once."""
    key = "inline_eval" if request.why == "inline_eval" else request.tool
    return [{"optionId": option, "name": label.format(key=key), "kind": option}
            for option, label, _ in PERMISSIONS]


def permission_answer(response: dict) -> tuple[str, str] | None:
    """An editor's response to ``session/request_permission`` as (decision, message for the
    model); None for ``cancelled`` (the prompt is being cancelled). An error or an answer
    ga cannot read declines the call, saying so."""
    error = response.get("error")
    if error is not None:
        message = error.get("message") if isinstance(error, dict) else error
        return NO, f"the editor could not ask ({message})"
    result = response.get("result")
    outcome = result.get("outcome") if isinstance(result, dict) else None
    kind = outcome.get("outcome") if isinstance(outcome, dict) else None
    if kind == "cancelled":
        return None
    decision = DECISIONS.get(str(outcome.get("optionId"))) if kind == "selected" else None
    if decision is None:
        return NO, f"the editor's answer could not be read (outcome {kind!r})"
    return decision, ""
