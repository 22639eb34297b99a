"""Images into a task (put_task, run_task) and out of file_read, with and without vision."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import pytest
from PIL import Image

from ga import GenericAgent
from llmcore.base import ConfigError
from llmcore.scripted import ScriptedClient


def png(path: Path, size=(3000, 2000), color=(10, 120, 200)) -> Path:
    Image.new("RGB", size, color).save(path, "PNG")
    return path


def sent_size(block: dict) -> tuple[int, int]:
    return Image.open(io.BytesIO(base64.b64decode(block["data"]))).size


def first_user_content(client: ScriptedClient) -> list:
    return client.calls[0]["messages"][1]["content"]


def test_put_task_sends_images_as_content_not_paths(home):
    shot = png(Path("shot.png"))
    agent = GenericAgent(ScriptedClient([{"text": "A blue square."}]), home=home)
    agent.start()
    small = png(Path("small.png"), (40, 30)).read_bytes()
    events = agent.put_task("what is in this screenshot?", images=[shot, small])
    while events.get(timeout=10)["type"] != "task_end":
        pass
    content = first_user_content(agent.llmclient)
    assert content[0]["type"] == "text" and "shot.png" not in content[0]["text"]
    pictures = [b for b in content if b["type"] == "image"]
    assert [sent_size(b) for b in pictures] == [(1568, 1045), (40, 30)]
    assert [b["name"] for b in pictures] == ["shot.png", "image bytes"]
    agent.tasks.put(None)


def test_run_task_records_the_images_without_their_data(home):
    agent = GenericAgent(ScriptedClient([{"text": "ok"}]), home=home)
    events = list(agent.run_task("look", images=[png(Path("a.png"), (40, 30))]))
    start = events[0]
    assert start["type"] == "task_start"
    assert start["images"][0]["width"] == 40 and "data" not in start["images"][0]


def test_a_bad_image_fails_put_task_at_once_naming_the_file(home):
    Path("notes.png").write_text("not an image")
    agent = GenericAgent(ScriptedClient([]), home=home)
    with pytest.raises(ConfigError, match="notes.png: not an image"):
        agent.put_task("look", images=["notes.png"])
    with pytest.raises(ConfigError, match="missing.gif: cannot read"):
        agent.put_task("look", images=["missing.gif"])
    assert agent.tasks.empty() and agent.llmclient.calls == []


def test_a_text_only_model_refuses_images_before_any_request(home):
    agent = GenericAgent(ScriptedClient([], name="local", vision=False), home=home)
    with pytest.raises(ConfigError, match="local cannot see images.*vision: true"):
        agent.put_task("look", images=[png(Path("a.png"), (40, 30))])
    assert agent.tasks.empty() and agent.llmclient.calls == []


def read_png_script(path: str) -> list[dict]:
    return [{"text": "<summary>look</summary>", "tool_calls": [
        {"name": "file_read", "args": {"path": path}}]}, {"text": "It is blue."}]


def test_file_read_of_a_png_returns_the_image_to_a_vision_model(run_agent):
    png(Path("chart.png"))
    agent, client, events = run_agent(read_png_script("chart.png"))
    result = client.calls[1]["messages"][0]["tool_results"][0]["content"]
    text, image = result
    assert text["type"] == "text" and "chart.png: PNG 3000x2000" in text["text"]
    assert "1568x1045 png" in text["text"]
    assert image["type"] == "image" and sent_size(image) == (1568, 1045)
    event = next(e for e in events if e["type"] == "tool_result")
    assert "PNG 3000x2000" in event["data"] and "data" not in event["images"][0]


def test_file_read_of_an_image_tells_a_text_only_model_what_it_is(home):
    png(Path("chart.webp.png"), (64, 48))
    client = ScriptedClient(read_png_script("chart.webp.png"), vision=False)
    agent = GenericAgent(client, home=home, cwd=Path.cwd())
    list(agent.run_task("read it"))
    result = client.calls[1]["messages"][0]["tool_results"][0]["content"]
    assert isinstance(result, str)
    assert "chart.webp.png: PNG 64x48" in result and "cannot see images" in result


def test_a_text_only_model_is_told_of_an_image_from_its_header_without_decoding(home):
    from test_images import png_header

    Path("huge.png").write_bytes(png_header(13000, 13000))  # decoding would be refused
    client = ScriptedClient(read_png_script("huge.png"), vision=False)
    agent = GenericAgent(client, home=home, cwd=Path.cwd())
    list(agent.run_task("read it"))
    result = client.calls[1]["messages"][0]["tool_results"][0]["content"]
    assert "huge.png: PNG 13000x13000" in result and "cannot see images" in result


def test_file_read_sniffs_images_by_content_and_reports_broken_ones(run_agent):
    png(Path("photo.dat"), (20, 10))
    Path("broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)
    agent, client, _ = run_agent([
        {"text": "<summary>read</summary>", "tool_calls": [
            {"name": "file_read", "args": {"path": "photo.dat"}},
            {"name": "file_read", "args": {"path": "broken.png"}}]},
        {"text": "done"}])
    first, second = client.calls[1]["messages"][0]["tool_results"]
    assert first["content"][1]["type"] == "image"
    assert second["content"].startswith('{"status": "error"')
    assert "broken.png: not an image this runtime can send" in second["content"]


def test_vision_defaults_on_for_official_endpoints_off_for_base_urls(home, monkeypatch):
    from llmcore import make_client

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-vision-0001")
    (home / "config.yaml").write_text(
        "models:\n"
        "  official: {provider: openai, model: gpt}\n"
        "  local: {provider: openai, model: qwen, base_url: 'http://127.0.0.1:9/v1'}\n"
        "  llava: {provider: openai, model: llava, base_url: 'http://127.0.0.1:9/v1',"
        " vision: true}\n"
        "  blind: {provider: anthropic, model: c, api_key: k, vision: 'no'}\n"
        "  spelled: {provider: openai, model: gpt, base_url: 'https://api.openai.com/v1'}\n"
        "  claude: {provider: anthropic, model: c, api_key: k,"
        " base_url: 'https://api.anthropic.com'}\n")
    names = ("official", "local", "llava", "blind", "spelled", "claude")
    seen = {name: make_client(name).vision for name in names}
    assert seen == {"official": True, "local": False, "llava": True, "blind": False,
                    "spelled": True, "claude": True}
    client = make_client("local")
    client.set_option("vision", "true")
    assert client.vision is True


def test_a_bad_vision_value_names_file_and_field(home):
    from llmcore import make_client

    (home / "config.yaml").write_text("models:\n  p: {provider: openai, model: m, "
                                      "base_url: 'http://127.0.0.1:9/v1', vision: maybe}\n")
    with pytest.raises(ConfigError, match=r"config.yaml: models.p.vision: expected true or false"):
        make_client("p")
