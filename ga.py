"""GenericAgent: the handler (tools + working memory), the session object and the CLI.

This is the composition root: the only module that imports the loop, llmcore, tools
and memory together.
"""

from __future__ import annotations

import functools
import json
import os
import queue
import sys
import threading
import time
import weakref
from collections import Counter
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Generator, Literal

from agent_loop import (
    MAX_CALLS_PER_TURN,
    BaseHandler,
    Hooks,
    StepOutcome,
    agent_runner_loop,
    answer_text,
    error_outcome,
    json_default,
    log,
)
from llmcore import images as pictures
from llmcore.base import LLMError
from llmcore.events import EventStream
from llmcore.logs import Failures
from llmcore.secrets import EnvPolicy, Redactor
from memory.archive import Transcript, archive_to_l4, new_session_id
from memory.prompt import (
    build_system_prompt,
    insight_reminder,
    long_term_update_prompt,
    memory_read_tip,
)
from memory.store import MemoryStore
from memory.working import (
    OpenQuestion,
    Settings,
    call_signature,
    claims_completion,
    drop_rendered,
    fold_earlier,
    has_verification,
    is_code_block_only,
    kept_open,
    plan_open_items,
    repeat_run,
    squeeze,
    turn_summary,
)
from tools import clip, files, web
from tools.approval import Approvals, with_escalation
from tools.code_run import code_to_run
from tools.fsutil import atomic_write, take_text
from tools.guard import Guard
from tools.inline_eval import run_inline
from tools.sandbox import Sandbox
from tools.spec import call_args, tool, tools_schema
from tools.texts import TOOL_TEXT_ZH, Texts, lang_from_env
from tools.web import execute, scan
from tools.web.browser import Browser

CODE_OUTPUT_CHARS = 10_000
READ_OUTPUT_CHARS = 15_000
USER_TOOLS = ("ask_user", "start_long_term_update")
STREAMED = {"text": "delta", "thinking": "delta", "progress": "text"}  # event type -> its text


class GenericAgentHandler(BaseHandler):
    """The agent's tools (``do_*``) and its working memory."""

    def __init__(self, parent: GenericAgent, cwd: str | Path = ".") -> None:
        super().__init__()
        self.parent = parent
        self.cwd = Path(cwd).absolute()
        self.t: Texts = parent.texts
        self.s: Settings = parent.settings
        self.memory = parent.memory
        self.hooks = parent.hooks
        self.working: dict[str, Any] = {}
        self.history_info: list[str] = parent.history_info
        self.abort_event = threading.Event()
        self._bad_replies: list[str] = []  # why the replies in the current run were unusable
        self._checkpointed = False
        self._signatures: list[str | None] = []
        self.guard = Guard(parent.sandbox, parent.approvals, self.cwd, self.memory.dir,
                           resolve=self.resolve, env=parent.env_policy, redact=parent.redactor,
                           abort=self.abort_event)  # the task's sandbox and approval

    @property
    def session_id(self) -> str:
        """The session the task runs in (its journal's id, when one is attached)."""
        return self.parent.session_id

    def unknown_tool(self, tool_name: str) -> str:
        why = self.parent.unavailable.get(tool_name)
        return f"unknown tool {tool_name}" + (f" (not available: {why})" if why else "")

    def __getattr__(self, name: str) -> Any:
        """``do_mcp__SERVER__TOOL``: a tool of one of the session's MCP servers (tools/mcp),
        dispatched like every other tool."""
        hub = self.parent.mcp if name.startswith("do_mcp__") else None
        if hub is None or hub.tool(name[3:]) is None:
            raise AttributeError(name)
        return functools.partial(self._mcp_call, name[3:])

    def _mcp_call(self, name: str, args: dict, response: Any = None):
        if self.abort_event.is_set():  # aborted before this call began: it is not made
            return error_outcome(f"[Error] {name} was cancelled")
        vision = getattr(self.parent.llmclient, "vision", True)
        data, images = yield from self.parent.mcp.run(name, args, vision)
        return StepOutcome(data, next_prompt=self._anchor(args.get("_index", 0)), images=images)

    def resolve(self, path: str) -> Path:
        return Path(os.path.abspath(os.path.join(self.cwd, os.path.expanduser(path))))

    def gate(self, tool_name: str, args: dict, response: Any, call_id: str = ""):
        """Before every tool: ask the person when the approval mode says so (SPEC §11)."""
        reply = getattr(response, "content", "") or ""
        method = getattr(self, f"do_{tool_name}", None)
        refused = yield from self.guard.gate(tool_name, args, call_id, reply,
                                             waits=self.parent.events.sink is not None,
                                             bind=functools.partial(call_args, method))
        return None if refused is None else StepOutcome(refused, "\n")

    def _anchor(self, index: int) -> str:
        return self._get_anchor_prompt(skip=index > 0)

    # ---- tools -------------------------------------------------------------------------
    @tool(aliases={"code": "script"})
    def do_code_run(self, script: str = "",
                    type: Literal["python", "bash", "powershell"] = "python",
                    timeout: int = 60, cwd: str = "", inline_eval: bool = False, *,
                    response: Any = None, _index: int = 0, _tool_num: int = 1):
        """Run python (as a temp file) or bash. Keep bulk data in files, not in the code.
        Background processes end with the agent; `setsid CMD &` keeps a service running.

        Args:
            script: The code; if omitted, your reply's last ```python/```bash block runs.
            type: Language.
            timeout: Seconds before its process group is killed (max 600).
            cwd: Folder to run in, relative to the working directory.
            inline_eval: Run python inside the agent (`handler`, `agent` in scope); returns
                what it prints. Start no processes from it.
        """
        code = code_to_run(script, type, getattr(response, "content", "") or "")
        if not code:
            return StepOutcome({"status": "error", "msg": self.t("code_missing", type=type)},
                               next_prompt="\n")
        run_dir = self.resolve(cwd or ".")
        budget = CODE_OUTPUT_CHARS // max(_tool_num, 1)
        shown = squeeze(code, 60, self.parent.redactor)
        if inline_eval and type == "python":
            yield f"[Action] Evaluating python in-process: {shown}\n"
            result = self._inline_eval(code, run_dir, timeout, budget)
        else:
            yield f"[Action] Running {type} in {run_dir.name or run_dir}: {shown}\n"
            result = yield from self.guard.run_code(code, type, timeout, run_dir, budget)
        return StepOutcome(result, next_prompt=self._anchor(_index))

    def _inline_eval(self, code: str, run_dir: Path, timeout: int, budget: int) -> dict:
        result = run_inline(code, {"handler": self, "agent": self.parent}, run_dir, timeout,
                            self.abort_event, budget, self.parent.redactor)
        if result["status"] in ("timeout", "aborted"):  # the code was left running
            seconds = f"{result.get('timeout', 0):g}"
            result["msg"] = self.t(f"inline_{result['status']}", n=seconds)
        return result

    @tool
    def do_file_read(self, path: str, start: int = 1, count: int = 200,
                     keyword: str | None = None, show_linenos: bool = True, *,
                     _index: int = 0, _tool_num: int = 1):
        """Read a text file with line numbers, or an image file (PNG, JPEG, WebP, GIF) as
        the image.

        Args:
            path: File, relative to the working directory.
            start: First line (1-based).
            count: Lines to show.
            keyword: Show the lines around its first match (any case) instead.
            show_linenos: Number the lines.
        """
        p = self.resolve(path)
        yield f"[Action] Reading file: {path}\n"
        if files.is_image_file(p):
            return self._read_image(p, _index)
        budget = READ_OUTPUT_CHARS // max(_tool_num, 1)
        text = files.file_read(p, start=start, count=count, keyword=keyword,
                               show_linenos=show_linenos, max_chars=budget, base=self.cwd,
                               redact=self.parent.redactor)
        text = clip(text, budget)
        next_prompt = self._anchor(_index)
        if self.memory.is_memory_file(p):
            self.memory.record_access(p)
            next_prompt += "\n" + memory_read_tip(self.t.lang)
        return StepOutcome(text, next_prompt=next_prompt)

    def _read_image(self, p: Path, index: int) -> StepOutcome:
        """The image itself for a model with vision, else a line saying what it is."""
        facts, picture = files.read_image(p, getattr(self.parent.llmclient, "vision", True))
        if picture is None:
            return StepOutcome(self.t("image_text_only", **facts), next_prompt=self._anchor(index))
        block = picture.block()
        return StepOutcome(self.t("image_shown", sent=pictures.describe(block), **facts),
                           next_prompt=self._anchor(index), images=[block])

    @tool
    def do_file_write(self, path: str, content: str | None = None,
                      mode: Literal["overwrite", "append", "prepend"] = "overwrite", *,
                      response: Any = None, _index: int = 0):
        """Write a whole file (file_patch for small edits). The text: `content`, else your
        reply's <file_content>...</file_content> block.

        Args:
            path: File, relative to the working directory.
            content: The text; {{file:path:start:end}} inserts those lines of a file.
            mode: Where the text goes.
        """
        files.refuse_folder_path(path)
        p = self.resolve(path)
        self.guard.check_write(p)  # refused before anything is read; the write checks again
        action = "Create" if mode == "overwrite" and not p.exists() else mode.capitalize()
        yield f"[Action] {action} file: {path}\n"
        body = files.write_content(content, getattr(response, "content", "") or "")
        if body is None:
            return StepOutcome({"status": "error", "msg": self.t("content_missing")},
                               next_prompt="\n")
        result = files.file_write(p, files.expand_file_refs(body, self.cwd), mode,
                                  check=self.guard.check_write, abort=self.abort_event)
        return StepOutcome(result, next_prompt=self._anchor(_index))

    @tool
    def do_file_patch(self, path: str, old_content: str, new_content: str, *, _index: int = 0):
        """Replace old_content, which must occur exactly once in the file, with new_content.

        Args:
            path: File, relative to the working directory.
            old_content: Exact text to replace.
            new_content: Replacement; {{file:path:start:end}} inserts those lines of a file.
        """
        p = self.resolve(path)
        self.guard.check_write(p)  # refused before anything is read; the write checks again
        yield f"[Action] Patching file: {path}\n"
        result = files.file_patch(p, old_content, files.expand_file_refs(new_content, self.cwd),
                                  abort=self.abort_event, base=self.cwd,
                                  check=self.guard.check_write)
        return StepOutcome(result, next_prompt=self._anchor(_index))

    @tool(aliases={"tab_id": "switch_tab_id"})
    def do_web_scan(self, tabs_only: bool = False, switch_tab_id: str | None = None,
                    text_only: bool = False, viewport: bool = False,
                    screenshot: bool = False, *, response: Any = None, _index: int = 0):
        """See the browser: its tabs and the current page as text, interactive elements
        numbered [N] (ga(N) in web_execute_js).

        Args:
            tabs_only: List the tabs only (saves tokens).
            switch_tab_id: Switch to this tab first.
            text_only: Plain text, no [N] markers.
            viewport: Only what is around the visible screen.
            screenshot: Also return an image of the visible screen.
        """
        yield f"[Action] Scanning the browser{' tabs' if tabs_only else ' page'}\n"
        see = screenshot and getattr(self.parent.llmclient, "vision", True)
        result, shot = scan.scan_page(
            self.parent.browser, tabs_only, switch_tab_id, text_only, viewport, screenshot=see,
            budget=web.reply_budget(web.SCAN_CHARS, self.parent.llmclient, response),
            abort=self.abort_event)
        images = [shot.block()] if shot else []
        if images:
            result += "\n" + self.t("screenshot_shown", sent=pictures.describe(images[0]),
                                    width=shot.original[0], height=shot.original[1])
        elif screenshot and not see and isinstance(result, str):
            result += "\n" + self.t("screenshot_text_only")
        return StepOutcome(result, next_prompt=self._anchor(_index), images=images)

    @tool(aliases={"tab_id": "switch_tab_id", "code": "script"})
    def do_web_execute_js(self, script: str = "", switch_tab_id: str | None = None,
                          save_to_file: str | None = None, no_monitor: bool = False,
                          timeout: int = execute.DEFAULT_TIMEOUT, *,
                          response: Any = None, _index: int = 0):
        """Run JavaScript in the current page: navigate, click, fill, read. Top-level await
        works; returns the last value (or a return) with the DOM changes, navigation, new tabs
        and dialogs it caused. ga(N) is element [N] of the last web_scan. After a
        navigation, act on the new page in the next call.

        Args:
            script: JS code or a .js path; if omitted, your reply's last ```javascript block.
            switch_tab_id: Run in this tab (switches to it).
            save_to_file: Write the whole value to this file; return a preview.
            no_monitor: Do not wait for DOM changes (faster).
            timeout: Seconds before the script is stopped.
        """
        code = execute.resolve_script(script, getattr(response, "content", "") or "", self.cwd)
        if not code.strip():
            return StepOutcome({"status": "failed", "error": self.t("js_missing")},
                               next_prompt="\n")
        save_to = self.resolve(save_to_file) if save_to_file else None
        if save_to is not None:  # refused before the script runs; the save checks again
            self.guard.check_write(save_to)
        shown = squeeze(code, 60, self.parent.redactor)
        yield f"[Action] Running JavaScript in the browser: {shown}\n"
        result = execute.web_execute_js(
            self.parent.browser, code, switch_tab_id, no_monitor, timeout, self.abort_event,
            budget=web.reply_budget(web.EXEC_CHARS, self.parent.llmclient, response),
            save_to=save_to, check=self.guard.check_write)
        return StepOutcome(result, next_prompt=self._anchor(_index))

    @tool
    def do_update_working_checkpoint(self, key_info: str | None = None,
                                     related_sop: str | None = None, *, _index: int = 0):
        """Keep facts for the rest of the task; shown to you every turn. Call it when new,
        non-obvious key facts appear.

        Args:
            key_info: Key facts, targets and constraints ("" clears).
            related_sop: Path of the SOP this task follows.
        """
        changed = []
        for key, value in (("key_info", key_info), ("related_sop", related_sop)):
            if value is not None:
                self.working[key] = value
                changed.append(key)
        self.working["passed_sessions"] = 0
        self.working["passed_tasks"] = 0
        self._checkpointed = True
        yield (self.t("checkpoint_info", what=" and ".join(changed)) if changed
               else self.t("checkpoint_nothing")) + "\n"
        next_prompt = self._anchor(_index)
        if self.current_turn <= 1:
            next_prompt += "\n" + self.t("checkpoint_first_tip")
        return StepOutcome({"result": "working key_info updated"}, next_prompt=next_prompt)

    @tool
    def do_ask_user(self, question: str, candidates: list[str] | None = None):
        """Ask the user and stop until they answer.

        Args:
            question: The question.
            candidates: Answers to pick from.
        """
        data = {"question": question, "candidates": candidates or []}
        return StepOutcome({"status": "INTERRUPT", "intent": "HUMAN_INTERVENTION", "data": data},
                           next_prompt="", should_exit=True)

    @tool
    def do_start_long_term_update(self, *, _index: int = 0):
        """After a task, distil verified, durable facts into long-term memory."""
        ok, text = long_term_update_prompt(self.memory, self.current_turn, self.t.lang)
        if not ok:
            return StepOutcome({"status": "refused", "msg": text}, next_prompt="\n")
        yield "[Info] Start distilling verified facts into long-term memory.\n"
        return StepOutcome(text, next_prompt=self._anchor(_index))

    @tool(hidden=True)
    def do_no_tool(self, *, response: Any = None):
        """Runs when the model called no tool."""
        content = getattr(response, "content", "") or ""
        thinking = getattr(response, "thinking", "") or ""
        stop = getattr(response, "stop_reason", "")
        if stop == "aborted":
            return StepOutcome(content, next_prompt=None)
        if stop == "max_tokens":
            return (yield from self._retry_or_fail("max_tokens", "The reply was cut at max_tokens"))
        if stop == "error":
            return (yield from self._retry_or_fail("incomplete", "The reply broke off mid-stream"))
        if not content.strip() and not thinking.strip():
            return (yield from self._retry_or_fail("empty", "The model returned an empty reply"))
        self._bad_replies.clear()
        plan = self.working.get("in_plan_mode")
        if plan and claims_completion(content) and not has_verification(content):
            yield "[Warn] Completion claim in plan mode without verification refused.\n"
            return StepOutcome({}, next_prompt=self.t("plan_verify_refused"))
        if is_code_block_only(content):
            yield "[Info] Reply is one big code block and no tool call; asking the model.\n"
            return StepOutcome({}, next_prompt=self.t("code_block_only"))
        if plan and plan_open_items(plan) == 0:
            self.working.pop("in_plan_mode", None)
            yield self.t("plan_done", plan=plan) + "\n"
        return StepOutcome(content, next_prompt=None)

    def _retry_or_fail(self, reason: str, what: str) -> Generator[str, None, StepOutcome]:
        """Ask again after an unusable reply (``reason``: empty | incomplete | max_tokens),
        warning ``what`` happened; after ``retry_reply_limit`` in a row, fail saying what the
        replies were (no warning then: the failure says it)."""
        self._bad_replies.append(reason)
        if len(self._bad_replies) < self.s.retry_reply_limit:
            yield f"[Warn] {what}; asking again.\n"
            return StepOutcome({}, next_prompt=self.t(f"{reason}_reply"))
        counts = Counter(self._bad_replies)
        error = "; ".join(self.t(f"{r}_limit", n=n) for r, n in counts.items())
        return StepOutcome({"status": "FAILED", "error": error}, should_exit=True)

    def enter_plan_mode(self, plan_path: str) -> str:
        """Enter plan mode (call it via code_run inline_eval)."""
        self.working["in_plan_mode"] = str(plan_path)
        self.max_turns = max(getattr(self, "max_turns", 0), 100)
        log.info(self.t("plan_entered", plan=plan_path))
        return str(plan_path)

    # ---- working memory ----------------------------------------------------------------
    def _get_anchor_prompt(self, skip: bool = False, *, opening: bool = False) -> str:
        """``opening``: for a task's first message, which names the turn it starts."""
        if skip:
            return "\n"
        h, w, turn = self.history_info, self.s.history_lines, self.current_turn
        out = ["", self.t("anchor_header")]
        if len(h) > w and turn % self.s.earlier_every == 0:
            direct = self.t("agent_line", text=self.t("answered_directly"))
            earlier = fold_earlier(h[:-w], direct, self.s.earlier_max_parts)
            out.append(f"<earlier_context>\n{earlier}\n</earlier_context>")
        if turn % self.s.history_every == 0:
            out.append("<history>\n" + "\n".join(h[-w:]) + "\n</history>")
        out.append(self.t("current_turn", turn=turn + 1 if opening else max(turn, 1)))
        if self.working.get("key_info"):
            out.append(f"<key_info>{self.working['key_info']}</key_info>")
        if self.working.get("related_sop"):
            out.append(self.t("related_sop", sop=self.working["related_sop"]))
        return "\n".join(out) + "\n"

    def _summary(self, response: Any, tool_calls: list[dict]) -> tuple[str, bool]:
        text, tagged = turn_summary(getattr(response, "content", "") or "", tool_calls,
                                    self.t("answered_directly"))
        return squeeze(text, self.s.summary_chars, self.parent.redactor), tagged

    def turn_end_callback(self, response, tool_calls, tool_results, turn, next_prompt,
                          exit_reason) -> str:
        summary, tagged = self._summary(response, tool_calls)
        self.history_info.append(self.t("agent_line", text=summary))
        if self._checkpointed:
            self._checkpointed = False
        else:
            self.working["passed_sessions"] = self.working.get("passed_sessions", 0) + 1
        if exit_reason:
            return next_prompt
        notes: list[str] = []
        if any(c["tool_name"] != "no_tool" for c in tool_calls):
            self._bad_replies.clear()  # "in a row": a turn with a tool call breaks the run
            if not tagged:
                notes.append(self.t("summary_missing"))
        notes += self._reminders(turn)
        notes += self._repeat_guard(tool_calls)
        plan = self.working.get("in_plan_mode")
        if plan and turn >= self.s.plan_hint_after and turn % self.s.plan_hint_every == 0:
            next_prompt = self.t("plan_hint", plan=plan) + "\n\n" + next_prompt
        notes += self._master_injection()
        next_prompt = "\n\n".join([next_prompt.rstrip("\n")] + notes) if notes else next_prompt
        self._call_turn_end_hooks(locals())
        return next_prompt

    def _reminders(self, turn: int) -> list[str]:
        s, out = self.s, []
        passed = self.working.get("passed_sessions", 0)
        if passed >= s.checkpoint_warn_turns and passed % s.checkpoint_warn_turns == 0:
            out.append(self.t("danger_checkpoint", n=passed))
        plan = self.working.get("in_plan_mode")
        if turn % s.ask_user_every == 0 and not plan:
            out.append(self.t("remind_ask_user", turn=turn))
        if turn % s.file_reminder_every == 0:
            out.append(self.t("remind_file", turn=turn))
        if turn % s.insight_every == 0:
            out.append(insight_reminder(self.memory, self.t.lang))
        if plan and turn >= s.plan_limit_turns:
            out.append(self.t("plan_limit", turn=turn))
        return out

    def _repeat_guard(self, tool_calls: list[dict]) -> list[str]:
        self._signatures.append(call_signature(tool_calls))
        run = repeat_run(self._signatures)
        name = next((c["tool_name"] for c in tool_calls if c["tool_name"] != "no_tool"), "")
        if run >= self.s.repeat_stop:
            self.exit_request = {"result": "NO_PROGRESS",
                                 "data": self.t("no_progress_end", name=name, n=run)}
        if run >= self.s.repeat_warn:
            if run < self.s.repeat_stop:
                self.parent.notice(f"{name} was called with the same arguments {run} turns "
                                   f"in a row; the model was told to change approach (the "
                                   f"task stops at {self.s.repeat_stop})")
            return [self.t("no_progress_warn", name=name, n=run)]
        return []

    def _master_injection(self) -> list[str]:
        agent = self.parent
        keyinfo = agent.extrakeyinfo or take_text(agent.task_dir, "_keyinfo")
        intervene = agent.intervene or take_text(agent.task_dir, "_intervene")
        agent.extrakeyinfo = agent.intervene = None
        if keyinfo:
            master = self.t("master", text=keyinfo)
            self.working["key_info"] = self.working.get("key_info", "") + "\n" + master
        return [self.t("master", text=intervene)] if intervene else []

    def _call_turn_end_hooks(self, scope: dict) -> None:
        view = MappingProxyType(dict(scope))
        for name, hook in list(self.parent._turn_end_hooks.items()):
            try:
                hook(view)
            except Exception as e:  # a hook must never break the loop
                log.warning("turn-end hook %s failed: %s: %s", name, type(e).__name__, e)

    def inherit(self, previous: GenericAgentHandler) -> None:
        """Carry working memory over from the previous task of the same agent."""
        for key in ("key_info", "related_sop", "passed_sessions"):
            if key in previous.working:
                self.working[key] = previous.working[key]
        tasks = previous.working.get("passed_tasks", 0) + 1
        self.working["passed_tasks"] = tasks
        if self.working.get("key_info"):  # the line of the task before is replaced
            kept = drop_rendered(self.working["key_info"], self.t.table["stale_key_info"])
            self.working["key_info"] = kept + "\n" + self.t("stale_key_info", n=tasks)


class GenericAgent:
    """A session: one model client, a task queue, working memory carried across tasks."""

    def __init__(self, client: Any, *, home: str | Path, cwd: str | Path = ".",
                 lang: str | None = None, settings: Settings | None = None,
                 max_turns: int = 100, verbose: bool = False,
                 handler_cls: type[GenericAgentHandler] | None = None,
                 disabled_tools: tuple | dict = (), task_dir: str | Path | None = None,
                 hooks: Hooks | None = None, redactor: Redactor | None = None,
                 env_policy: EnvPolicy | None = None,
                 max_calls_per_turn: int = MAX_CALLS_PER_TURN,
                 browser: web.BrowserConfig | None = None, mcp: Any = None,
                 sandbox: Sandbox | None = None, approval: str = "never") -> None:
        self.llmclient = client
        self.home = Path(home)
        self.cwd = Path(cwd).absolute()
        self.settings = settings or Settings()
        self.texts = Texts(lang or lang_from_env(), self.settings.texts)
        config = getattr(client, "config", None)
        self.env_policy = env_policy or EnvPolicy.from_config(config)
        self.redactor = redactor or Redactor.from_config(config, self.env_policy)
        self.max_calls_per_turn = max_calls_per_turn
        self.sandbox = sandbox or Sandbox()  # what the model's actions may write (SPEC §11)
        self.approvals = Approvals(approval)  # when a person is asked first
        self.failures = Failures()
        self.memory = MemoryStore(self.home)  # seeded by the first task, not before
        self._seeded = False
        self.max_turns = max_turns
        self.verbose = verbose
        self.handler_cls = handler_cls or GenericAgentHandler
        self.browser_config = browser or web.BrowserConfig()
        reason = web.unavailable_reason(self.browser_config)
        # tool name -> why it is not offered to the model (the one place that decides)
        self.unavailable: dict[str, str] = dict.fromkeys(web.WEB_TOOLS, reason) if reason else {}
        self.unavailable.update(disabled_tools if isinstance(disabled_tools, dict)
                                else dict.fromkeys(disabled_tools, "turned off for this run"))
        self._browser: Browser | None = None
        self.mcp = mcp  # the session's MCP servers (tools.mcp.hub.McpHub), or None
        self.task_dir = Path(task_dir) if task_dir else None
        self.hooks = hooks or Hooks()
        self.history_info: list[str] = []
        self.handler: GenericAgentHandler | None = None
        # what an open ask_user question keeps for its answer: {call, turn, results}
        self.open_turn: dict[str, Any] = {}
        self.extrakeyinfo: str | None = None
        self.intervene: str | None = None
        self._turn_end_hooks: dict[str, Any] = {}
        self.session_id = new_session_id()  # a journal, when attached, gives its own
        self.transcript = Transcript()  # what L4 keeps of the session (a new one on restore)
        self.events = EventStream(self.redactor, STREAMED, self.failures,
                                  record=lambda event: self.transcript.record(event))
        self.tasks: queue.Queue = queue.Queue()

    @property
    def lang(self) -> str:
        return self.texts.lang

    @property
    def disabled_tools(self) -> tuple:
        return tuple(self.unavailable)

    @property
    def listeners(self) -> list[Callable[[dict], Any]]:
        """Called with every event of every task, masked (the journal, a budget)."""
        return self.events.listeners

    def tools_schema(self) -> list[dict]:
        """The tools offered to the model now: built-in and plugin tools, then MCP servers'."""
        tools = self._task_tools()
        return tools() if callable(tools) else tools

    def _task_tools(self) -> list[dict] | Callable[[], list[dict]]:
        """A task's tool list, built once; with MCP servers a function adding their tools as
        they are at each request (a ``tools/list_changed`` refreshes them). Under on-request
        approval the model may ask to leave the sandbox (``escalate``)."""
        builtin = tools_schema(self.handler_cls, self.lang, self.disabled_tools, TOOL_TEXT_ZH)
        if self.approvals.may_escalate:
            with_escalation(builtin, self.texts("param_escalate"), self.texts("param_reason"))
        if self.mcp is None:
            return builtin
        return lambda: builtin + self.mcp.schemas()

    @property
    def browser(self) -> Browser:
        """The web tools' browser: started (or attached) at the first web call."""
        if self._browser is None:
            self._browser = Browser(self.browser_config, self.env_policy, self.redactor)
            weakref.finalize(self, self._browser.close)  # an agent dropped unclosed
        return self._browser

    def close(self) -> None:
        """Release what the agent holds: a launched browser ends, an attached one is left;
        MCP servers end."""
        if self._browser is not None:
            self._browser.close()
        if self.mcp is not None:
            self.mcp.close()

    def system_prompt(self) -> str:
        """Role, date, memory structure and L1; a profile's extra_sys_prompt is added by
        the provider session, so it follows /model switches and failover."""
        if not self._seeded:  # the home's memory is created by the first use, not by reads
            self.failures.attempt("seeding the memory folder", self.memory.seed, self.texts.lang)
            self._seeded = True
        return build_system_prompt(self.memory, self.lang)

    def put_task(self, query: str, source: str = "user", images: list | None = None) -> queue.Queue:
        """Queue a task; its events arrive on the returned queue, ending with ``task_end``.
        ``images`` (paths or bytes) are checked now: ``ConfigError`` before anything is queued."""
        blocks = pictures.for_model(images, self.llmclient)
        out: queue.Queue = queue.Queue()
        self.tasks.put((query, source, blocks, out))
        return out

    def run(self) -> None:
        """Worker: run queued tasks one by one until ``None`` is queued."""
        while True:
            item = self.tasks.get()
            if item is None:
                return
            query, source, images, out = item
            self.events.sink = out.put
            try:
                for event in self.run_task(query, source, images):
                    out.put(event)
            except BaseException as e:  # the worker's edge: a caller must always get a task_end
                log.error("task crashed: %s: %s", type(e).__name__, e, exc_info=True)
                turns = getattr(self.handler, "current_turn", 0)
                end = failed_event(f"{type(e).__name__}: {e}", turns)
                for event in self.events.emit(self._closing(end)):
                    out.put(event)
            finally:
                self.events.sink = None

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="ga-worker", daemon=True)
        thread.start()
        return thread

    def abort(self, reason: str | None = None) -> None:
        """Stop the running task: cut the model stream and kill running code. ``reason``
        (``terminated (SIGTERM)`` …) goes into the task's end; the default is an interrupt."""
        if self.handler is not None:
            self.handler.abort_event.set()
            self.handler.exit_request = {"result": "ABORTED", "data": None, "reason": reason}
        self.approvals.cancel()  # a question being asked is not waited for
        abort = getattr(self.llmclient, "abort", None)
        if abort:
            abort()
        if self.mcp is not None:
            self.mcp.cancel_calls()

    def restore(self, history: list | None = None, history_info: list | None = None,
                working: dict | None = None, open_turn: dict | None = None) -> None:
        """Continue a saved conversation: provider history, turn summaries, working memory
        and what an open question keeps for its answer."""
        self.llmclient.history = list(history or [])
        self.history_info[:] = list(history_info or [])
        self.open_turn = dict(open_turn or {})
        self.transcript = Transcript(self.history_info)
        self.handler = None
        if working:
            self.handler = self.handler_cls(self, self.cwd)
            self.handler.working = dict(working)

    def snapshot(self) -> dict:
        """The conversation as plain data; ``restore(**agent.snapshot())`` brings it back."""
        working = dict(self.handler.working) if self.handler is not None else {}
        return {"history": list(getattr(self.llmclient, "history", None) or []),
                "history_info": list(self.history_info), "working": working,
                "open_turn": dict(self.open_turn)}

    def _closing(self, end: dict) -> dict:
        """A ``task_end`` event with the session id and, when priced, the task's cost."""
        return self.events.priced(dict(end, session_id=self.session_id))

    def _first_message(self, query: str) -> str:
        if len(query) > self.settings.long_prompt_chars:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            path = self.home / "prompts" / f"{stamp}-{abs(hash(query)) % 10**8}.txt"
            saved = self.redactor(query)  # a file under the home: masked like the journal
            if self.failures.attempt("saving the long prompt", atomic_write, path, saved):
                query = self.texts("long_prompt", head=saved[:500] + " ...", n=len(query),
                                   path=path)
        return query

    def _open_question(self) -> OpenQuestion | None:
        return OpenQuestion.find(getattr(self.llmclient, "history", None) or [], self.open_turn)

    def _task_handler(self, asked: OpenQuestion | None) -> GenericAgentHandler:
        """An answer to an open question continues the task that asked it (its memory and
        turn count as they were); a new task inherits from the task before (§3)."""
        handler = self.handler_cls(self, self.cwd)
        if asked is not None:
            handler.working = dict(self.handler.working) if self.handler is not None else {}
            handler.current_turn = asked.turn
        elif self.handler is not None:
            handler.inherit(self.handler)
        return handler

    def _opening(self, query: str, handler: GenericAgentHandler,
                 asked: OpenQuestion | None) -> tuple[str, str, list[dict]]:
        """The task's text, first message and the tool results sent with it: a task that
        starts on an open ``ask_user`` question answers it, as that call's result, sent with
        the results of that turn's other calls."""
        query = asked.answer(query) if asked is not None else query
        self.history_info.append(self.texts("user_line", text=squeeze(query, 200, self.redactor)))
        message = self._first_message(query)
        answers = []
        if asked is not None:
            answers, message = asked.results(message), ""
        if handler.working.get("key_info"):
            anchor = handler._get_anchor_prompt(opening=True)
            message = f"{message}\n{anchor}" if message else anchor.lstrip("\n")
        return query, message, answers

    def run_task(self, query: str, source: str = "user", images: list | None = None
                 ) -> Generator[dict, None, dict]:
        """Run one task to its end, yielding events; returns the ``task_end`` event.
        ``images`` (paths, bytes or image blocks) go with the task as image content."""
        blocks = pictures.for_model(images, self.llmclient)
        asked = self._open_question()
        handler = self.handler = self._task_handler(asked)
        handler.disabled_tools = self.disabled_tools
        if self.mcp is not None:  # an abort of the task before cancelled its calls only
            self.mcp.allow_calls()
        query, message, answers = self._opening(query, handler, asked)
        self.events.start()
        shown = {"images": [pictures.meta(b) for b in blocks]} if blocks else {}
        yield from self.events.emit({"type": "task_start", "prompt": query, "source": source,
                                     "session_id": self.session_id,
                                     "sandbox": self.sandbox.mode,
                                     "approval": self.approvals.mode, **shown})
        content = [{"type": "text", "text": message}, *blocks] if blocks else message
        loop = agent_runner_loop(self.llmclient, self.system_prompt(), content, handler,
                                 self._task_tools(), self.max_turns, self.verbose,
                                 max_calls_per_turn=self.max_calls_per_turn,
                                 redact=self.redactor, first_results=answers)
        try:
            result = yield from self.events.relay(loop)
            end = task_end_event(result, handler.current_turn)
        except LLMError as e:  # the model failed for good: the task ends, the session lives
            yield from self.events.flush()  # the retries that came to nothing
            result, end = {}, failed_event(str(e), handler.current_turn, model_error=True)
        # what a question left open keeps, journaled with the end
        self.open_turn = kept_open(self._open_question(), result, handler.current_turn)
        events = self.events.emit(self._closing(end))
        # archived before the end is seen: a caller may exit right after it
        self.failures.attempt("archiving the session in L4", archive_to_l4, self.memory,
                              self.session_id, self.transcript.events, redact=self.redactor)
        yield from events
        return events[-1]

    def notice(self, text: str) -> None:
        """Tell the user something about the run (a ``notice`` event, shown on stderr)."""
        self.provider_event({"type": "notice", "text": text})

    def provider_event(self, event: dict) -> None:
        """The client's ``on_event`` (a ``retry``, a ``model_switch``) or a ``notice``, in
        order among the task's events (llmcore/events.py)."""
        self.events.provider_event(event)


def failed_event(error: str, turns: int, model_error: bool = False) -> dict:
    return {"type": "task_end", "result": "FAILED", "turns": turns, "text": error,
            "error": error, "model_error": model_error}


def task_end_event(result: dict, turns: int) -> dict:
    data = result.get("data")
    end: dict[str, Any] = {"type": "task_end", "result": result.get("result"), "turns": turns,
                           "text": ""}
    if result.get("reason"):
        end["reason"] = result["reason"]
    if isinstance(data, dict) and data.get("intent") == "HUMAN_INTERVENTION":
        end.update(question=data["data"]["question"], candidates=data["data"]["candidates"])
        end["text"] = data["data"]["question"]
    elif isinstance(data, dict) and data.get("status") == "FAILED":
        end.update(result="FAILED", error=data.get("error"), text=data.get("error", ""))
    elif isinstance(data, str):  # the answer as the user gets it, everywhere
        end["text"] = answer_text(data) if end["result"] == "CURRENT_TASK_DONE" else data
    elif data is not None:
        end["text"] = json.dumps(data, ensure_ascii=False, default=json_default)
    return end


if __name__ == "__main__":  # `python ga.py ...`: the same command line as `ga`
    from frontends.cli import main

    sys.exit(main())
