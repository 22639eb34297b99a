"""Text tool mode: tools described in the prompt and parsed back out of the reply.

For models without function calling. The reply carries calls as
``<tool_use>{"name": ..., "arguments": {...}}</tool_use>`` (or ``<tool_call>``), or as a
JSON array of such objects when that array is the whole reply (apart from its summary and
reasoning) and every element names a known tool. What the model only quotes (a fenced or
indented code block, an inline code span, a ``<pre>`` or ``<code>`` element, a blockquote,
an HTML comment) or drafts in reasoning written inline (``<think>…</think>``,
``<thinking>…</thinking>``) is never a call; a construct never closed quotes nothing.
Results go back as ``<tool_result>`` text.
"""

from __future__ import annotations

import bisect
import json
import re

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
# Where what the model only quotes (or drafts in reasoning) begins, or a call; three
# patterns, each led by one literal character, so a search skips plain prose fast (one
# pattern of all of them was tried at every character: 3 ms for an 8 KB reply). The reply
# is read with two newlines before it, so that its first line is a line like the others,
# after a blank one. Each quoting construct ends by its own rule (``_Scan``); one that never
# ends quotes nothing.
# After "<": reasoning written inline (<think> or <thinking>, to the same closing tag), a
# <pre> or <code> element (its opening tag ends before any other "<", so each costs only
# its own tag), an HTML comment, or the opening tag of a call followed by its JSON (a tag
# only named in prose is no call).
_ANGLE_RE = re.compile(r"<(?:(?P<think>think(?:ing)?)>|(?P<element>(?i:pre|code))\b[^<>]*>"
                       r"|(?P<comment>!--)|(?P<kind>tool_use|tool_call)>\s*(?=[{\[]))")
# After a newline: a fenced code block (a line opening with ``` or ~~~ after at most 3
# spaces, as CommonMark: a fence opened mid-line is none; to a closing fence of the same
# character, at least as long), a blockquote line ("> …"), or a block indented by 4 spaces
# or a tab after a blank line.
_LINE_RE = re.compile(r"\n(?: {0,3}(?P<fence>`{3,}(?=[^`\n]*$)|~{3,})|(?P<quote> {0,3}>[^\n]*)"
                      r"|(?P<indented>[ \t]*(?:\n(?: {4}| {0,3}\t)[^\n]*(?:\n[ \t]*(?=\n))*)+))",
                      re.M)
# An inline code span: a run of backticks to the same run on its line.
_SPAN_RE = re.compile(r"(?P<span>`(?<!``)`*)(?!`)[^\n]+?(?<!`)(?P=span)(?!`)")
_OPENERS = (_ANGLE_RE, _LINE_RE, _SPAN_RE)
_CLOSERS = {"think": re.compile("</think>"), "thinking": re.compile("</thinking>"),
            "comment": re.compile("-->"), "pre": re.compile(r"</pre\s*>", re.I),
            "code": re.compile(r"</code\s*>", re.I)}
_FENCE_LINE_RE = re.compile(r"\n {0,3}(`{3,}|~{3,})[ \t]*(?=\n|\Z)")  # one that may close one
_SUMMARY_RE = re.compile(r"<summary>.*?</summary>", re.S)
_SPACE_RE = re.compile(r"\s*")
_DECODER = json.JSONDecoder(strict=False)  # raw newlines in strings are common
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
    """Tool calls found in a reply: ``<tool_use>``/``<tool_call>`` tags outside what the
    model only quotes, else a JSON array of calls that is the whole reply apart from its
    ``<summary>`` and reasoning, every element naming one of ``tools``. A tagged call with
    invalid JSON keeps its raw arguments (the model hears back about it)."""
    if "<tool_" not in reply and "[" not in reply:
        return []
    scan = _Scan("\n\n" + reply)
    calls: list[ToolCall] = []
    pos = 0
    while m := scan.next_opener(pos):
        if m.re is _ANGLE_RE and m.group("kind"):
            call, pos = _tagged(scan.reply, m.end(), f"</{m.group('kind')}>",
                                f"call_t{turn}_{len(calls)}")
            calls.append(call)
        else:
            pos = scan.end_of(m)
    return calls or _from_array(scan.reply, turn, tools, scan.reasoning)


class _Scan:
    """The openers of a reply in order, and where each quoting construct ends. Every
    pattern and every closing tag or fence is looked for at most once from a point: a
    search that found none says so for every later opener of its kind, so a reply full of
    unclosed openers is still read in linear time."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.next: list[re.Match | None] = [p.search(reply) for p in _OPENERS]
        # kind -> the span of the closing tag the last search found (None: there is none)
        self.found: dict[str, tuple[int, int] | None] = {}
        self.fences: list[tuple[int, int, str, int]] | None = None
        self.reasoning: list[tuple[int, int]] = []  # spans of matched <think>…</think>

    def next_opener(self, pos: int) -> re.Match | None:
        """The first opener at ``pos`` or after it."""
        for i, m in enumerate(self.next):
            if m is not None and m.start() < pos:
                self.next[i] = _OPENERS[i].search(self.reply, pos)
        found = [m for m in self.next if m is not None]
        return min(found, key=re.Match.start) if found else None

    def end_of(self, m: re.Match) -> int:
        """Where the construct opened by ``m`` ends; ``m``'s end when it never does (then
        it quotes nothing)."""
        if m.re is _LINE_RE:
            return self._fence_end(m) if m.group("fence") else m.end()
        if m.re is _SPAN_RE:
            return m.end()
        if m.group("think"):
            end = self._closed(m.group("think"), m.end())
            if end > m.end():
                self.reasoning.append((m.start(), end))
            return end
        if m.group("element"):
            return self._closed(m.group("element").lower(), m.end())
        return self._closed("comment", m.end())  # an HTML comment (a call is no construct)

    def _closed(self, kind: str, start: int) -> int:
        """The end of the first closing tag of ``kind`` from ``start`` on, else ``start``."""
        hit = self.found.get(kind, (-1, -1))
        if hit is not None and hit[0] < start:  # not looked for since ``start``
            m = _CLOSERS[kind].search(self.reply, start)
            hit = self.found[kind] = m.span() if m else None
        return start if hit is None else hit[1]

    def _fence_end(self, m: re.Match) -> int:
        """The end of the line that closes the fence ``m`` opens: the first later line of
        the same character, at least as long, with nothing after it but spaces."""
        opened = m.group("fence")
        if self.fences is None:  # every line that may close a fence, once per reply
            self.fences = [(f.start(), f.end(), f.group(1)[0], len(f.group(1)))
                           for f in _FENCE_LINE_RE.finditer(self.reply)]
            self.longest = _longest_after(self.fences)
        line_end = self.reply.find("\n", m.end())
        if line_end < 0:
            return m.end()
        i = bisect.bisect_left(self.fences, (line_end, 0, "", 0))
        if self.longest[opened[0]][i] < len(opened):  # no closing fence after it
            return m.end()
        while self.fences[i][2] != opened[0] or self.fences[i][3] < len(opened):
            i += 1  # ``longest`` says a closing line follows: the loop ends on it
        return self.fences[i][1]


def _longest_after(fences: list[tuple[int, int, str, int]]) -> dict[str, list[int]]:
    """For each fence character, the longest fence line from each index of ``fences`` on."""
    longest = {"`": [0] * (len(fences) + 1), "~": [0] * (len(fences) + 1)}
    for i in range(len(fences) - 1, -1, -1):
        for char, row in longest.items():
            row[i] = max(row[i + 1], fences[i][3] if fences[i][2] == char else 0)
    return longest


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
                reasoning: list[tuple[int, int]]) -> list[ToolCall]:
    """The calls of a JSON array that is the whole reply but for its summary and reasoning
    (an array the model quotes in prose, from a page or a file, is no call)."""
    kept, pos = [], 0
    for start, end in reasoning:
        kept.append(reply[pos:start])
        pos = end
    rest = _SUMMARY_RE.sub("", "".join(kept) + reply[pos:]).strip()
    if not rest.startswith("["):
        return []
    try:
        items, end = json.JSONDecoder().raw_decode(rest)
    except (json.JSONDecodeError, RecursionError):  # invalid, or nested past the limit
        return []
    if end != len(rest) or not isinstance(items, list) or not items:
        return []
    if all(isinstance(it, dict) and isinstance(it.get("name"), str) and it["name"] in tools
           for it in items):
        return [_call(it, f"call_t{turn}_{i}") for i, it in enumerate(items)]
    return []


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
