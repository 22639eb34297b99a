"""Images through the real SDKs against the local test server: each API's own format."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
from llm_server import KIND_PATHS, KINDS, Reply, llm_server, run_chat, write_config
from PIL import Image

import llmcore
from frontends.cli import main
from frontends.journal import load_session
from llmcore.images import load_image

__all__ = ["llm_server"]
KEY = "sk-test-IMAGES-5c1e"


def png(path: Path, size=(3000, 2000), color=(30, 90, 200)) -> Path:
    Image.new("RGB", size, color).save(path, "PNG")
    return path


def config(home, server, kind, **extra) -> str:
    return write_config(home, server, p={"provider": kind, "model": "m", "api_key": KEY,
                                         "vision": True, **extra})


def user_images(kind: str, body: dict) -> list[str]:
    """The base64 data of the images in the body's user messages, in order."""
    items = body["input"] if kind == "openai-responses" else body["messages"]
    found = []
    for m in items:
        if m.get("role") != "user" or isinstance(m.get("content"), str):
            continue
        for part in m["content"]:
            found += _part_data(kind, part)
    return found


def _part_data(kind: str, part: dict) -> list[str]:
    if kind == "anthropic" and part["type"] == "image":
        assert part["source"]["type"] == "base64" and part["source"]["media_type"]
        return [part["source"]["data"]]
    if kind == "openai" and part["type"] == "image_url":
        return [_from_url(part["image_url"]["url"])]
    if kind == "openai-responses" and part["type"] == "input_image":
        return [_from_url(part["image_url"])]
    return []


def _from_url(url: str) -> str:
    head, _, data = url.partition(",")
    assert head.startswith("data:image/") and head.endswith(";base64")
    return data


def size_of(data: str) -> tuple[int, int]:
    return Image.open(io.BytesIO(base64.b64decode(data))).size


@pytest.mark.parametrize("tool_mode", ["native", "text"])
@pytest.mark.parametrize("kind", KINDS)
def test_first_request_carries_the_downscaled_image_in_the_api_format(
        home, llm_server, kind, tool_mode, capsys):
    cfg = config(home, llm_server, kind, tool_mode=tool_mode)
    png(Path("shot.png"))
    llm_server.queue(Reply(text="A blue rectangle."))
    assert main(["-m", "p", "--config", cfg, "--image", "shot.png", "what is this?"]) == 0
    body = llm_server.bodies(KIND_PATHS[kind])[0]
    (data,) = user_images(kind, body)
    width, height = size_of(data)
    assert max(width, height) <= 1568 and (width, height) == (1568, 1045)
    assert abs(width / height - 1.5) < 0.01
    assert "what is this?" in json.dumps(body)


def file_read_turn(path: str) -> Reply:
    return Reply(text="<summary>look</summary>Looking.",
                 tool_calls=[("file_read", json.dumps({"path": path}))])


def tool_output_images(kind: str, body: dict) -> list[str]:
    """Image data inside tool results (Anthropic tool_result, Responses function output)."""
    found = []
    if kind == "anthropic":
        for m in body["messages"]:
            for b in m["content"] if isinstance(m["content"], list) else []:
                if b["type"] == "tool_result" and isinstance(b["content"], list):
                    found += [p["source"]["data"] for p in b["content"] if p["type"] == "image"]
    if kind == "openai-responses":
        for item in body["input"]:
            if item.get("type") == "function_call_output" and isinstance(item["output"], list):
                found += [_from_url(p["image_url"]) for p in item["output"]
                          if p["type"] == "input_image"]
    return found


@pytest.mark.parametrize("kind", KINDS)
def test_file_read_of_a_png_puts_the_image_in_the_next_request(home, llm_server, kind, capsys):
    cfg = config(home, llm_server, kind)
    png(Path("chart.png"), (800, 600))
    llm_server.queue(file_read_turn("chart.png"), Reply(text="A chart."))
    assert main(["-m", "p", "--config", cfg, "read chart.png"]) == 0
    body = llm_server.bodies(KIND_PATHS[kind])[1]
    if kind == "openai":  # no images in tool messages: the next user message carries it
        tool_at = next(i for i, m in enumerate(body["messages"]) if m["role"] == "tool")
        tool, after = body["messages"][tool_at], body["messages"][tool_at + 1]
        assert isinstance(tool["content"], str) and "chart.png: PNG 800x600" in tool["content"]
        assert after["role"] == "user" and [size_of(d) for d in _parts(kind, after)] == [
            (800, 600)]
    else:
        assert [size_of(d) for d in tool_output_images(kind, body)] == [(800, 600)]
        assert user_images(kind, body) == []
        assert "chart.png: PNG 800x600" in json.dumps(body)


def _parts(kind: str, message: dict) -> list[str]:
    return [d for part in message["content"] for d in _part_data(kind, part)]


@pytest.mark.parametrize("kind", KINDS)
def test_a_text_only_profile_fails_before_any_request(home, llm_server, kind, capsys):
    cfg = write_config(home, llm_server, p={"provider": kind, "model": "m", "api_key": KEY})
    png(Path("shot.png"), (40, 30))
    assert main(["-m", "p", "--config", cfg, "--image", "shot.png", "look"]) == 2
    assert "p cannot see images" in capsys.readouterr().err
    assert llm_server.requests == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_resumed_session_sends_the_image_again_and_the_journal_holds_it_once(
        home, llm_server, kind, capsys):
    cfg = config(home, llm_server, kind)
    shot = png(Path("shot.png"), (300, 200))
    llm_server.queue(Reply(text="Blue."), Reply(text="Still blue."))
    assert main(["-m", "p", "--config", cfg, "--image", "shot.png", "colour?"]) == 0
    (journal,) = (home / "sessions").glob("*.jsonl")
    assert main(["-m", "p", "--config", cfg, "--resume", journal.stem, "and now?"]) == 0
    first, second = llm_server.bodies(KIND_PATHS[kind])
    sent = base64.b64encode(shot.read_bytes()).decode()
    assert user_images(kind, first) == user_images(kind, second) == [sent]
    assert sent not in journal.read_text()
    assert [p.read_bytes() for p in (home / "images").iterdir()] == [shot.read_bytes()]
    assert len(load_session(journal).history) == 4


@pytest.mark.parametrize("kind", KINDS)
def test_images_in_history_become_notes_for_a_text_only_model(home, llm_server, kind, capsys):
    cfg = write_config(home, llm_server,
                       see={"provider": kind, "model": "m", "api_key": KEY, "vision": True},
                       blind={"provider": kind, "model": "m", "api_key": KEY})
    png(Path("shot.png"), (40, 30))
    llm_server.queue(Reply(text="Red."), Reply(text="I was told about an image."))
    assert main(["-m", "see", "--config", cfg, "--image", "shot.png", "colour?"]) == 0
    (journal,) = (home / "sessions").glob("*.jsonl")
    assert main(["-m", "blind", "--config", cfg, "--resume", journal.stem, "again"]) == 0
    body = llm_server.bodies(KIND_PATHS[kind])[1]
    assert user_images(kind, body) == []
    text = json.dumps(body)
    assert "[image: shot.png, 40x30 png, not shown: this model cannot see images]" in text


def test_usage_of_an_image_is_estimated_from_its_pixels(home, llm_server, capsys):
    client = llmcore.make_client("p", config_path=config(home, llm_server, "openai"), home=home)
    noise = Image.effect_noise((1000, 1000), 60).convert("RGB")
    buf = io.BytesIO()
    noise.save(buf, "PNG")
    block = load_image(buf.getvalue(), name="noise.png").block()
    assert len(block["data"]) > 500_000
    llm_server.queue(Reply(text="noise", no_usage=True))
    _, resp = run_chat(client, [{"role": "user", "content": [{"type": "text", "text": "hi"},
                                                             block]}])
    assert resp.usage.estimated and 1000 <= resp.usage.input <= 1600  # 10^6 px / 750
