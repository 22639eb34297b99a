"""Images in a long history: trimming turns old images into notes first, pairing stays valid."""

from __future__ import annotations

import base64
import json
import os

from llm_server import Reply, llm_server, run_chat, write_config

import llmcore
from llmcore.history import SQUEEZE_TOOL_OUTPUT, history_chars, repair, trim

__all__ = ["llm_server"]
TURNS = 40
IMAGE_BYTES = 6_000  # each image's size; its base64 is what the budget counts


def picture(n: int) -> dict:
    data = base64.b64encode(os.urandom(IMAGE_BYTES)).decode()
    return {"type": "image", "media_type": "image/png", "data": data, "width": 640 + n,
            "height": 480, "sha256": f"{n:064x}", "name": f"shot{n}.png"}


def history(turns: int = TURNS) -> list[dict]:
    """A task with a screenshot, then ``turns`` turns that each file_read an image."""
    msgs = [{"role": "user", "content": [{"type": "text", "text": "what changed?"},
                                         picture(0)]}]
    for n in range(1, turns + 1):
        msgs.append({"role": "assistant", "content": [
            {"type": "text", "text": f"<summary>turn {n}</summary>"},
            {"type": "tool_use", "id": f"t{n}", "name": "file_read",
             "input": {"path": f"shot{n}.png"}}]})
        output = f"[IMAGE] shot{n}.png: PNG 640x480 " + "d" * (SQUEEZE_TOOL_OUTPUT + 100)
        msgs.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"t{n}",
             "content": [{"type": "text", "text": output}, picture(n)]},
            {"type": "text", "text": f"turn {n} done"}]})
    return msgs


def images_in(messages: list[dict]) -> list[dict]:
    found = []
    for m in messages:
        for b in m["content"]:
            inner = b.get("content") if isinstance(b.get("content"), list) else []
            found += [x for x in [b, *inner] if x.get("type") == "image"]
    return found


def assert_paired(out: list[dict]) -> None:
    assert out[0]["role"] == "user" and repair(out) == out
    for prev, m in zip(out, out[1:], strict=False):
        assert prev["role"] != m["role"]
        asked = [b["id"] for b in prev["content"] if b["type"] == "tool_use"]
        answered = [b["tool_use_id"] for b in m["content"] if b["type"] == "tool_result"]
        assert answered == (asked if m["role"] == "user" else [])


def test_trimming_turns_old_images_into_notes_before_squeezing_any_text():
    msgs = repair(history())
    no_images = sum(len(b["data"]) for b in images_in(msgs))
    budget = history_chars(msgs) - no_images + 100 * (TURNS + 1)
    out = trim(msgs, budget)
    assert_paired(out)
    assert len(out) == len(msgs)  # nothing dropped, nothing squeezed but the images
    assert [b["name"] for b in images_in(out)] == [f"shot{TURNS}.png"]  # the newest stays
    text = json.dumps(out)
    assert "[image: 640x480 png, removed]" in text and "[image: 679x480 png, removed]" in text
    assert "chars squeezed" not in text
    assert all(a is b for a, b in zip(out, msgs, strict=True) if not images_in([b]))


def test_a_small_budget_still_pairs_every_call_and_keeps_the_newest_image():
    msgs = repair(history())
    out = trim(msgs, 5_000)  # less than the newest exchange alone
    assert_paired(out)
    assert [b["name"] for b in images_in(out)] == [f"shot{TURNS}.png"]
    assert out[-1]["content"][0]["tool_use_id"] == f"t{TURNS}"
    newest = out[-1]["content"][0]["content"]
    assert newest[1]["type"] == "image" and "chars squeezed" in newest[0]["text"]
    assert len(out) < len(msgs)


def test_a_long_session_sends_only_the_newest_image_through_the_sdk(home, llm_server):
    cfg = write_config(home, llm_server, p={"provider": "anthropic", "model": "m",
                                            "vision": True, "context_win": 10_000})
    client = llmcore.make_client("p", config_path=cfg, home=home)
    msgs = history()
    client.system, client.history = "You are a test.", msgs[:-1]
    last = msgs[-1]["content"][0]
    llm_server.queue(Reply(text="The last one is blue."))
    run_chat(client, [{"role": "user", "content": "turn done",
                       "tool_results": [{"tool_use_id": last["tool_use_id"],
                                         "content": last["content"]}]}])
    body = llm_server.bodies()[-1]
    sent = [p for m in body["messages"] for b in m["content"] if b["type"] == "tool_result"
            and isinstance(b["content"], list) for p in b["content"] if p["type"] == "image"]
    assert len(sent) == 1 and sent[0]["source"]["data"] == last["content"][1]["data"]
    for prev, m in zip(body["messages"], body["messages"][1:], strict=False):
        asked = [b["id"] for b in prev["content"] if b["type"] == "tool_use"]
        assert [b["tool_use_id"] for b in m["content"] if b["type"] == "tool_result"] == asked
