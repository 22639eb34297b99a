"""An MCP tool result as the runtime's tool output: its text content, else its structured
content as JSON; images through the image route (llmcore.images), each named in the text;
``isError`` as an error result. Masked, then budgeted like every tool result (the loop then
neutralises it)."""

from __future__ import annotations

import base64
import json
from typing import Any, Callable

import mcp_types as types

from llmcore import images
from tools import clip

NO_OUTPUT = "(the tool returned no output)"


def tool_output(result: types.CallToolResult, label: str, vision: bool, budget: int,
                redact: Callable[[str], str] = str) -> tuple[Any, list[dict]]:
    """(data, image blocks) for ``result`` of the tool ``label``; ``vision``: whether the
    model sees images (else each is a line saying what it was). ``redact`` masks the text
    before it is cut to ``budget``."""
    texts: list[str] = []
    blocks: list[dict] = []
    for item in result.content:
        if isinstance(item, types.TextContent):
            texts.append(item.text)
        elif isinstance(item, types.ImageContent):
            texts.append(_image(item, f"{label} image {len(blocks) + 1}", vision, blocks))
        else:
            texts.append(_other(item))
    text = "\n".join(texts)
    if not any(isinstance(i, types.TextContent) for i in result.content) and \
            result.structured_content is not None:
        structured = json.dumps(result.structured_content, ensure_ascii=False)
        text = "\n".join([structured, *texts]) if texts else structured
    text = clip(redact(text) or NO_OUTPUT, budget)
    if result.is_error:
        return {"status": "error", "msg": f"[Error] {label}: {text}"}, blocks
    return text, blocks


def _image(item: types.ImageContent, name: str, vision: bool, blocks: list[dict]) -> str:
    """Send the image when the model sees images (added to ``blocks``); the line for the text."""
    try:
        picture = images.load_image(base64.b64decode(item.data, validate=True), name)
    except (ValueError, images.ImageError) as e:  # bad base64, or no usable image
        return f"[image ({item.mime_type}): not usable: {e}]"
    block = picture.block()
    if not vision:
        return images.text_only_note(block)["text"]
    blocks.append(block)
    return f"[image: {images.describe(block)}, shown]"


def _other(item: Any) -> str:
    """A content block that is neither text nor an image, as a line of text."""
    if isinstance(item, types.EmbeddedResource):
        resource = item.resource
        if isinstance(resource, types.TextResourceContents):
            return resource.text
        return f"[resource {resource.uri} ({resource.mime_type or 'binary'}): not shown]"
    if isinstance(item, types.ResourceLink):
        return f"[resource link: {item.uri}" + (f" ({item.name})]" if item.name else "]")
    kind = getattr(item, "type", type(item).__name__)
    return f"[{kind} content ({getattr(item, 'mime_type', '?')}): not shown]"
