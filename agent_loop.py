"""The turn loop: ask the model, run the tools it calls, feed the results back.

Knows only ``client.chat(messages, tools)`` and ``handler.dispatch(...)``; no provider
and no tool body lives here. ``agent_runner_loop`` yields event dicts (``turn``, ``text``,
``thinking``, ``usage``, ``tool_call``, ``progress``, ``tool_result``) and returns
``{'result': ..., 'data': ...}``.

Hooks (``handler.hooks``) see every task, turn, model request and tool call that begins
end, even when the model fails for good or the run is closed: then ``llm_after``,
``turn_after`` and ``agent_after`` carry the exception as ``ctx["error"]``. The tool hooks
fire for the calls the model made (not the runtime's own ``no_tool``); their context has
``handler``, ``tool_name``, ``args``, ``call_id`` and, after, ``outcome`` and ``error`` (the
exception a tool raised, else None).
"""

from __future__ import annotations

import functools
import json
import logging
import re
import traceback
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Generator, Optional

log = logging.getLogger("ga.loop")

HOOK_EVENTS = (
    "agent_before", "turn_before", "llm_before", "llm_after",
    "tool_before", "tool_after", "turn_after", "agent_after",
)
COMPACT_ARGS_CHARS = 120
COMPACT_KEYINFO_CHARS = 60
COMPACT_PATH_CHARS = 60  # a longer path is cut in the middle on the tool line
CLEAN_CODE_MAX_LINES = 6
CLEAN_CODE_PREVIEW_LINES = 5
BAD_JSON_PREVIEW_CHARS = 200
CUT_CALL = ("; the reply was cut off at max_tokens, so this call is incomplete: make it "
            "smaller (e.g. write a long file in parts with file_write mode=append)")
MAX_ARGS_DEPTH = 64  # lists and dicts in tool arguments nest no deeper (real calls: 2-4)
RESERVED_TOOLS = ("no_tool",)  # the runtime runs these itself; a model call is unknown
MAX_CALLS_PER_TURN = 32  # tool calls of one reply that run; the rest get an error result
TOO_MANY_CALLS = ("[Error] not run: a reply may make at most {n} tool calls and yours made "
                  "{total}. Send the remaining calls in your next reply.")
# The runtime's own prompt markers; tool output that contains them is neutralised (SPEC §4).
MARKER_TAGS = ("key_info", "history", "earlier_context", "tool_result", "tool_use", "tool_call")
MARKER_WORDS = ("MASTER", "DANGER", "WORKING MEMORY", "SYSTEM", "SYSTEM TIPS")
# characters a reader does not see (zero-width, joiners, direction marks, soft hyphen, BOM):
# a marker with them inside still reads as the marker
INVISIBLE = "\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff"
_INVISIBLE_RE = re.compile(f"[{INVISIBLE}]")


def marker_pattern(name: str) -> str:
    """The regex source of a marker name as a reader would take it: any case (the caller's
    flag), invisible characters anywhere in it, any run of spaces where it has one."""
    gap, space = f"[{INVISIBLE}]*", f"[\\s{INVISIBLE}]+"
    return gap.join(space if c == " " else re.escape(c) for c in name)


MARKER_SPACE = f"[\\s{INVISIBLE}]*"
MARKER_TAG_NAMES = "|".join(map(marker_pattern, MARKER_TAGS))
MARKER_WORD_NAMES = "|".join(map(marker_pattern, MARKER_WORDS))
MARKERS_NOTE = ("[Note] Runtime markers in this output were escaped so they cannot act as "
                "markers: {names} stand for the real characters of the source (without the "
                "escapes). file_write and file_patch take the real text; file_patch also "
                "matches old_content copied in the escaped form.")


@dataclass
class StepOutcome:
    data: Any
    next_prompt: Optional[str] = None
    should_exit: bool = False
    # image blocks ({"type": "image", ...}) sent to the model with this result (file_read)
    images: Optional[list] = None


class Hooks:
    """Plugin hook registry: ``on(event, fn)``; a failing callback is reported, never raised."""

    def __init__(self) -> None:
        self._callbacks: dict[str, list[Callable]] = {e: [] for e in HOOK_EVENTS}

    def on(self, event: str, fn: Callable[[MappingProxyType], Any]) -> None:
        if event not in self._callbacks:
            raise ValueError(f"unknown hook event {event!r}; known: {', '.join(HOOK_EVENTS)}")
        self._callbacks[event].append(fn)

    def fire(self, event: str, ctx: dict) -> None:
        view = MappingProxyType(ctx)
        for fn in self._callbacks[event]:
            try:
                fn(view)
            except Exception as e:  # a plugin must never break the loop
                name = getattr(fn, "__qualname__", repr(fn))
                log.warning("hook %s (%s) failed: %s: %s", event, name, type(e).__name__, e)


def json_default(o: Any) -> Any:
    return sorted(o) if isinstance(o, set) else str(o)


def bad_json_message(name: Any, raw: Any, error: Any) -> str:
    if not isinstance(raw, str):
        raw = json.dumps(raw, ensure_ascii=False, default=json_default)
    preview = raw if len(raw) <= BAD_JSON_PREVIEW_CHARS else raw[:BAD_JSON_PREVIEW_CHARS] + "..."
    return (f"[Error] the arguments of your {name} tool call were not valid JSON ({error}). "
            f"Arguments received: {preview!r}. Send the call again with a JSON object.")


def neutralise_markers(text: str, tags: tuple[str, ...] = ()) -> str:
    """``text`` with the runtime's markers made inert: ``<key_info>`` becomes
    ``&lt;key_info>`` and ``[MASTER]`` becomes ``\\[MASTER\\]``; the words stay readable.
    ``tags``: more tag names made inert alike (the block the text is put in)."""
    if "<" in text:  # a plain check first: most output holds no marker at all
        if tags:
            text = _tag_re(tags).sub(_escaped_tag, text)
        text = _tag_re(MARKER_TAGS).sub(_escaped_tag, text)
    if "[" in text:
        text = _word_re().sub(_escaped_word, text)
    return text


# functions, not templates: re hashes a pattern (long ones here) for each template use
def _escaped_tag(m: re.Match) -> str:
    return "&lt;" + m.group(1)


def _escaped_word(m: re.Match) -> str:
    return f"\\[{m.group(1)}\\]"


# Compiled at first use, not at import: these long patterns take tens of milliseconds,
# which a start that runs no tool (ga --help, ga acp's initialize) should not pay.
@functools.lru_cache(maxsize=8)
def _tag_re(tags: tuple[str, ...]) -> re.Pattern[str]:
    """The tags ``tags`` as markers; only the "<" is escaped: a tag needs no ">" near it to
    act as one, so none is looked for."""
    names = "|".join(map(marker_pattern, tags))
    return re.compile(rf"<({MARKER_SPACE}/?{MARKER_SPACE}(?:{names}))(?!\w)", re.I)


@functools.cache
def _word_re() -> re.Pattern[str]:
    return re.compile(rf"\[({MARKER_SPACE}(?:{MARKER_WORD_NAMES}){MARKER_SPACE})\]", re.I)


def escaped_markers(data: Any) -> list[str]:
    """The runtime markers ``neutralise_markers`` escapes in ``data`` (dict keys included),
    in their escaped form."""
    if isinstance(data, dict):
        data = [*(k for k in data if isinstance(k, str)), *data.values()]
    if isinstance(data, (list, tuple)):
        found = [name for item in data for name in escaped_markers(item)]
        return sorted(set(found), key=found.index)
    if not isinstance(data, str) or ("<" not in data and "[" not in data):
        return []
    tags = {_plain(m.group(1)).replace("/", " ").split()[0].lower()
            for m in _tag_re(MARKER_TAGS).finditer(data)}
    words = {" ".join(_plain(m.group(1)).split()).upper() for m in _word_re().finditer(data)}
    return sorted(f"&lt;{tag}" for tag in tags) + sorted(f"\\[{w}\\]" for w in words)


def _plain(text: str) -> str:
    return _INVISIBLE_RE.sub("", text)


def with_markers_note(data: Any, redact: Callable[[str], str] | None = None) -> Any:
    """``tool_output(data)``, plus a note naming the markers it escaped (when it did)."""
    names = escaped_markers(data)
    data = tool_output(data, redact)
    if not names:
        return data
    note = MARKERS_NOTE.format(names=", ".join(names))
    if isinstance(data, str):
        return f"{data}\n{note}"
    if isinstance(data, dict):
        return {**data, "markers_note": note}
    return {"result": data, "markers_note": note}


def tool_output(data: Any, redact: Callable[[str], str] | None = None) -> Any:
    """Tool output as it may reach the model: every string in it (dict keys included)
    redacted and neutralised."""
    if isinstance(data, str):
        return neutralise_markers(redact(data) if redact else data)
    if isinstance(data, dict):
        return {tool_output(k, redact) if isinstance(k, str) else k: tool_output(v, redact)
                for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [tool_output(v, redact) for v in data]
    return data


def error_outcome(msg: str, next_prompt: str = "\n") -> StepOutcome:
    return StepOutcome({"status": "error", "msg": msg}, next_prompt=next_prompt)


def _as_progress(gen: Generator[str, None, Any]) -> Generator[dict, None, Any]:
    """Relay a tool's yielded text as ``progress`` events (an event dict, such as the
    approval gate's, as it is); return what it returns."""
    while True:
        try:
            progress = next(gen)
        except StopIteration as stop:
            return stop.value
        yield progress if isinstance(progress, dict) else {"type": "progress",
                                                           "text": str(progress)}


def _run_maybe_generator(ret: Any) -> Generator[str, None, Any]:
    if hasattr(ret, "__next__") and hasattr(ret, "send"):
        ret = yield from ret
    return ret


class BaseHandler:
    """Dispatches tool calls to ``do_<name>`` methods."""

    _done_hooks: list[str]
    exit_request: Optional[dict] = None  # set to {'result': ..., 'data': ...} to end the task
    current_turn: int = 0
    disabled_tools: tuple = ()  # tools the model is not offered: unknown at dispatch too

    def __init__(self) -> None:
        self._done_hooks = []
        self.hooks = Hooks()

    def turn_end_callback(self, response, tool_calls, tool_results, turn, next_prompt,
                          exit_reason) -> str:
        return next_prompt

    def unknown_tool(self, tool_name: str) -> str:
        """What the model is told when it calls a tool it does not have."""
        return f"unknown tool {tool_name}"

    def gate(self, tool_name: str, args: dict, response, call_id: str = "") -> Any:
        """Before any tool runs: None lets the call run, a ``StepOutcome`` answers it instead.
        May be a generator that yields events (an approval question) and returns that."""
        return None

    def dispatch(self, tool_name: str, args: dict, response, index: int = 0,
                 tool_num: int = 1, *, call_id: str = "") -> Generator[str, None, StepOutcome]:
        method = getattr(self, f"do_{tool_name}", None)
        if tool_name != "bad_json" and (method is None or tool_name in self.disabled_tools):
            msg = self.unknown_tool(tool_name)
            return error_outcome(msg, next_prompt=msg)
        if not isinstance(args, dict):
            return error_outcome(f"[Error] the arguments of your {tool_name} tool call must be "
                                 f"a JSON object, got {type(args).__name__}")
        if tool_name == "bad_json":
            msg = bad_json_message(args.get("name", "?"), args.get("raw", ""),
                                   args.get("error", "invalid JSON"))
            return error_outcome(msg, next_prompt=msg)
        args["_index"] = index
        args["_tool_num"] = tool_num
        try:
            refused = yield from _run_maybe_generator(self.gate(tool_name, args, response,
                                                                call_id))
        except Exception as e:  # a gate that fails lets nothing through
            log.debug("gate for %s failed:\n%s", tool_name, traceback.format_exc())
            refused = error_outcome(f"[Error] not run: the approval check failed: "
                                    f"{type(e).__name__}: {e}")
        if refused is not None:
            return refused
        ctx = {"handler": self, "tool_name": tool_name, "args": args, "call_id": call_id}
        hooked = tool_name not in RESERVED_TOOLS  # the runtime's own turn end is no call
        if hooked:
            self.hooks.fire("tool_before", ctx)
        error = None
        try:
            outcome = yield from _run_maybe_generator(method(args, response))
        except (Exception, SystemExit) as e:  # a failing tool reports to the model; run goes on
            log.debug("tool %s failed:\n%s", tool_name, traceback.format_exc())
            error = e
            if getattr(e, "for_model", False):
                msg = f"[Error] {e}"
            else:
                msg = f"[Error] tool {tool_name} failed: {type(e).__name__}: {e}"
            outcome = error_outcome(msg)
        if not isinstance(outcome, StepOutcome):
            outcome = StepOutcome(outcome, next_prompt="\n")
        if hooked:
            self.hooks.fire("tool_after", {**ctx, "outcome": outcome, "error": error})
        return outcome


def _args_error(args: Any) -> str | None:
    """What is wrong with decoded tool arguments: not an object, or nested so deep that
    walking them (redaction, logs) would exhaust Python's recursion limit."""
    depth = _nesting(args)
    if depth > MAX_ARGS_DEPTH:
        return f"nested {depth} levels deep; at most {MAX_ARGS_DEPTH} are accepted"
    return None if isinstance(args, dict) else f"expected an object, got {args!r:.40}"


def _nesting(value: Any) -> int:
    """How deep lists and dicts nest in ``value``, walked without recursion."""
    deepest, todo = 0, [(value, 0)]
    while todo:
        value, depth = todo.pop()
        if isinstance(value, dict):
            value = list(value.values())
        if isinstance(value, list):
            deepest = max(deepest, depth + 1)
            todo.extend((item, depth + 1) for item in value)
    return deepest


def _parse_calls(response, redact: Callable[[str], str] | None = None) -> list[dict]:
    """The reply's calls; a call whose arguments are no JSON object is a ``bad_json`` call
    holding them raw (redacted here: its message shows them shortened)."""
    if not response.tool_calls:
        return [{"tool_name": "no_tool", "args": {}, "id": "", "internal": True}]
    calls = []
    for tc in response.tool_calls:
        name, raw = tc.function.name, tc.function.arguments or "{}"
        try:
            args = json.loads(raw, strict=False)  # raw newlines in strings are common
            error = _args_error(args)
        except (json.JSONDecodeError, RecursionError) as e:  # RecursionError: nested too deep
            error = str(e)
        if error and response.stop_reason == "max_tokens":
            error += CUT_CALL
        if error:
            calls.append({"tool_name": "bad_json", "id": tc.id, "called": name,
                          "args": {"name": name, "raw": redact(raw) if redact else raw,
                                   "error": error}})
        else:
            calls.append({"tool_name": name, "args": args, "id": tc.id,
                          "reserved": name in RESERVED_TOOLS})
    return calls


def _stream_reply(client, messages, tools_schema) -> Generator[dict, None, Any]:
    gen = client.chat(messages, tools_schema)
    while True:
        try:
            chunk = next(gen)
        except StopIteration as stop:
            return stop.value
        kind = "thinking" if type(chunk).__name__ == "ThinkingChunk" else "text"
        yield {"type": kind, "delta": str(chunk)}


def _result_text(data: Any) -> str:
    if isinstance(data, (dict, list)):
        return json.dumps(data, ensure_ascii=False, default=json_default)
    return str(data)


def _with_images(text: str, outcome: StepOutcome) -> Any:
    """A tool result's content: its text, or [text block, image blocks…] (file_read)."""
    return [{"type": "text", "text": text}, *outcome.images] if outcome.images else text


def _image_meta(outcome: StepOutcome) -> dict:
    """For the ``tool_result`` event: what images went with it (never their data)."""
    if not outcome.images:
        return {}
    return {"images": [{k: v for k, v in b.items() if k != "data"} for b in outcome.images]}


def _run_one(handler, response, call: dict, index: int, tool_num: int,
             redact: Callable[[str], str] | None,
             refusal: str | None = None) -> Generator[dict, None, StepOutcome]:
    """Run one call (``refusal``: do not run it, answer that error) with its events, shown
    under the name the model used."""
    name, call_id, internal = call["tool_name"], call["id"], call.get("internal", False)
    shown = call.get("called", name)  # a bad_json call is shown as the tool it meant
    if not internal:
        args = {"raw": call["args"].get("raw")} if "called" in call else dict(call["args"])
        yield {"type": "tool_call", "name": shown, "args": args, "id": call_id}
    if refusal is not None:
        outcome = error_outcome(refusal)
    elif call.get("reserved"):  # the runtime's own no_tool is not the model's to call
        outcome = error_outcome(f"unknown tool {name}", next_prompt=f"unknown tool {name}")
    else:
        gen = handler.dispatch(name, call["args"], response, index=index, tool_num=tool_num,
                               call_id=call_id)
        outcome = yield from _as_progress(gen)
    if not internal:
        outcome.data = with_markers_note(outcome.data, redact)
        yield {"type": "tool_result", "name": shown, "id": call_id, "data": outcome.data,
               **_image_meta(outcome)}
    return outcome


def _run_calls(handler, response, calls, max_calls: int = MAX_CALLS_PER_TURN,
               redact: Callable[[str], str] | None = None) -> Generator[dict, None, tuple]:
    tool_results: list[dict] = []
    next_prompts: list[str] = []
    exit_reason: dict = {}
    run = calls[:max_calls]
    for i, call in enumerate(run):
        if _aborted(handler):  # the calls left in the reply are not made
            break
        outcome = yield from _run_one(handler, response, call, i, len(run), redact)
        if outcome.should_exit:  # the results of the calls before it wait for what comes next
            exit_reason = {"result": "EXITED", "data": outcome.data, "turn_results": tool_results}
            break
        if not outcome.next_prompt:
            exit_reason = {"result": "CURRENT_TASK_DONE", "data": outcome.data}
            break
        if outcome.data is not None and not call.get("internal"):
            tool_results.append(_tool_result(call, outcome, redact))
        if outcome.next_prompt not in next_prompts:
            next_prompts.append(outcome.next_prompt)
    refusal = TOO_MANY_CALLS.format(n=max_calls, total=len(calls))
    for call in calls[len(run):] if not exit_reason and not _aborted(handler) else ():
        outcome = yield from _run_one(handler, response, call, 0, len(run), redact, refusal)
        tool_results.append(_tool_result(call, outcome, redact))
    return tool_results, next_prompts, exit_reason


def _aborted(handler) -> bool:
    """Whether the task was aborted (Ctrl-C, a cancel, a signal) since its reply came."""
    return (handler.exit_request or {}).get("result") == "ABORTED"


def _tool_result(call: dict, outcome: StepOutcome, redact: Callable[[str], str] | None) -> dict:
    text = tool_output(_result_text(outcome.data), redact)  # str() of other objects
    return {"tool_use_id": call["id"], "content": _with_images(text, outcome)}


@dataclass
class _Run:
    """Where a run is: its turn, the last turn plugins saw end, the turn's reply and calls."""

    turn: int
    closed: int
    response: Any = None
    tool_calls: list = field(default_factory=list)
    tool_results: list = field(default_factory=list)


def agent_runner_loop(client, system_prompt: str, user_input: str | list[dict], handler,
                      tools_schema, max_turns: int = 100, verbose: bool = False, *,
                      max_calls_per_turn: int = MAX_CALLS_PER_TURN,
                      redact: Callable[[str], str] | None = None,
                      first_results: list[dict] | None = None
                      ) -> Generator[dict, None, dict]:
    """Drive the model turn by turn until a tool ends the task or a limit is hit.
    ``user_input`` is the task's text, or content blocks (text and images); ``first_results``
    go with it: they answer tool calls the history ended on (an ``ask_user`` question).
    ``tools_schema`` is the tool list, or a function giving it anew for each request.
    Turns are counted on from ``handler.current_turn``; ``max_turns`` limits this run. A tool
    that exits (``ask_user``) ends it with the results of the turn's calls before it
    (``turn_results``): they are sent with the answer."""
    first: dict = {"role": "user", "content": user_input}
    if first_results:
        first["tool_results"] = list(first_results)
    messages: list[dict] = [{"role": "system", "content": system_prompt}, first]
    hooks: Hooks = getattr(handler, "hooks", None) or Hooks()
    handler.max_turns = max_turns
    handler.verbose = verbose
    ctx = {"client": client, "handler": handler, "messages": messages}
    run = _Run(handler.current_turn, handler.current_turn)  # an answered question counts on
    hooks.fire("agent_before", ctx)
    try:
        exit_reason = yield from _turns(client, handler, hooks, ctx, run, tools_schema,
                                        max_calls_per_turn, redact)
    except BaseException as e:  # the model failed for good, or the run was closed
        ctx["error"] = e
        _end_turn(hooks, ctx, run)  # plugins see what began end
        hooks.fire("agent_after", ctx)
        raise
    if handler.exit_request:
        exit_reason = handler.exit_request
    elif exit_reason and run.response is not None:
        handler.turn_end_callback(run.response, run.tool_calls, run.tool_results, run.turn, "",
                                  exit_reason)
    _end_turn(hooks, ctx, run)
    ctx["exit_reason"] = exit_reason
    hooks.fire("agent_after", ctx)
    return exit_reason or {"result": "MAX_TURNS_EXCEEDED", "data": None}


def _end_turn(hooks: Hooks, ctx: dict, run: _Run) -> None:
    """The turn that ended the task ends for plugins too."""
    if run.turn > run.closed:
        ctx.update(next_prompt="", tool_results=run.tool_results)
        hooks.fire("turn_after", ctx)
        run.closed = run.turn


def _turns(client, handler, hooks: Hooks, ctx: dict, run: _Run, tools_schema,
           max_calls: int, redact: Callable[[str], str] | None) -> Generator[dict, None, dict]:
    """The turns of a run; returns why it ended ({} when the turn limit or an exit request
    ended it)."""
    messages, start, exit_reason = ctx["messages"], run.turn, {}
    while run.turn - start < handler.max_turns:
        run.turn += 1
        handler.current_turn = run.turn
        yield {"type": "turn", "turn": run.turn}
        ctx.update(turn=run.turn, messages=messages)
        hooks.fire("turn_before", ctx)
        run.response = response = yield from _ask_model(client, messages, tools_schema, hooks,
                                                        ctx)
        if handler.exit_request:  # e.g. aborted while the model was streaming
            break
        run.tool_calls = _parse_calls(response, redact)
        run.tool_results, next_prompts, exit_reason = yield from _run_calls(
            handler, response, run.tool_calls, max_calls, redact)
        if handler.exit_request:
            break
        if not next_prompts or exit_reason:
            if not handler._done_hooks or exit_reason.get("result") == "EXITED":
                break
            exit_reason = {}
            next_prompts.append(handler._done_hooks.pop(0))
        next_prompt = handler.turn_end_callback(response, run.tool_calls, run.tool_results,
                                                run.turn, "\n".join(next_prompts), exit_reason)
        ctx.update(next_prompt=next_prompt, tool_results=run.tool_results)
        hooks.fire("turn_after", ctx)
        run.closed = run.turn
        if handler.exit_request:
            break
        content = redact(next_prompt) if redact else next_prompt  # a tool may put data here
        messages = [{"role": "user", "content": content, "tool_results": run.tool_results}]
    return exit_reason


def _ask_model(client, messages: list[dict], tools_schema, hooks: Hooks,
               ctx: dict) -> Generator[dict, None, Any]:
    """One model request between the ``llm_`` hooks, then its ``usage`` event."""
    hooks.fire("llm_before", ctx)
    try:
        tools = tools_schema() if callable(tools_schema) else tools_schema
        response = yield from _stream_reply(client, messages, tools)
    except BaseException as e:  # llm_after sees the failure; the run ends with it
        ctx.update(response=None, error=e)
        hooks.fire("llm_after", ctx)
        if getattr(e, "usage", None) is not None:  # what a failed turn still spent
            yield usage_event(e.usage)
        raise
    usage = getattr(response, "usage", None)
    if usage is not None:
        yield usage_event(usage)
    ctx["response"] = response
    hooks.fire("llm_after", ctx)
    return response


def usage_event(usage: Any) -> dict:
    """The ``usage`` event of a reply's ``Usage``: ``cache_write`` when the cache was written,
    ``cost`` (USD) when the profile that answered has a price."""
    event = {"type": "usage", "input": usage.input, "cached": usage.cached,
             "output": usage.output}
    if getattr(usage, "cache_write", 0):
        event["cache_write"] = usage.cache_write
    if getattr(usage, "estimated", False):  # counted from characters: shown "≈"
        event["estimated"] = True
    if getattr(usage, "cost", None) is not None:
        event["cost"] = usage.cost
    return event


def _shrink_code(m: re.Match) -> str:
    lines = m.group(0).split("\n")
    lang = lines[0].replace("```", "").strip()
    body = [line for line in lines[1:-1] if line.strip()]
    if len(body) <= CLEAN_CODE_MAX_LINES:
        return m.group(0)
    preview = "\n".join(body[:CLEAN_CODE_PREVIEW_LINES])
    return f"```{lang}\n{preview}\n  ... ({len(body)} lines)\n```"


_ANSWER_NOISE = re.compile(r"<summary>.*?</summary>|<thinking>.*?</thinking>", re.DOTALL)


def answer_text(text: str) -> str:
    """A final reply as the user gets it: without the ``<summary>`` line the runtime asks
    for, nor inline ``<thinking>``."""
    return _ANSWER_NOISE.sub("", text).strip()


def _clean_content(text: str) -> str:
    """Shorten model text for the console (SPEC §2)."""
    if not text:
        return ""
    text = re.sub(r"```[\s\S]*?```", _shrink_code, text)
    text = re.sub(r"<file_content>[\s\S]*?</file_content>", "", text)
    text = re.sub(r"<tool_(?:use|call)>[\s\S]*?</tool_(?:use|call)>", "", text)
    text = re.sub(r"(\r?\n){3,}", "\n\n", text)
    return text.strip()


def _cut(s: str, n: int) -> str:
    return s[:n] + "..." if len(s) > n else s


def cut_middle(s: str, n: int) -> str:
    """``s`` at most ``n`` chars, its middle replaced by ``…`` (keeps both ends of a path)."""
    if len(s) <= n:
        return s
    head = (n - 1) // 2
    return s[:head] + "…" + s[len(s) - (n - 1 - head):]


def _compact_tool_args(name: str, args: dict) -> str:
    """One short line describing a tool call's arguments (SPEC §2)."""
    a = {k: v for k, v in args.items() if k not in ("_index", "_tool_num")}
    if isinstance(a.get("path"), str):
        a["path"] = cut_middle(a["path"], COMPACT_PATH_CHARS)
    if name == "update_working_checkpoint":
        return _cut(str(a.get("key_info", "")), COMPACT_KEYINFO_CHARS)
    if name == "ask_user":
        q = str(a.get("question", ""))
        cands = a.get("candidates") or []
        if cands:
            q += "\n" + "\n".join(f"- {c}" for c in cands)
        return q
    return _cut(json.dumps(a, ensure_ascii=False, default=json_default), COMPACT_ARGS_CHARS)
