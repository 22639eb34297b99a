"""History repair and trimming (pure functions on canonical messages)."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from llmcore.history import (
    MISSING_RESULT,
    SQUEEZE_HEAD,
    history_chars,
    mark_task,
    repair,
    retire_working_memory,
    squeeze_message,
)
from llmcore.trim import TASK_SHARE, TRIMMED_NOTE, trim


def user(*blocks):
    return {"role": "user", "content": list(blocks)}


def bot(*blocks):
    return {"role": "assistant", "content": list(blocks)}


def text(t):
    return {"type": "text", "text": t}


def use(i, name="f"):
    return {"type": "tool_use", "id": i, "name": name, "input": {}}


def result(i, content="ok"):
    return {"type": "tool_result", "tool_use_id": i, "content": content}


def test_missing_tool_result_gets_a_placeholder():
    out = repair([user(text("go")), bot(use("a"), use("b")), user(result("a"), text("next"))])
    assert out[2]["content"][:2] == [result("a"), result("b", MISSING_RESULT)]


def test_trailing_tool_use_is_answered():
    out = repair([user(text("go")), bot(use("a"))])
    assert out[-1] == user(result("a", MISSING_RESULT))


def test_orphan_result_becomes_text_and_duplicates_are_dropped():
    out = repair([user(text("go")), bot(use("a")),
                  user(result("a"), result("a", "again"), result("zzz", "stray"))])
    blocks = out[2]["content"]
    assert blocks[0] == result("a")
    assert [b["type"] for b in blocks[1:]] == ["text"]  # the duplicate result is gone
    assert "stray" in blocks[1]["text"]


def test_repeated_tool_call_ids_are_renamed_with_their_results():
    # some servers number calls per reply ("call_0" every turn): each call keeps its result
    out = repair([user(text("go")), bot(use("a")), user(result("a", "one")), bot(use("a")),
                  user(result("a", "two"), text("x")), bot(use("a"), use("a")),
                  user(result("a", "three"), result("a", "four"))])
    calls = [b["id"] for m in out for b in m["content"] if b["type"] == "tool_use"]
    assert len(calls) == len(set(calls)) == 4
    answers = {b["tool_use_id"]: b["content"] for m in out for b in m["content"]
               if b["type"] == "tool_result"}
    assert [answers[c] for c in calls] == ["one", "two", "three", "four"]
    assert repair(out) == out


def test_empty_text_removed_roles_merged_first_is_user():
    out = repair([bot(text("stray")), user(text("a")), user(text("  "), text("b")),
                  bot(text("")), bot(text("c"))])
    assert out == [user(text("a"), text("b")), bot(text("c"))]


def long_history(turns, size):
    msgs = []
    for i in range(turns):
        msgs.append(user(text(f"<history>{'h' * 500}</history> task {i}"),
                         *([result(f"t{i - 1}", "o" * size)] if i else [])))
        msgs.append(bot({"type": "thinking", "thinking": "z" * 300}, use(f"t{i}")))
    msgs.append(user(result(f"t{turns - 1}", "last output"),
                     text("### [WORKING MEMORY]\n<key_info>KEEP ME</key_info>")))
    return repair(msgs)


def test_trim_squeezes_old_tool_output_and_thinking_first():
    msgs = long_history(10, 3000)
    budget = history_chars(msgs) - 1000
    out = trim(msgs, budget)
    assert len(out) == len(msgs)  # nothing dropped: squeezing was enough
    assert history_chars(out) <= budget
    assert "squeezed" in out[2]["content"][0]["content"]
    assert not any(b["type"] == "thinking" for b in out[1]["content"])
    assert "<history>(squeezed)</history>" in out[0]["content"][0]["text"]
    assert msgs[0]["content"][0]["text"].startswith("<history>hhh")  # input untouched


def test_trim_drops_oldest_turns_at_a_user_boundary_keeping_newest():
    msgs = long_history(40, 200)
    budget = 6000
    out = trim(msgs, budget)
    assert history_chars(out) <= budget
    assert out[0]["role"] == "user" and len(out) < len(msgs)
    assert out[-1]["content"][-1]["text"].endswith("<key_info>KEEP ME</key_info>")
    assert repair(out) == out  # still valid


def test_trim_keep_prefix_keeps_the_first_messages():
    msgs = long_history(40, 200)
    out = trim(msgs, 6000, keep_prefix=1)
    assert out[0] == msgs[0] or "task 0" in out[0]["content"][0]["text"]
    assert "task 0" in out[0]["content"][0]["text"]
    assert "task 1 " not in str(out[1:3])


def test_trim_is_a_no_op_under_budget():
    msgs = long_history(3, 10)
    assert trim(msgs, 10**6) is msgs


# ---- the newest exchange, at any budget -------------------------------------------------
def _check_pairs(out):
    """Every call answered by its own result block in the next message; no stray results."""
    assert out and out[0]["role"] == "user"
    assert all(a["role"] != b["role"] for a, b in zip(out, out[1:], strict=False))
    for i, m in enumerate(out):
        asked = [b["id"] for b in out[i - 1]["content"] if b["type"] == "tool_use"] if i else []
        answered = [b["tool_use_id"] for b in m["content"] if b["type"] == "tool_result"]
        if m["role"] == "user":
            assert answered == asked


turn_shape = st.tuples(
    st.integers(0, 3),  # tool calls in the reply
    st.sampled_from(["a", "b", "c", None]),  # a call id the server repeats (None: unique)
    st.integers(0, 5000),  # size of each tool output
    st.booleans(),  # a result went missing
    st.booleans(),  # the reply carries thinking
)


def history_from(shapes):
    msgs = [user(text("the task"))]
    for n, (calls, repeat, size, lose, think) in enumerate(shapes):
        ids = [repeat or f"t{n}_{k}" for k in range(calls)]
        reply = ([{"type": "thinking", "thinking": "z" * 200}] if think else []) + [
            text(f"<summary>turn {n}</summary>"), *[use(i) for i in ids]]
        msgs.append(bot(*reply))
        results = [result(i, f"{n}:" + "o" * size) for i in ids[: len(ids) - lose]]
        msgs.append(user(*results, text(f"<history>{'h' * 300}</history> turn {n}")))
    return msgs


@settings(max_examples=300, deadline=None)
@given(shapes=st.lists(turn_shape, min_size=1, max_size=12), share=st.floats(0, 1.2),
       keep_prefix=st.integers(0, 3), pin=st.booleans())
def test_trimmed_history_answers_every_tool_call_with_its_own_result(shapes, share, keep_prefix,
                                                                     pin):
    msgs = repair(history_from(shapes))
    if pin:
        msgs[0] = mark_task(msgs[0])
    before = copy.deepcopy(msgs)
    budget = int(history_chars(msgs) * share)
    out = trim(msgs, budget, keep_prefix)
    assert msgs == before  # the input is left as it was
    _check_pairs(out)
    # the newest exchange is all there: the last reply's calls, each with its result block
    newest_calls = [b for b in msgs[-2]["content"] if b["type"] == "tool_use"]
    assert [b["id"] for b in out[-2]["content"] if b["type"] == "tool_use"] == [
        b["id"] for b in newest_calls]
    sent = {b["tool_use_id"]: b["content"] for b in out[-1]["content"]
            if b["type"] == "tool_result"}
    for b in msgs[-1]["content"]:
        if b["type"] == "tool_result":  # whole, or squeezed to its head and tail
            assert sent[b["tool_use_id"]][:SQUEEZE_HEAD] == b["content"][:SQUEEZE_HEAD]
    assert not any("[tool result]" in b.get("text", "") for b in out[-1]["content"])
    if pin:  # the task is never dropped
        assert out[0]["content"][0] == text("the task")
    if history_chars(out) > budget:  # over only when the newest exchange alone is too big
        assert len(out) <= keep_prefix + 3 + pin


def test_newest_tool_call_is_kept_with_its_result_when_it_alone_is_over_budget():
    msgs = repair([user(text("go")), bot(use("old")), user(result("old", "o" * 100)),
                   bot(text("reading"), use("new")), user(result("new", "n" * 20000))])
    out = trim(msgs, 2000)
    assert out[-2]["content"] == [text("reading"), use("new")]
    assert out[-1]["content"][0]["type"] == "tool_result"
    assert out[-1]["content"][0]["tool_use_id"] == "new"
    assert "cut here" in out[-1]["content"][0]["content"]
    assert history_chars(out) <= 2000


def test_newest_output_is_cut_only_as_far_as_the_budget_needs():
    lines = "".join(f"{i:03d}| some file content on line {i}\n" for i in range(600))
    msgs = repair([user(text("go")), bot(use("old")), user(result("old", "o" * 100)),
                   bot(text("reading"), use("new")), user(result("new", lines))])
    budget = 8000
    out = trim(msgs, budget)
    assert 0.9 * budget <= history_chars(out) <= budget  # most of the room is used
    cut = out[-1]["content"][0]["content"]
    assert cut.startswith("000| some") and cut.endswith("599| some file content on line 599\n")
    assert "lines (" in cut and "cut here" in cut and "fewer lines" in cut
    head, tail = cut.split("\n…[")
    assert head.endswith("\n") and tail.split("]…\n")[1][:3].isdigit()  # whole lines


def test_the_task_is_never_dropped_and_stays_right_after_the_kept_prefix():
    earlier = [user(text("an earlier task")), bot(text("earlier answer"))]
    task = mark_task(user(text("THE TASK")))
    turns = []
    for n in range(30):
        turns += [bot(text(f"<summary>{n}</summary>"), use(f"t{n}")),
                  user(result(f"t{n}", "x" * 400))]
    msgs = repair([*earlier, task, *turns])
    out = trim(msgs, 8000)
    assert history_chars(out) <= 8000 and len(out) < len(msgs) - 2
    assert out[0] is msgs[2]  # the earlier task went first; this one is kept as it was
    assert out[1] == bot(text(TRIMMED_NOTE)) and out[2]["role"] == "user"
    for n in range(30, 60):  # and it stays put as turns go on
        out = trim([*out, bot(use(f"t{n}")), user(result(f"t{n}", "x" * 400))], 8000)
        assert out[0] is msgs[2]


def test_a_huge_task_is_cut_to_its_share_of_the_budget():
    task = mark_task(user(text("START " + "details " * 5000 + " END")))
    msgs = repair([task, bot(use("a")), user(result("a", "y" * 3000)),
                   bot(use("b")), user(result("b", "z" * 3000))])
    budget = 8000
    out = trim(msgs, budget)
    kept = out[0]["content"][0]["text"]
    assert kept.startswith("START") and kept.endswith("END") and "of the task cut" in kept
    assert history_chars(out[:1]) <= budget * TASK_SHARE and history_chars(out) <= budget
    assert trim(msgs, budget)[0] == out[0]  # cut the same way every time: a stable prefix


def test_a_huge_task_is_cut_on_its_first_request_too():
    task = mark_task({"role": "user", "content": [{"type": "text", "text": "x\n" * 20_000}]})
    out = trim([task], 8_000)
    assert history_chars(out) <= 8_000 and "of the task cut to fit" in out[0]["content"][0]["text"]
    reply = {"role": "assistant", "content": [{"type": "text", "text": "working on it"}]}
    more = {"role": "user", "content": [{"type": "text", "text": "go on"}]}
    assert trim([task, reply, more], 8_000)[0] == out[0]  # the next request: the same cut


def test_squeezing_is_idempotent_so_squeezed_turns_stay_a_stable_prefix():
    msgs = long_history(6, 3000)
    once = [squeeze_message(m) for m in msgs]
    assert [squeeze_message(m) for m in once] == once
    assert all(squeeze_message(a) is a for a in once)


def test_repair_keeps_valid_messages_as_the_same_objects():
    msgs = long_history(5, 100)
    out = repair(msgs)
    assert len(out) == len(msgs) and all(a is b for a, b in zip(out, msgs, strict=True))


def test_repair_checks_again_only_what_follows_the_history_it_made_valid():
    sent = repair(long_history(5, 100))
    grown = [*sent, bot(text(""), use("n")), user(text("  "), result("n"))]
    out = repair(grown, sent)
    assert out == repair(grown)
    assert all(a is b for a, b in zip(out[:len(sent)], sent, strict=True))
    # the part sent before is taken as valid as it is: an empty text there is not looked for
    stale = [*sent[:2], user(*sent[2]["content"], text("  ")), *sent[3:]]
    assert repair([*stale, *grown[len(sent):]], stale)[2] is stale[2]


@settings(max_examples=200, deadline=None)
@given(shapes=st.lists(turn_shape, min_size=1, max_size=10),
       edits=st.lists(st.tuples(st.integers(0, 10), st.integers(0, 30),
                                st.sampled_from(["drop", "swap", "pop"])), max_size=10))
def test_repair_of_a_grown_or_changed_history_is_that_of_the_whole(shapes, edits):
    """Repaired turn by turn as a session does, with earlier messages sometimes changed
    (a new object) or the newest taken back: the result is always that of a full repair."""
    turns = history_from(shapes)
    msgs, sent = turns[:1], ()
    for n in range(1, len(turns), 2):
        msgs = [*msgs, *turns[n:n + 2]]
        for _, at, edit in (e for e in edits if e[0] == n // 2):
            i = at % len(msgs)
            if edit == "drop":  # a changed earlier message: a result goes missing
                msgs[i] = {**msgs[i], "content": [b for b in msgs[i]["content"]
                                                  if b["type"] != "tool_result"] or [text("x")]}
            elif edit == "swap":  # an earlier reply repeats a later call id
                msgs[i] = {**msgs[i], "content": [*msgs[i]["content"], use("c")]}
            elif len(msgs) > 1:
                msgs.pop()
        out = repair(msgs, sent)
        assert out == repair(msgs)
        _check_pairs(out)
        msgs, sent = list(out), tuple(out)


def test_trim_works_in_rare_big_steps_keeping_squeezed_turns():
    """Turns are appended as a session does; the history is only rewritten when over budget,
    and a squeeze keeps every turn squeezed before as the very same message."""
    budget, hist, rewrites, drops = 60000, [user(text("task"))], 0, 0
    for n in range(80):
        hist = [*hist, bot(text(f"<summary>{n}</summary>"), use(f"t{n}")),
                user(result(f"t{n}", "x" * 8000), text(f"<key_info>k{n}</key_info>"))]
        out = trim(hist, budget)
        assert history_chars(out) <= budget
        if out is not hist:
            rewrites += 1
            old_squeezed = [m for m in hist if squeeze_message(m) is m]
            kept = [m for m in out if any(m is o for o in old_squeezed)]
            drops += len(kept) < len(old_squeezed)
        hist = out
    assert 5 <= rewrites <= 80 // 3  # one rewrite per several turns, not per turn
    assert drops < rewrites / 2
    assert hist[-1]["content"][-1] == text("<key_info>k79</key_info>")


def test_working_memory_rides_only_in_the_newest_user_message():
    wm = "### [WORKING MEMORY]\n<history>\nstep 1\n</history>\n<key_info>K</key_info>"
    msgs = [user(text("go")), bot(use("a")), user(result("a"), text(wm)), bot(use("b")),
            user(result("b"), text(wm))]
    out = retire_working_memory(msgs)
    assert out[2]["content"] == [result("a"), text(
        "### [WORKING MEMORY]\n<history>(squeezed)</history>\n<key_info>(squeezed)</key_info>")]
    assert out[4] is msgs[4] and out[0] is msgs[0]
    assert retire_working_memory(out) is out  # already retired: nothing changes
