"""The sandbox and approval pair of a run (SPEC §11), and the terminal's answer to an
approval question.

The pair: ``--yolo`` (= full-access, never), else ``--sandbox``/``--approval``, else what a
resumed session had, else config ``agent:``, else workspace-write and — where a person can
answer (stdin and stderr are terminals) — on-request, elsewhere never.

A question (``tools.approval.ApprovalRequest``) is asked on stderr and answered with a
line from stdin: ``y`` (this call), ``a`` (this tool for the rest of the session) or ``n``,
then a second line, the message the model receives (Enter for none). Ctrl-C there raises
KeyboardInterrupt in the front end, which aborts the task.
"""

from __future__ import annotations

import sys
from typing import IO, Any

from llmcore.base import ConfigError
from tools.approval import ALWAYS, NO, YES, ApprovalRequest
from tools.sandbox import DEFAULT_MODE, Sandbox, Settings

from .terminal import inert

ANSWERS = {"y": YES, "yes": YES, "a": ALWAYS, "always": ALWAYS, "n": NO, "no": NO}
ASK_PROMPT = "allow? [y/a/n] "
MESSAGE_PROMPT = "message for the model (Enter for none): "
SHOWN_LINES = 60  # lines of a script or diff shown with the question; the rest is counted
WHAT = {"script": "run this {language} code", "inline_eval": "evaluate this python inside ga",
        "diff": "make this change to {path}", "js": "run this JavaScript in the browser",
        "call": "call it with these arguments"}
WHY = {"escalate": " outside the sandbox", "inline_eval": " (no sandbox reaches it)",
       "always": ""}


def person_can_answer(args: Any) -> bool:
    """Whether this run can ask a person: stdin and stderr are terminals, and it is not a
    file-driven or detached run."""
    if getattr(args, "task_dir", None) or getattr(args, "bg", False):
        return False
    return sys.stdin.isatty() and sys.stderr.isatty()


def permissions(args: Any, agent_cfg: dict, cfg_path: str | None, state: Any = None,
                can_ask: bool = False) -> tuple[Sandbox, str]:
    """The sandbox and approval mode this run starts with (ConfigError for a conflict, or
    an ``always`` nobody can answer)."""
    settings = Settings.from_dict(agent_cfg, cfg_path)
    if getattr(args, "yolo", False):
        if getattr(args, "sandbox", None) or getattr(args, "approval", None):
            raise ConfigError(None, "--yolo", "it already means --sandbox full-access "
                              "--approval never; give --yolo or those, not both")
        return Sandbox("full-access", settings.writable_roots, settings.network), "never"
    mode = (getattr(args, "sandbox", None) or getattr(state, "sandbox", "")
            or settings.sandbox or DEFAULT_MODE)
    flag = getattr(args, "approval", None)
    asked = flag or getattr(state, "approval", "") or settings.approval
    approval = asked or ("on-request" if can_ask else "never")
    if approval != "never" and not can_ask:
        if approval == "always":
            where = "--approval" if flag else ("--resume" if state and state.approval
                                               else "agent.approval")
            raise ConfigError(cfg_path if where == "agent.approval" else None, where,
                              "approval always needs a person to answer, and this run has "
                              "no terminal (stdin and stderr); use --approval never, or run "
                              "ga at a terminal")
        approval = "never"  # on-request with nobody to ask: nothing is asked
    return Sandbox(mode, settings.writable_roots, settings.network), approval


def describe(agent: Any) -> str:
    """``sandbox workspace-write (landlock), approval on-request``."""
    return f"sandbox {agent.sandbox.describe()}, approval {agent.approvals.mode}"


def mechanism_warning(sandbox: Sandbox) -> str | None:
    """The one warning line when the mode confines but the machine cannot (fully)."""
    return sandbox.mechanism()[1] if sandbox.confining else None


def question_line(request: ApprovalRequest) -> str:
    """``code_run wants to run this bash code outside the sandbox``."""
    what = WHAT.get(request.kind, WHAT["call"]).format(language=request.language or "",
                                                       path=request.path or "")
    return f"{request.tool} wants to {what}{WHY.get(request.why, '')}"


def render_question(request: ApprovalRequest) -> str:
    """The question as lines for a terminal (without the prompt)."""
    # the path (and the tool's name) are the model's: shown inert like its code
    lines = [inert(f"ga: approval: {question_line(request)}")]
    if request.reason:
        lines.append(f"  reason: {inert(request.reason)}")
    body = inert(request.text).splitlines() or ["(empty)"]
    lines += [f"  │ {line}" for line in body[:SHOWN_LINES]]
    if len(body) > SHOWN_LINES:
        lines.append(f"  │ … {len(body) - SHOWN_LINES} more lines")
    return "\n".join(lines)


def ask_terminal(request: ApprovalRequest, err: IO[str] | None = None,
                 inp: IO[str] | None = None) -> None:
    """Ask on the terminal and answer ``request``; end of input answers no."""
    err = err or sys.stderr
    inp = inp or sys.stdin
    err.write(render_question(request) + "\n")
    while True:
        err.write(ASK_PROMPT)
        err.flush()
        line = inp.readline()
        decision = ANSWERS.get(line.strip().lower()) if line else NO
        if decision is not None:
            break
        err.write("  answer y (yes, this call), a (always, this tool for the session) or "
                  "n (no)\n")
    message = ""
    if decision == NO and line:
        err.write(MESSAGE_PROMPT)
        err.flush()
        message = inp.readline().strip()
    request.answer(decision, message)
