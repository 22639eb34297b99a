"""History repair and trimming (pure functions on canonical messages)."""

from __future__ import annotations

from llmcore.history import MISSING_RESULT, history_chars, repair, trim


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


def test_duplicate_tool_use_ids_are_dropped():
    out = repair([user(text("go")), bot(use("a")), user(result("a")), bot(use("a")),
                  user(text("x"))])
    assert sum(b["type"] == "tool_use" for m in out for b in m["content"]) == 1


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
