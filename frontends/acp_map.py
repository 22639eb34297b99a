"""What ``ga acp`` and an editor say to each other (SPEC §13): the agent's events as ACP
``session/update`` objects, a task's end as a stop reason, a prompt's content blocks as a task.

The mapping (our ``--json`` events → ``sessionUpdate``):
``text`` → ``agent_message_chunk`` (inline ``<thinking>`` → ``agent_thought_chunk``,
``<summary>`` in the console's form); ``thinking``, ``retry``, ``model_switch``, ``notice`` →
``agent_thought_chunk``; ``tool_call`` → ``tool_call`` (in_progress); ``progress`` →
``tool_call_update`` content (the call's live output); ``tool_result`` → ``tool_call_update``
completed or failed (an edit adds a ``diff`` item); ``usage`` → ``usage_update``; plan mode's
checklist → ``plan``; an ``ask_user`` stop → a message with the question and its numbered
candidates.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from pathlib import Path
from typing import Any, Iterable, Iterator
from urllib.parse import unquote, urlparse

from agent_loop import _compact_tool_args, json_default
from llmcore.base import ConfigError
from tools import clip

from .console import ASK_USER, RESTART_NOTE, SummaryFilter, tool_outcome
from .runner import LIMIT_MESSAGES, end_message
from .task_input import with_context

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
CONTEXT_TAG = "resource"  # an embedded resource reaches the model in a <resource> block


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
        update = {"sessionUpdate": "tool_call", "toolCallId": call_id,
                  "title": f"{name}({_compact_tool_args(name, args)})",
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
        updates.append({"sessionUpdate": "tool_call_update", "toolCallId": self.ids.pop(
            call_id, call_id), "status": status, "content": content})
        self.call = ""
        return updates

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


# ---- what the editor sends ---------------------------------------------------------------
def file_name(uri: str) -> str:
    """A ``file://`` URI as its path; any other URI as it is."""
    parts = urlparse(uri)
    return unquote(parts.path) if parts.scheme == "file" else uri


def joined(parts: list[str]) -> str:
    """Text pieces as one text, a space between two that would otherwise run together."""
    out = ""
    for part in parts:
        if out and part and not out[-1].isspace() and not part[0].isspace():
            out += " "
        out += part
    return out


def read_prompt(blocks: Any) -> tuple[str, list[bytes]]:
    """A ``session/prompt``'s content as (task, images): text blocks are the task, a
    ``resource_link`` names its file there, an embedded ``resource`` is named there and its
    text goes with the task as context (neutralised like piped stdin); images, inline or
    embedded, take the image route. Anything else is a ``ConfigError``."""
    if not isinstance(blocks, list) or not blocks:
        raise ConfigError(None, "prompt", "expected a list of content blocks")
    parts: list[str] = []
    contexts: list[str] = []
    images: list[bytes] = []
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append(str(block.get("text") or ""))
        elif kind == "resource_link":
            parts.append(file_name(str(block.get("uri") or block.get("name") or "")))
        elif kind == "image":
            images.append(decoded(block.get("data"), "an image"))
        elif kind == "resource":
            resource(block.get("resource") or {}, parts, contexts, images)
        else:
            raise ConfigError(None, "prompt", f"{kind or 'this'} content is not supported; "
                              "send text, images, resources or resource links")
    task = joined(parts).strip()
    if not task and not images:
        raise ConfigError(None, "prompt", "the prompt is empty; send the task as text")
    for context in contexts:
        task = with_context(task, context, CONTEXT_TAG)
    return task, images


def resource(res: dict, parts: list[str], contexts: list[str], images: list[bytes]) -> None:
    name = file_name(str(res.get("uri") or ""))
    parts.append(name)
    if isinstance(res.get("text"), str):
        contexts.append(f"{name}\n{res['text']}")
    elif str(res.get("mimeType") or "").startswith("image/"):
        images.append(decoded(res.get("blob"), name))
    else:
        raise ConfigError(None, "prompt", f"{name}: a binary resource of type "
                          f"{res.get('mimeType') or 'unknown'} cannot be read; send text or "
                          "an image")


def decoded(data: Any, what: str) -> bytes:
    try:
        return base64.b64decode(str(data or ""), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(None, "prompt", f"{what}: the data is not base64") from None
