"""One task's approval and sandbox (SPEC §11) as its tools meet them: the gate before every
call, the file tools' write rule and code_run's confinement.

    guard = Guard(sandbox, approvals, workspace, memory_dir, resolve=…, env=…, redact=…,
                  abort=…)
    refusal = yield from guard.gate(tool, args, call_id, reply, waits, bind)  # None: it runs
    files.file_write(path, …, check=guard.check_write)  # ToolError outside, inside the lock
    result = yield from guard.run_code(code, "python", 60, run_dir, budget)

The modes are the session's objects (``/sandbox`` and ``/approval`` change them in place);
a call approved to leave the sandbox (``escalate``) is ``escalated`` until the next gate,
and a file edit the person was shown writes only the real path they were shown.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable, Generator

from llmcore.secrets import EnvPolicy, Redactor
from tools import ToolError
from tools.approval import ApprovalRequest, Approvals, question
from tools.code_run import code_run
from tools.sandbox import Sandbox, run_temp_dir
from tools.web.execute import resolve_script


class Guard:
    """The sandbox and approval of one task, working in ``workspace`` (``resolve`` makes a
    tool's path absolute there) with the home's ``memory`` folder."""

    def __init__(self, sandbox: Sandbox, approvals: Approvals, workspace: Path, memory: Path, *,
                 resolve: Callable[[str], Path], env: EnvPolicy, redact: Redactor,
                 abort: threading.Event) -> None:
        self.sandbox = sandbox
        self.approvals = approvals
        self.workspace = workspace
        self.memory = memory
        self.resolve = resolve
        self.env = env
        self.redact = redact
        self.abort = abort
        self.escalated = False  # the call running now was approved to run outside the sandbox
        self.shown: Path | None = None  # the real path the person approved it to write

    def gate(self, tool: str, args: dict, call_id: str, reply: str, waits: bool,
             bind: Callable[[dict], dict | None] = dict) -> Generator[dict, None, dict | None]:
        """Before every call: ask the person when the approval mode says so. Returns the
        refusal that answers the call, or None to run it. ``waits``: someone else answers
        the question (the task runs on the agent's worker); ``bind``: the arguments the
        tool will run with (``tools.spec.call_args``)."""
        self.shown = None

        def ask(why: str, reason: str, view: dict) -> ApprovalRequest:
            target = None
            if tool in ("file_write", "file_patch"):
                target = Path(os.path.realpath(self.resolve(str(view.get("path") or ""))))
            self.shown = target
            return question(
                tool, view, call_id, why, reason, reply=reply, base=self.workspace,
                target=target, js=lambda script: resolve_script(script, reply, self.workspace),
                redact=self.redact)

        verdict = yield from self.approvals.gate(
            tool, args, call_id, confining=self.sandbox.confining, sandbox=self.sandbox.mode,
            ask=ask, reply=reply, abort=self.abort, waits=waits, bind=bind)
        self.escalated = verdict.escalated
        return verdict.outcome

    def places(self, create: bool = True) -> tuple[Path, ...]:
        """Where this task may write (the sandbox's writable folders)."""
        return self.sandbox.places(self.workspace, self.memory, create)

    def check_write(self, path: Path) -> None:
        """The file tools' rule, given the real path a write lands on (from its open folder,
        inside its lock): refuse (ToolError) a write the sandbox does not allow, or one that
        lands elsewhere than the path the person approved. Also called early, with the
        path as named, to refuse before anything is read."""
        real = Path(os.path.realpath(path))
        if self.shown is not None and real != self.shown:
            raise ToolError(f"refused: the user approved writing {self.shown}, but the path "
                            f"now leads to {real} (a folder on the way changed since); "
                            "nothing was written")
        if not self.escalated:
            self.sandbox.check_write(path, self.places(create=False),
                                     self.approvals.may_escalate)

    def run_code(self, code: str, kind: str, timeout: int, run_dir: Path,
                 budget: int) -> Generator[str, None, dict]:
        """code_run's child, confined by the sandbox unless this call was escalated."""
        places = self.places()
        jail = None if self.escalated else self.sandbox.confinement(places)
        env = self.env.child_env()
        result = yield from code_run(code, kind, timeout, cwd=run_dir, abort=self.abort,
                                     max_output=budget, confine=jail,
                                     env=jail.env(env, run_temp_dir()) if jail else env,
                                     import_path=[self.memory], redact=self.redact)
        if jail is not None:
            self.sandbox.annotate(result, jail, places, code, self.approvals.may_escalate)
        return result
