"""web_scan(screenshot=true) on a real Chromium: the viewport reaches a vision model as an
image in its API's own format (through the real SDKs), a text-only model gets the scan and
a note (SPEC §9, §10)."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
from llm_server import KIND_PATHS, KINDS, Reply, llm_server, write_config
from PIL import Image
from web_site import COLOUR, goto, web_browser, web_site

import llmcore
from ga import GenericAgent
from llmcore.scripted import ScriptedClient
from tools.web.execute import web_execute_js

__all__ = ["llm_server", "web_browser", "web_site"]
KEY = "sk-test-SHOTS-7a1c"
WIDE = (2400, 1200)  # a viewport wider than a model is sent: downscaled to 1568x784
SHOWN = "[SCREENSHOT] The visible screen ({}x{} px) follows as an image"
NOT_SENT = "[SCREENSHOT] Not sent: the current model cannot see images."
COLOUR_TOLERANCE = 3


def agent_for(home: Path, client, browser) -> GenericAgent:
    agent = GenericAgent(client, home=home, cwd=Path.cwd())
    agent._browser = browser  # the module's browser, left running for the next test
    return agent


def sdk_agent(home: Path, server, browser, kind: str, **prof) -> GenericAgent:
    cfg = write_config(home, server, p={"provider": kind, "model": "m", "api_key": KEY, **prof})
    return agent_for(home, llmcore.make_client("p", config_path=cfg, home=home), browser)


def viewport(browser) -> tuple[int, int]:
    size = web_execute_js(browser, "[innerWidth * devicePixelRatio, innerHeight * "
                                   "devicePixelRatio]", no_monitor=True)["js_return"]
    return tuple(size)


def sent_images(kind: str, body: dict) -> list[tuple[int, str, str]]:
    """(index of the message, "user" or "result", base64 data) of every image in a request."""
    items = body["input"] if kind == "openai-responses" else body["messages"]
    found = []
    for i, item in enumerate(items):
        content = item.get("output") if "output" in item else item.get("content")
        where = "user" if item.get("role") == "user" else "result"
        for part in content if isinstance(content, list) else []:
            found += [(i, where, d) for d in _image_data(part)]
            if part.get("type") == "tool_result" and isinstance(part["content"], list):
                found += [(i, "result", d) for p in part["content"] for d in _image_data(p)]
    return found


def _image_data(part: dict) -> list[str]:
    """Anthropic ``image`` (base64 source), Chat ``image_url``, Responses ``input_image``."""
    if part["type"] == "image":
        assert part["source"]["type"] == "base64"
        return [part["source"]["data"]]
    urls = {"image_url": lambda: part["image_url"]["url"], "input_image": lambda: part[
        "image_url"]}
    if part["type"] not in urls:
        return []
    head, _, data = urls[part["type"]]().partition(",")
    assert head == "data:image/png;base64"
    return [data]


def decoded(data: str) -> Image.Image:
    return Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")


def near(pixel: tuple, colour: tuple) -> bool:
    return all(abs(a - b) <= COLOUR_TOLERANCE for a, b in zip(pixel, colour, strict=True))


def queue_scan(server) -> None:
    server.queue(Reply(text="<summary>look</summary>Looking.",
                       tool_calls=[("web_scan", json.dumps({"screenshot": True}))]),
                 Reply(text="The page is red."))


@pytest.mark.parametrize("kind", KINDS)
def test_screenshot_reaches_a_vision_model_as_the_viewport_image(home, llm_server, web_browser,
                                                                 web_site, kind):
    goto(web_browser, web_site("/colour.html"))
    width, height = viewport(web_browser)
    queue_scan(llm_server)
    agent = sdk_agent(home, llm_server, web_browser, kind, vision=True)
    assert list(agent.run_task("what colour is the page?"))[-1]["result"] == "CURRENT_TASK_DONE"
    body = llm_server.bodies(KIND_PATHS[kind])[1]
    ((at, where, data),) = sent_images(kind, body)
    shot = decoded(data)
    assert shot.size == (width, height)
    assert near(shot.getpixel((width - 5, height - 5)), COLOUR)  # the page, not a blank tab
    text = json.dumps(body)
    assert "COLOUR-PAGE" in text and SHOWN.format(width, height) in text
    if kind == "openai":  # tool messages take no images: the next user message has it
        assert where == "user" and body["messages"][at - 1]["role"] == "tool"
    else:
        assert where == "result"


@pytest.mark.parametrize("kind", KINDS)
def test_a_text_only_model_gets_the_scan_and_a_note_instead_of_the_image(
        home, llm_server, web_browser, web_site, kind):
    goto(web_browser, web_site("/colour.html"))
    queue_scan(llm_server)
    agent = sdk_agent(home, llm_server, web_browser, kind)  # a base_url: vision off by default
    assert agent.llmclient.vision is False
    list(agent.run_task("what colour is the page?"))
    body = llm_server.bodies(KIND_PATHS[kind])[1]
    text = json.dumps(body)
    assert sent_images(kind, body) == [] and "base64" not in text
    assert "COLOUR-PAGE" in text and NOT_SENT in text


def test_a_viewport_wider_than_the_limit_is_downscaled_keeping_its_aspect(home, web_browser,
                                                                          web_site):
    goto(web_browser, web_site("/colour.html"))
    tab = web_browser.tab()
    tab.session.call("Emulation.setDeviceMetricsOverride", {
        "width": WIDE[0], "height": WIDE[1], "deviceScaleFactor": 1, "mobile": False})
    script = [{"text": "<summary>look</summary>", "tool_calls": [
        {"name": "web_scan", "args": {"screenshot": "true", "tabs_only": "true"}}]},
        {"text": "red"}]
    try:
        agent = agent_for(home, ScriptedClient(script), web_browser)
        list(agent.run_task("look"))
    finally:
        tab.session.call("Emulation.clearDeviceMetricsOverride")
    text, image = agent.llmclient.calls[1]["messages"][0]["tool_results"][0]["content"]
    assert decoded(image["data"]).size == (1568, 784)
    assert SHOWN.format(*WIDE) in text["text"] and "(1568x784 png)" in text["text"]
    assert '"tabs_count"' in text["text"] and "COLOUR-PAGE" not in text["text"]


def test_a_failed_scan_sends_no_screenshot(home, web_browser):
    script = [{"text": "<summary>look</summary>", "tool_calls": [
        {"name": "web_scan", "args": {"screenshot": True, "switch_tab_id": "99"}}]},
        {"text": "no such tab"}]
    agent = agent_for(home, ScriptedClient(script), web_browser)
    list(agent.run_task("look"))
    content = agent.llmclient.calls[1]["messages"][0]["tool_results"][0]["content"]
    assert isinstance(content, str) and "no tab '99'" in content
    assert "[SCREENSHOT]" not in content
