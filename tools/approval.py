"""Approval (SPEC §11): one gate in ``dispatch`` for every tool — built-in, plugin or MCP —
that decides whether a person is asked before a call runs, and a question any front end
can answer.

The seam. When the mode says to ask, the task's event stream carries::

    {"type": "approval_request", "request": ApprovalRequest}

``request`` is the question as data, made from the arguments as the tool will run with them
(``tools.spec.call_args``: the one reading of a call, so the gate judges what runs):
``tool``, ``call_id``, ``kind`` (``script``, ``diff``,
``js``, ``inline_eval`` or ``call``), ``text`` (the script, a unified diff, the JavaScript or
the arguments as JSON), ``language``, ``reason`` (the model's, for an escalation), ``why``
it asks (``always``, ``escalate``, ``inline_eval``) and, for file edits, ``path``,
``old_text`` and ``new_text``. A front end shows it and calls
``request.answer("yes" | "always" | "no", message="")`` from any thread; the task waits
for that (an abort ends the wait). The decision follows on the stream as
``{"type": "approval", "tool", "id", "decision"}`` and is journaled. A consumer that
iterates ``GenericAgent.run_task`` itself answers before asking for the next event; an
unanswered request is then declined ("nobody answered").
"""

from __future__ import annotations

import ast
import difflib
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generator

from tools import ToolError
from tools.code_run import code_to_run
from tools.fsutil import open_regular
from tools.sandbox import APPROVALS, choice
from tools.spec import coerce

YES, ALWAYS, NO = "yes", "always", "no"
DECISIONS = (YES, ALWAYS, NO)
ABORTED, UNANSWERED = "aborted", "unanswered"
# tools that only read or talk: never asked about
READ_TOOLS = frozenset({"file_read", "web_scan", "ask_user", "update_working_checkpoint",
                        "start_long_term_update", "no_tool", "bad_json"})
ESCALATING = ("code_run", "file_write", "file_patch")  # on-request: escalate + reason
DIFF_SOURCE_BYTES = 2_000_000  # a bigger file is not diffed: its new text is shown instead
QUESTION_CHARS = 200_000  # what a question holds at most (a front end shows less)
DECLINED = "declined by the user"
NOT_ASKED = ("not run: this call needs approval (approval: {mode}) and nobody answered; "
             "the user can run ga at a terminal to be asked")
STOPPED = "not run: the task was stopped while the user was being asked"
INLINE_REFUSED = ("refused: inline_eval runs inside the agent, where no sandbox reaches; under "
                  "sandbox {sandbox} it needs the user's approval, and approval is never. Use "
                  "code_run without inline_eval (it runs confined). Entering plan mode with "
                  "handler.enter_plan_mode('plan.md') alone is allowed.")


@dataclass(eq=False)
class ApprovalRequest:
    """One question to the person, and the slot for the answer."""

    tool: str
    call_id: str
    kind: str
    text: str
    language: str = ""
    reason: str = ""
    why: str = "always"
    path: str | None = None
    old_text: str | None = None
    new_text: str | None = None
    decision: str | None = None
    message: str = ""
    _done: threading.Event = field(default_factory=threading.Event, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def answer(self, decision: str, message: str = "") -> None:
        """Answer: ``yes`` (this call), ``always`` (this tool for the rest of the session) or
        ``no`` (``message`` goes to the model). The first answer counts."""
        if decision not in DECISIONS:
            raise ValueError(f"decision must be one of {', '.join(DECISIONS)}, got {decision!r}")
        self._settle(decision, message)

    def cancel(self) -> None:
        """End the wait: the task is being stopped."""
        self._settle(ABORTED)

    def _settle(self, decision: str, message: str = "") -> None:
        with self._lock:  # an answer and an abort may race: the first one counts
            if self._done.is_set():
                return
            self.decision, self.message = decision, message.strip()
            self._done.set()

    @property
    def answered(self) -> bool:
        return self._done.is_set()

    def wait(self) -> str:
        self._done.wait()
        return self.decision or ABORTED


@dataclass
class Verdict:
    """What the gate decided: ``outcome`` (an error result: do not run) or run it,
    ``escalated`` (outside the sandbox)."""

    outcome: dict | None = None
    escalated: bool = False


def is_plan_entry(code: str) -> bool:
    """Whether ``code`` is only ``handler.enter_plan_mode('<path>')``."""
    try:
        call = ast.parse(code.strip(), mode="eval").body
    except SyntaxError:
        return False
    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr == "enter_plan_mode" and isinstance(call.func.value, ast.Name)
            and call.func.value.id == "handler" and len(call.args) == 1 and not call.keywords
            and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str))


def _flag(value: Any) -> bool:
    try:
        return bool(coerce(value, bool))
    except ValueError:
        return False  # not a yes: nothing is escalated on a garbled flag


def take_escalation(tool: str, args: dict) -> tuple[bool, str]:
    """Remove ``escalate`` and ``reason`` from a code_run/file_write/file_patch call."""
    if tool not in ESCALATING:
        return False, ""
    escalate = _flag(args.pop("escalate", False))
    return escalate, str(args.pop("reason", "") or "")


def code_of(view: dict, reply: str) -> str:
    """The code a code_run call runs (``view``: its arguments as the tool binds them)."""
    return code_to_run(str(view.get("script") or ""), str(view.get("type", "python")), reply)


def is_inline(tool: str, view: dict) -> bool:
    """Whether a code_run call runs in-process, as the tool decides it (``view`` bound)."""
    return (tool == "code_run" and _flag(view.get("inline_eval"))
            and view.get("type", "python") == "python")


class Approvals:
    """The approval mode in force and what the person allowed for the whole session."""

    def __init__(self, mode: str = "never") -> None:
        self.mode = choice(mode, APPROVALS, None, "approval")
        self.granted: set[tuple[str, str]] = set()  # (tool, why) answered "always"
        self.pending: ApprovalRequest | None = None

    @property
    def may_escalate(self) -> bool:
        """Whether the model may ask to run a call outside the sandbox (on-request)."""
        return self.mode == "on-request"

    def plan(self, tool: str, view: dict, escalate: bool, confining: bool,
             reply: str) -> str | None:
        """Why this call needs the person (``inline_eval``, ``always``, ``escalate``); None
        when it runs as it is."""
        if is_inline(tool, view) and confining and not is_plan_entry(code_of(view, reply)):
            return "inline_eval"
        if self.mode == "always" and tool not in READ_TOOLS:
            return "always"
        if self.may_escalate and escalate:
            return "escalate"
        return None

    def cancel(self) -> None:
        """Wake a call waiting for an answer (the task is being aborted)."""
        pending = self.pending
        if pending is not None:
            pending.cancel()

    def gate(self, tool: str, args: dict, call_id: str, *, confining: bool, sandbox: str,
             ask: Callable[[str, str, dict], ApprovalRequest], reply: str,
             abort: threading.Event, waits: bool,
             bind: Callable[[dict], dict | None] = dict) -> Generator[dict, None, Verdict]:
        """Decide on one call; yields the question and the decision as events. ``bind``
        gives the arguments the tool will run with (None: they do not bind, so it runs
        nothing); ``ask(why, reason, those)`` builds the question; ``waits``: someone else
        answers it (wait for them). An "always" holds for one tool and one reason to ask:
        allowing every code_run under ``always`` allows none of its escalations."""
        escalate, reason = take_escalation(tool, args)
        view = bind(args)
        if view is None:
            return Verdict()
        escalate = escalate and self.may_escalate
        why = self.plan(tool, view, escalate, confining, reply)
        if why is None:
            return Verdict()
        if why == "inline_eval" and self.mode == "never":
            return Verdict(refusal(INLINE_REFUSED.format(sandbox=sandbox)))
        key = (tool, why)
        if key in self.granted:
            yield decision_event(tool, call_id, ALWAYS)
            return Verdict(escalated=escalate)
        request = ask(why, reason, view)
        decision = yield from self._ask(request, abort, waits)
        if decision == ALWAYS:
            self.granted.add(key)
        if decision in (YES, ALWAYS):
            return Verdict(escalated=escalate)
        return Verdict(refusal(self._refused(request, decision)))

    def _ask(self, request: ApprovalRequest, abort: threading.Event,
             waits: bool) -> Generator[dict, None, str]:
        self.pending = request
        try:
            yield {"type": "approval_request", "request": request}
            if abort.is_set():
                request.cancel()
            elif not request.answered and not waits:
                request._settle(UNANSWERED)
            decision = request.wait()
        finally:
            self.pending = None
        if decision != ABORTED:
            yield decision_event(request.tool, request.call_id, decision)
        return decision

    def _refused(self, request: ApprovalRequest, decision: str) -> str:
        if decision == ABORTED:
            return STOPPED
        if decision == UNANSWERED:
            return NOT_ASKED.format(mode=self.mode)
        return f"{DECLINED}: {request.message}" if request.message else DECLINED


def with_escalation(schema: list[dict], escalate_text: str, reason_text: str) -> list[dict]:
    """Add on-request's ``escalate`` and ``reason`` to code_run, file_write and file_patch
    in a tool list (built fresh for the request)."""
    for tool in schema:
        fn = tool["function"]
        if fn["name"] in ESCALATING:
            props = fn["parameters"]["properties"]
            props["escalate"] = {"type": "boolean", "description": escalate_text}
            props["reason"] = {"type": "string", "description": reason_text}
    return schema


def refusal(msg: str) -> dict:
    return {"status": "declined", "msg": msg}


def decision_event(tool: str, call_id: str, decision: str) -> dict:
    return {"type": "approval", "tool": tool, "id": call_id, "decision": decision}


# ---- the question -------------------------------------------------------------------------
def question(tool: str, view: dict, call_id: str, why: str, reason: str = "", *, reply: str,
             base: Path, target: Path | None, js: Callable[[str], str],
             redact: Callable[[str], str]) -> ApprovalRequest:
    """The question for one call: what it would run or change, read from ``view`` (the
    arguments the tool will run with) and the ``reply`` it falls back to as the tool does,
    secrets masked (before the text is capped). ``base``: the working folder its
    ``{{file:…}}`` references are read from; ``target``: the real path a file edit lands
    on; ``js`` finds a web_execute_js call's script."""
    request = _question(tool, view, call_id, why, reply, base, target, js)
    request.reason = reason
    for name in ("text", "reason", "old_text", "new_text", "path"):
        value = getattr(request, name)
        if value:
            setattr(request, name, redact(value))
    request.text = _cap(request.text)
    return request


def _question(tool: str, view: dict, call_id: str, why: str, reply: str, base: Path,
              target: Path | None, js: Callable[[str], str]) -> ApprovalRequest:
    if tool == "code_run":
        kind = "inline_eval" if is_inline(tool, view) else "script"
        return ApprovalRequest(tool, call_id, kind, code_of(view, reply),
                               str(view.get("type", "python")), why=why)
    if tool in ("file_write", "file_patch") and target is not None:
        return _edit_question(tool, view, call_id, why, reply, base, target)
    if tool == "web_execute_js":
        try:
            script = js(str(view.get("script") or ""))
        except ToolError as e:
            script = f"(the script cannot be read: {e})"
        return ApprovalRequest(tool, call_id, "js", script, "javascript", why=why)
    shown = {k: v for k, v in view.items() if not k.startswith("_")}
    text = json.dumps(shown, ensure_ascii=False, indent=1, default=str)
    return ApprovalRequest(tool, call_id, "call", text, "json", why=why)


def _edit_question(tool: str, view: dict, call_id: str, why: str, reply: str, base: Path,
                   target: Path) -> ApprovalRequest:
    old = _old_text(target)
    try:
        old, new = _edit(tool, view, reply, base, old)
    except ToolError as e:  # the tool fails the same way: nothing is written
        return ApprovalRequest(tool, call_id, "diff", f"(the new text cannot be made: {e})",
                               "diff", why=why, path=str(target), old_text=old)
    diff = "".join(difflib.unified_diff((old or "").splitlines(keepends=True),
                                        new.splitlines(keepends=True),
                                        f"a/{view.get('path')}", f"b/{view.get('path')}"))
    return ApprovalRequest(tool, call_id, "diff", diff or "(no change)", "diff", why=why,
                           path=str(target), old_text=old, new_text=new)


def _edit(tool: str, view: dict, reply: str, base: Path, old: str | None
          ) -> tuple[str | None, str]:
    """(the text diffed against, the new text) of a file_write or file_patch call, with
    the content and ``{{file:…}}`` references the tool would use."""
    from tools import files

    if tool == "file_write":
        body = files.expand_file_refs(files.write_content(view.get("content"), reply) or "",
                                      base)
        before = old or ""
        return old, {"append": before + body, "prepend": body + before}.get(
            str(view.get("mode")), body)
    patch_old = str(view.get("old_content", ""))
    patch_new = files.expand_file_refs(str(view.get("new_content", "")), base)
    if old is not None and patch_old and old.count(patch_old) == 1:
        return old, old.replace(patch_old, patch_new)
    return patch_old, patch_new


def _old_text(path: Path) -> str | None:
    """A file's text to diff against: None when it is missing, not a regular file, or too
    big to diff."""
    try:
        with open_regular(path) as f:
            raw = f.read(DIFF_SOURCE_BYTES + 1)
    except (OSError, ToolError):
        return None
    if len(raw) > DIFF_SOURCE_BYTES:
        return None
    return raw.decode("utf-8", errors="replace")


def _cap(text: str) -> str:
    if len(text) <= QUESTION_CHARS:
        return text
    return text[:QUESTION_CHARS] + f"\n… ({len(text) - QUESTION_CHARS} more characters)"
