"""What the session hands one provider call, and the SDK client options they share."""

from __future__ import annotations

import json
import logging
import socket
from dataclasses import dataclass, field
from typing import Any

from .config import Profile

log = logging.getLogger("ga.llm")
REASONING_MODEL_PREFIXES = ("o1", "o3", "o4", "gpt-5")


@dataclass
class Request:
    """One streamed API call: canonical (repaired, trimmed) history and the tools."""

    system: str | None
    messages: list[dict]
    tools: list[dict] | None
    profile: Profile
    tool_started: bool = False  # set by the provider once a tool-call piece has arrived
    extra: dict[str, Any] = field(default_factory=dict)


def close_stream(stream: Any) -> None:
    """Cut an SDK stream from another thread, at once: shutting the socket down wakes a
    read that is blocked waiting for the next chunk (closing alone may not)."""
    if stream is None:
        return
    response = getattr(stream, "response", None)
    network = getattr(response, "extensions", {}).get("network_stream")
    sock = network.get_extra_info("socket") if network is not None else None
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            log.debug("socket already closed")
    stream.close()


def sdk_options(profile: Profile, api_key: str | None, sdk: Any) -> dict[str, Any]:
    """Keyword arguments for ``openai.OpenAI`` / ``anthropic.Anthropic``: no SDK retries."""
    import httpx2

    timeout = httpx2.Timeout(connect=profile.timeout, read=profile.read_timeout,
                             write=profile.timeout, pool=profile.timeout)
    opts: dict[str, Any] = {"api_key": api_key or "no-key", "max_retries": 0, "timeout": timeout}
    if profile.base_url:
        opts["base_url"] = profile.base_url
    if profile.proxy:
        opts["http_client"] = sdk.DefaultHttpxClient(proxy=profile.proxy, timeout=timeout)
    return opts


def is_reasoning_model(model: str) -> bool:
    name = model.rsplit("/", 1)[-1].lower()
    return name.startswith(REASONING_MODEL_PREFIXES)


def tool_input_json(block: dict) -> str:
    """A tool_use block's input as the JSON text the model wrote (raw if it was invalid)."""
    data = block.get("input") or {}
    if isinstance(data, dict) and set(data) == {"_raw"}:
        return str(data["_raw"])
    return json.dumps(data, ensure_ascii=False)


def result_text(block: dict) -> str:
    content = block.get("content", "")
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def joined_text(blocks: list[dict]) -> str:
    return "\n".join(b["text"] for b in blocks if b["type"] == "text")
