"""Images in a long history: trimming turns old images into notes first, pairing stays valid."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest
from llm_server import Reply, llm_server, run_chat, write_config
from PIL import Image, ImageDraw

import llmcore
from frontends.cli import main
from llmcore.history import (
    SQUEEZE_TOOL_OUTPUT,
    history_chars,
    image_chars,
    mark_task,
    message_chars,
    repair,
)
from llmcore.trim import trim

__all__ = ["llm_server"]
TURNS = 40
IMAGE_BYTES = 6_000  # each image's data; the budget counts its pixels (640x480: 410 tokens)


def picture(n: int) -> dict:
    data = base64.b64encode(os.urandom(IMAGE_BYTES)).decode()
    return {"type": "image", "media_type": "image/png", "data": data, "width": 640 + n,
            "height": 480, "sha256": f"{n:064x}", "name": f"shot{n}.png"}


def history(turns: int = TURNS, output: int = SQUEEZE_TOOL_OUTPUT + 100) -> list[dict]:
    """A task with a screenshot, then ``turns`` turns that each file_read an image."""
    msgs = [{"role": "user", "content": [{"type": "text", "text": "what changed?"},
                                         picture(0)]}]
    for n in range(1, turns + 1):
        msgs.append({"role": "assistant", "content": [
            {"type": "text", "text": f"<summary>turn {n}</summary>"},
            {"type": "tool_use", "id": f"t{n}", "name": "file_read",
             "input": {"path": f"shot{n}.png"}}]})
        text = f"[IMAGE] shot{n}.png: PNG 640x480 " + "d" * output
        msgs.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"t{n}",
             "content": [{"type": "text", "text": text}, picture(n)]},
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
    old = images_in(msgs)[:-1]
    budget = history_chars(msgs) - sum(map(image_chars, old)) + 100 * len(old)
    out = trim(msgs, budget)
    assert_paired(out)
    assert len(out) == len(msgs)  # nothing dropped, nothing squeezed but the images
    assert [b["name"] for b in images_in(out)] == [f"shot{TURNS}.png"]  # the newest stays
    text = json.dumps(out)
    assert "[image: 640x480 png, removed]" in text and "[image: 679x480 png, removed]" in text
    assert "chars squeezed" not in text
    assert all(a is b for a, b in zip(out, msgs, strict=True) if not images_in([b]))


def test_a_small_budget_still_pairs_every_call_and_keeps_the_newest_image():
    msgs = repair(history(output=3000))
    out = trim(msgs, history_chars(msgs[-2:]) - 1000)  # less than the newest exchange alone
    assert_paired(out)
    assert [b["name"] for b in images_in(out)] == [f"shot{TURNS}.png"]
    assert out[-1]["content"][0]["tool_use_id"] == f"t{TURNS}"
    newest = out[-1]["content"][0]["content"]
    assert newest[1]["type"] == "image" and "cut here" in newest[0]["text"]
    assert len(out) < len(msgs)


def test_an_image_too_big_for_the_budget_becomes_a_note_and_the_task_stays():
    msgs = repair(history())
    msgs[0] = mark_task(msgs[0])
    budget = image_chars(images_in(msgs)[-1]) + 400  # too small for the newest image
    out = trim(msgs, budget)
    assert_paired(out)
    assert images_in(out) == [] and history_chars(out) <= budget
    assert "what changed?" in json.dumps(out[0])  # the task is still there
    newest = out[-1]["content"][0]["content"]
    assert newest[1] == {"type": "text", "text": "[image: 680x480 png, removed]"}
    assert newest[0]["text"].startswith("[IMAGE] shot40.png")


def test_the_tasks_images_stay_while_old_output_is_squeezed():
    """What the user asked about outlives old output: task images over the task text's share
    (but under half the budget) stay, the old turns are squeezed instead."""
    msgs = repair(history(turns=6, output=8000))
    shots = [{**picture(100 + n), "width": 1568, "height": 1045} for n in range(3)]
    msgs[0] = mark_task({"role": "user", "content": [msgs[0]["content"][0], *shots]})
    task_images = sum(map(image_chars, shots))
    budget = int(task_images / 0.4)  # the images: 40 % of it, over the text's 25 % share
    assert history_chars(msgs) > budget
    out = trim(msgs, budget)
    assert_paired(out)
    assert [b["name"] for b in images_in(out[:1])] == [b["name"] for b in shots]
    assert "chars squeezed" in json.dumps(out[1:-2])  # old output paid instead
    assert len(out) == len(msgs) and history_chars(out) <= budget


def test_task_images_over_half_the_budget_become_notes_and_the_task_text_stays():
    msgs = repair(history(turns=6, output=8000))
    shots = [picture(100 + n) for n in range(3)]
    msgs[0] = mark_task({"role": "user", "content": [msgs[0]["content"][0], *shots]})
    out = trim(msgs, int(sum(map(image_chars, shots)) / 0.6))  # the images: 60 % of it
    assert_paired(out)
    assert images_in(out[:1]) == [] and "what changed?" in json.dumps(out[0])
    assert "[image: 740x480 png, removed]" in json.dumps(out[0])


def test_an_image_counts_its_pixels_not_its_base64_length():
    small, big = picture(0), {**picture(0), "data": "A" * 4_000_000}
    user = [{"role": "user", "content": [{"type": "text", "text": "look"}, pic]}
            for pic in (small, big)]
    assert message_chars(user[0]) == message_chars(user[1]) < 2_000
    assert image_chars(small) == -(-640 * 480 // 750) * 3


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


# ---- through ga and the real SDK ---------------------------------------------------------
TASK = "What is wrong in this screenshot? Check notes.txt too: TASK-5K"


def screenshot(path: Path, size=(1568, 882)) -> bytes:
    """A page-like PNG: text lines on white (it stays PNG: JPEG would be no smaller)."""
    img = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(img)
    for y in range(8, size[1] - 16, 16):
        draw.text((12, y), f"row {y}: error 4{y % 97:02d} in module_{y % 13} " * 6,
                  fill=(y % 200, 30, 60))
    img.save(path, "PNG")
    return path.read_bytes()


def file_reads(server, paths: list[str]) -> None:
    for path in paths:
        server.queue(Reply(text=f"<summary>read {path}</summary>",
                           tool_calls=[("file_read", json.dumps({"path": path}))]))
    server.queue(Reply(text="done"))


def sent_images(body: dict) -> list[str]:
    """Each image's base64 data in an Anthropic request, in order."""
    found = []
    for m in body["messages"]:
        for b in m["content"]:
            inner = b.get("content") if isinstance(b.get("content"), list) else []
            found += [x["source"]["data"] for x in [b, *inner] if x.get("type") == "image"]
    return found


def test_a_task_screenshot_is_in_every_request_of_the_task(home, llm_server, capsys):
    raw = screenshot(Path("shot.png"))
    assert len(base64.b64encode(raw)) > 100_000  # counted as base64 it would fill the window
    Path("notes.txt").write_text("the login button is grey\n" * 40)
    file_reads(llm_server, ["notes.txt", "notes.txt"])
    cfg = write_config(home, llm_server, p={"provider": "anthropic", "model": "m",
                                            "api_key": "k", "vision": True})
    assert main(["-m", "p", "--config", cfg, "--image", "shot.png", TASK]) == 0
    bodies = llm_server.bodies()
    assert len(bodies) == 3
    for body in bodies:
        assert sent_images(body) == [base64.b64encode(raw).decode()]
        assert "removed]" not in json.dumps(body)


@pytest.mark.parametrize("context_win", [None, 4000])
def test_a_big_image_from_a_tool_keeps_the_task_and_the_earlier_turns(
        home, llm_server, context_win, capsys):
    Image.effect_noise((1920, 1080), 60).convert("RGB").save("photo.png", "PNG")
    assert os.path.getsize("photo.png") > 3_000_000
    Path("notes.txt").write_text("NOTE-LINE the login button is grey\n" * 10)
    file_reads(llm_server, ["notes.txt", "photo.png", "notes.txt"])
    window = {"context_win": context_win} if context_win else {}
    cfg = write_config(home, llm_server, p={"provider": "anthropic", "model": "m",
                                            "api_key": "k", "vision": True, **window})
    assert main(["-m", "p", "--config", cfg, TASK]) == 0, capsys.readouterr().err
    bodies = llm_server.bodies()
    assert len(bodies) == 4
    for body in bodies[1:]:
        text = json.dumps(body)
        assert TASK in text and "NOTE-LINE" in text  # the task and the first read stay
        assert "(earlier turns trimmed)" not in text
    after = bodies[2]  # the request right after the photo was read
    if context_win:  # the photo alone is over this window: a note, not a wiped history
        assert sent_images(after) == [] and "[image: 1568x882 jpeg, removed]" in json.dumps(after)
    else:
        assert len(sent_images(after)) == 1 and len(sent_images(bodies[3])) == 1
