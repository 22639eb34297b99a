"""Text tool mode: tools described in the prompt and parsed back out of the reply.

For models without function calling. The reply carries calls as
``<tool_use>{"name": ..., "arguments": {...}}</tool_use>`` (or ``<tool_call>``), or as a
JSON array of such objects when every element names a known tool. What the model only
quotes as code (a fenced block, an inline code span, a ``<pre>`` element or a block indented
by four spaces after a blank line) or drafts in reasoning written inline (``<think>`` or
``<thinking>``) is never a call, tag or array.
Results go back as ``<tool_result>`` text.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Iterator

from .base import ToolCall
from .history import MessageMemo
from .images import is_image
from .provider import result_text

PROTOCOL = (
    "You can call tools. To call one, write exactly:\n"
    '<tool_use>{{"name": "TOOL_NAME", "arguments": {{...}}}}</tool_use>\n'
    "Several calls may follow one another. Arguments must be valid JSON. "
    "Results come back in <tool_result> blocks in the next message.\n"
    "Available tools (JSON schema):\n{tools}"
)
REMINDER = ('(Tools as listed in the task\'s message: {names}. Call one with <tool_use>{{"name": '
            '"TOOL_NAME", "arguments": {{...}}}}</tool_use>.)')
_TAG_RE = re.compile(r"<(tool_use|tool_call)>\s*[{\[]")  # a tag that opens a call
# reasoning written inline (<think> or <thinking> to its closing tag or the end), a fenced
# code block (```/~~~ to its closing fence or the end), an inline code span (a run of
# backticks to the same run on its line), a <pre> element (its opening tag ends before any
# other "<", so each "<pre" costs only its own tag; to </pre> or the end), an
# indented code block (lines indented by 4 spaces or a tab, after a blank line or at the
# start) or the opening tag of a call, followed by its JSON (a tag only named in prose is no
# call): calls the model only drafts in its reasoning or quotes as code are not run
_CODE_OR_TAG_RE = re.compile(
    r"(?P<reasoning><(?P<think>think(?:ing)?)>.*?(?:</(?P=think)>|\Z))"
    r"|(?P<fence>^[ \t]*(?P<tick>`{3,}|~{3,})[^\n]*(?:\n.*?^[ \t]*(?P=tick)[`~]*[ \t]*$|.*\Z))"
    r"|(?P<span>(?<!`)(?P<ticks>`+)(?!`)[^\n]+?(?<!`)(?P=ticks)(?!`))"
    r"|(?P<pre>(?i:<pre\b)[^<>]*>.*?(?:(?i:</pre)\s*>|\Z))"
    r"|(?P<indented>(?:\A|^[ \t]*\n)(?:(?: {4}| {0,3}\t)[^\n]*(?:\n|\Z)(?:[ \t]*\n)*)+)"
    r"|<(?P<kind>tool_use|tool_call)>\s*(?=[{\[])", re.S | re.M)
_SPACE_RE = re.compile(r"\s*")
_DECODER = json.JSONDecoder(strict=False)  # raw newlines in strings are common
_ARRAY_START_RE = re.compile(r"\[\s*\{")
MAX_ARRAY_TRIES = 20  # JSON arrays tried as a call list, so a long reply stays cheap
_NAME_RE = re.compile(r'"name"\s*:\s*"([^"]+)"')


def tool_list_text(tools: list[dict]) -> str:
    specs = [{"name": t["function"]["name"], "description": t["function"].get("description", ""),
              "parameters": t["function"].get("parameters", {})} for t in tools]
    return PROTOCOL.format(tools=json.dumps(specs, ensure_ascii=False, indent=1))


def reminder_text(tools: list[dict]) -> str:
    return REMINDER.format(names=", ".join(t["function"]["name"] for t in tools))


class ToolPrompt:
    """The tool protocol in every request of text tool mode: the full tool list rides at the
    end of the task's first message — one place in the cached prefix, kept however the
    history is trimmed — and a later newest message ends with a one-line reminder."""

    def __init__(self) -> None:
        self._texts: tuple[str, ...] = ()  # the tool list and the reminder
        self._memos: tuple[MessageMemo, ...] = ()  # a message with each of them appended

    def _for(self, tools: list[dict]) -> tuple[MessageMemo, ...]:
        texts = (tool_list_text(tools), reminder_text(tools))
        if texts != self._texts:  # another list: the messages made with the old one go
            self._texts = texts
            self._memos = tuple(MessageMemo(lambda m, t=t: _appended(m, t)) for t in texts)
        return self._memos

    def chars(self, tools: list[dict] | None) -> int:
        """What the tool prompt adds to a request, at most."""
        if not tools:
            return 0
        self._for(tools)
        return sum(map(len, self._texts))

    def apply(self, messages: list[dict], task: int, tools: list[dict] | None) -> list[dict]:
        """The request's (text form) messages with the tool list on ``messages[task]`` and
        the reminder on the last message when that is a later one."""
        if not tools or not messages:
            return messages
        with_list, with_reminder = self._for(tools)
        out = list(messages)
        out[task] = with_list(out[task])
        if task < len(out) - 1:
            out[-1] = with_reminder(out[-1])
        with_list.keep_only(messages)
        with_reminder.keep_only(messages)
        return out


def _appended(msg: dict, text: str) -> dict:
    return {**msg, "content": [*msg["content"], {"type": "text", "text": text}]}


def parse_calls(reply: str, turn: int, tools: set[str] | frozenset[str] = frozenset()
                ) -> list[ToolCall]:
    """Tool calls found in a reply: ``<tool_use>``/``<tool_call>`` tags outside code, else a
    JSON array outside code whose every element names one of ``tools``. A tagged call with
    invalid JSON keeps its raw arguments (the model hears back about it)."""
    calls: list[ToolCall] = []
    code: list[tuple[int, int]] = []
    pos = 0
    while m := _CODE_OR_TAG_RE.search(reply, pos):
        if m.group("kind"):
            call, pos = _tagged(reply, m.end(), f"</{m.group('kind')}>",
                                f"call_t{turn}_{len(calls)}")
            calls.append(call)
        else:
            code.append(m.span())
            pos = m.end()
    return calls or _from_array(reply, turn, tools, code)


def _tagged(reply: str, start: int, close: str, call_id: str) -> tuple[ToolCall, int]:
    """The call whose JSON starts at ``start`` and where the reply goes on after it. The
    JSON is read first, so ``close`` inside a string is text; when it is not valid or
    something other than ``close`` (or the end of the reply) follows it, the call is its
    raw text up to ``close``."""
    try:
        obj, end = _DECODER.raw_decode(reply, start)
        after = _SPACE_RE.match(reply, end).end()
        if after == len(reply) or reply.startswith(close, after):
            return _one(obj, reply[start:end], call_id), after + len(close)
    except (json.JSONDecodeError, RecursionError):  # invalid, or nested past Python's limit
        pass
    stop = reply.find(close, start)
    stop = len(reply) if stop < 0 else stop
    return _one(None, reply[start:stop].rstrip(), call_id), stop + len(close)


def _from_array(reply: str, turn: int, tools: set[str] | frozenset[str],
                code: list[tuple[int, int]]) -> list[ToolCall]:
    decoder = json.JSONDecoder()
    for start in itertools.islice(_outside(_ARRAY_START_RE.finditer(reply), code),
                                  MAX_ARRAY_TRIES):
        try:
            items, _ = decoder.raw_decode(reply, start)
            if all(isinstance(it, dict) and isinstance(it.get("name"), str)
                   and it["name"] in tools for it in items):
                return [_call(it, f"call_t{turn}_{i}") for i, it in enumerate(items)]
        except (json.JSONDecodeError, RecursionError):  # invalid, or nested past the limit
            continue
    return []


def _outside(found: Iterable[re.Match], spans: list[tuple[int, int]]) -> Iterator[int]:
    """Start positions of ``found`` (in order) that lie in none of the sorted ``spans``."""
    rest = iter(spans)
    span = next(rest, None)
    for m in found:
        while span is not None and span[1] <= m.start():
            span = next(rest, None)
        if span is None or m.start() < span[0]:
            yield m.start()


def _one(obj: object, raw: str, call_id: str) -> ToolCall:
    """A tagged call from its decoded JSON, or from its raw text when that is not valid."""
    if obj is None:
        name = _NAME_RE.search(raw)
        return ToolCall.make(call_id, name.group(1) if name else "bad_json", raw)
    if not isinstance(obj, dict) or "name" not in obj:
        return ToolCall.make(call_id, "bad_json", raw)
    return _call(obj, call_id)


def _call(obj: dict, call_id: str) -> ToolCall:
    args = obj.get("arguments", obj.get("args", obj.get("parameters", {})))
    if isinstance(args, str):
        return ToolCall.make(call_id, str(obj["name"]), args)
    return ToolCall.make(call_id, str(obj["name"]), args if args is not None else {})


def render_message(m: dict) -> dict:
    """One canonical message as a plain text turn: tool calls and results written as tags."""
    blocks = []
    has_text_calls = any(b["type"] == "text" and _TAG_RE.search(b["text"]) for b in m["content"])
    for b in m["content"]:
        blocks.extend(_render_block(b, has_text_calls))
    return {"role": m["role"], "content": blocks or [{"type": "text", "text": "…"}]}


def _render_block(b: dict, has_text_calls: bool) -> list[dict]:
    if b["type"] == "tool_use":
        if has_text_calls:
            return []
        call = {"name": b["name"], "arguments": b.get("input", {})}
        return [{"type": "text", "text": f"<tool_use>{json.dumps(call, ensure_ascii=False)}"
                                         "</tool_use>"}]
    if b["type"] == "tool_result":
        content = b["content"]
        pictures = [x for x in content if is_image(x)] if isinstance(content, list) else []
        content = result_text(b)  # images stay image content, right after the result's text
        return [{"type": "text",
                 "text": f'<tool_result id="{b["tool_use_id"]}">\n{content}\n</tool_result>'},
                *pictures]
    return [b]
