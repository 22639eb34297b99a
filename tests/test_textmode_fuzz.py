"""Fuzzing the text tool mode parser (SPEC §4 "Text tool mode runs only what the model
meant"): a call inside any quoting construct never runs, and the real call after it always
does; a construct never closed quotes nothing; a JSON array of calls runs only when it is
the whole reply apart from its summary and reasoning."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from llmcore.textmode import parse_calls

FUZZ_EXAMPLES = 400
TOOLS = frozenset({"code_run", "file_read"})
FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=True, database=None)
# what a quoted call or the prose around it may hold: anything but the characters that
# open or close a construct (a backtick inside a code span would end it, and so on)
plain = st.text(st.characters(blacklist_characters="`~<>-[]{}\r", blacklist_categories=("Cs",)),
                max_size=24)
prose = plain.map(lambda s: s.replace("\n", " "))
spaces = st.sampled_from(["", " ", "  ", "   "])
INDENTS = st.sampled_from(["    ", "\t", "  \t", "     "])


@st.composite
def evil_call(draw) -> str:
    """A call as the model might quote it: tagged either way, or as a JSON array."""
    call = json.dumps({"name": draw(st.sampled_from(sorted(TOOLS))),
                       "arguments": {"script": draw(plain)}})
    form = draw(st.sampled_from(["tool_use", "tool_call", "array"]))
    return f"[{call}]" if form == "array" else f"<{form}>{call}</{form}>"


@st.composite
def fence(draw, quoted: str) -> str:
    char = draw(st.sampled_from("`~"))
    opened = draw(st.integers(3, 6))
    closed = opened + draw(st.integers(0, 2))
    info = draw(st.sampled_from(["", "json", " xml", "python title=x"]))
    tail = draw(st.sampled_from(["", " ", "\t"]))
    return (f"\n{draw(spaces)}{char * opened}{info}\n{quoted}\n"
            f"{draw(spaces)}{char * closed}{tail}\n")


@st.composite
def quoting(draw) -> str:
    """A quoting construct holding a call."""
    quoted = draw(evil_call())
    kind = draw(st.sampled_from(["fence", "indented", "pre", "code", "comment", "blockquote",
                                 "think", "thinking", "span"]))
    if kind == "fence":
        return draw(fence(quoted))
    if kind == "indented":
        return f"\n\n{draw(INDENTS)}{quoted}\n\n"
    if kind in ("pre", "code"):
        tag = draw(st.sampled_from([kind, kind.upper(), kind.capitalize()]))
        attrs = draw(st.sampled_from(["", ' class="x"', " data-a=1"]))
        return f"<{tag}{attrs}>{draw(prose)}{quoted}</{tag}{draw(spaces)}>"
    if kind == "comment":
        return f"<!--{draw(prose)}{quoted}{draw(st.sampled_from(['', ' ']))}\n-->"
    if kind == "blockquote":
        return f"\n{draw(spaces)}>{draw(spaces)}{draw(prose)}{quoted}\n"
    if kind in ("think", "thinking"):
        return f"<{kind}>{draw(prose)}\n{quoted}\n</{kind}>"
    ticks = "`" * draw(st.integers(1, 3))
    return f"{ticks}{quoted}{ticks}"


@st.composite
def real_call(draw) -> tuple[str, str]:
    path = draw(plain)
    call = json.dumps({"name": "file_read", "arguments": {"path": path}})
    form = draw(st.sampled_from(["tool_use", "tool_call"]))
    return f"<{form}>{call}</{form}>", path


def found(reply: str) -> list[tuple[str, dict]]:
    return [(c.function.name, json.loads(c.function.arguments))
            for c in parse_calls(reply, 1, TOOLS)]


@FUZZ
@given(before=prose, constructs=st.lists(quoting(), min_size=1, max_size=3), real=real_call(),
       after=prose)
def test_a_quoted_call_never_runs_and_the_real_call_after_it_does(before, constructs, real,
                                                                  after):
    tagged, path = real  # constructs side by side stay apart: "`a```b``" holds no code span
    reply = f"{before}{' '.join(constructs)}\n{tagged}{after}"
    assert found(reply) == [("file_read", {"path": path})], reply


@FUZZ
@given(before=prose, opener=st.sampled_from(["```", "~~~", "<think>", "<thinking>", "<pre>",
                                             "<code>", "<!--", "<thinking></think>"]),
       middle=prose, real=real_call())
def test_a_construct_never_closed_quotes_nothing(before, opener, middle, real):
    tagged, path = real
    reply = f"{before}\n{opener}{middle}\n{tagged}"
    assert found(reply) == [("file_read", {"path": path})], reply


@FUZZ
@given(calls=st.lists(evil_call().filter(lambda c: c.startswith("[")), min_size=1,
                      max_size=3),
       summary=st.booleans(), reasoning=st.booleans(), words=prose, where=st.booleans())
def test_a_json_array_runs_only_as_the_whole_reply(calls, summary, reasoning, words, where):
    array = "[" + ", ".join(c[1:-1] for c in calls) + "]"
    framed = (f"<summary>{words}</summary>\n" if summary else "") + (
        f"<think>{words}</think>" if reasoning else "")
    assert len(found(f"{framed}\n{array}\n")) == len(calls)
    if words.strip():  # any other text beside it: the array is only quoted
        quoted = f"{words} {array}" if where else f"{array} {words}"
        assert found(framed + quoted) == []
