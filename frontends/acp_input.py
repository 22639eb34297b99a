"""What an editor sends ``ga acp`` (SPEC §13): a ``session/prompt``'s content blocks as a
task and its images, and the MCP servers of ``session/new`` / ``session/load`` as the
session's own servers (SPEC §12).
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any
from urllib.parse import unquote, urlparse

from llmcore.base import ConfigError

from .task_input import with_context

CONTEXT_TAG = "resource"  # an embedded resource reaches the model in a <resource> block
NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_-]+")  # a server name is part of its tools' names
TRANSPORTS = ("stdio", "http")  # sse and acp servers are not offered (mcpCapabilities)


# ---- prompts ----------------------------------------------------------------------------
def file_name(uri: str) -> str:
    """A ``file://`` URI as its path; any other URI as it is."""
    parts = urlparse(uri)
    return unquote(parts.path) if parts.scheme == "file" else uri


def joined(parts: list[str]) -> str:
    """Text pieces as one text, a space between two that would otherwise run together."""
    out = ""
    for part in parts:
        if out and part and not out[-1].isspace() and not part[0].isspace():
            out += " "
        out += part
    return out


def read_prompt(blocks: Any) -> tuple[str, list[bytes]]:
    """A ``session/prompt``'s content as (task, images): text blocks are the task, a
    ``resource_link`` names its file there, an embedded ``resource`` is named there and its
    text goes with the task as context (neutralised like piped stdin); images, inline or
    embedded, take the image route. Anything else is a ``ConfigError``."""
    if not isinstance(blocks, list) or not blocks:
        raise ConfigError(None, "prompt", "expected a list of content blocks")
    parts: list[str] = []
    contexts: list[str] = []
    images: list[bytes] = []
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append(str(block.get("text") or ""))
        elif kind == "resource_link":
            parts.append(file_name(str(block.get("uri") or block.get("name") or "")))
        elif kind == "image":
            images.append(decoded(block.get("data"), "an image"))
        elif kind == "resource":
            resource(block.get("resource") or {}, parts, contexts, images)
        else:
            raise ConfigError(None, "prompt", f"{kind or 'this'} content is not supported; "
                              "send text, images, resources or resource links")
    task = joined(parts).strip()
    if not task and not images:
        raise ConfigError(None, "prompt", "the prompt is empty; send the task as text")
    for context in contexts:
        task = with_context(task, context, CONTEXT_TAG)
    return task, images


def resource(res: Any, parts: list[str], contexts: list[str], images: list[bytes]) -> None:
    if not isinstance(res, dict):
        raise ConfigError(None, "prompt", "a resource block's resource must be an object "
                          "(uri, and text or blob)")
    name = file_name(str(res.get("uri") or ""))
    parts.append(name)
    if isinstance(res.get("text"), str):
        contexts.append(f"{name}\n{res['text']}")
    elif str(res.get("mimeType") or "").startswith("image/"):
        images.append(decoded(res.get("blob"), name))
    else:
        raise ConfigError(None, "prompt", f"{name}: a binary resource of type "
                          f"{res.get('mimeType') or 'unknown'} cannot be read; send text or "
                          "an image")


def decoded(data: Any, what: str) -> bytes:
    try:
        return base64.b64decode(str(data or ""), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(None, "prompt", f"{what}: the data is not base64") from None


# ---- MCP servers --------------------------------------------------------------------------
def mcp_servers(entries: Any, method: str) -> list:
    """The ``mcpServers`` of a ``session/new`` or ``session/load`` as ``tools.mcp``
    ``ServerConfig``s (Codex's keys; never ``required``: ACP cannot say so). A bad entry is a
    ``ConfigError`` naming the server."""
    from tools.mcp import parse_server

    if entries is None:
        return []
    if not isinstance(entries, list):
        raise ConfigError(method, "mcpServers", "expected a list of servers")
    servers = []
    for i, entry in enumerate(entries):
        raw_name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(raw_name, str) or not NOT_IN_NAME.sub("", raw_name):
            raise ConfigError(method, f"mcpServers[{i}].name", "expected the server's name")
        name = NOT_IN_NAME.sub("_", raw_name.strip())
        try:
            servers.append(parse_server(name, codex_settings(entry, name), method))
        except ConfigError as e:  # named as the editor sent it
            field = (e.field or "").replace(f"mcp_servers.{name}", f"mcpServers.{raw_name}", 1)
            raise ConfigError(method, field.replace(".http_headers", ".headers"),
                              e.message) from None
    return servers


def codex_settings(entry: dict, name: str) -> dict:
    """An ACP server entry (``McpServerStdio``, or ``type: http``) in Codex's keys."""
    kind = entry.get("type", "stdio")
    if kind not in TRANSPORTS:
        raise ConfigError(None, f"mcp_servers.{name}.type", f"{kind!r} servers are not "
                          "supported; send stdio or http (streamable HTTP) servers")
    if kind == "http":
        return {"url": entry.get("url"),
                "http_headers": pairs(entry.get("headers"), f"mcp_servers.{name}.headers")}
    return {"command": entry.get("command"), "args": entry.get("args") or [],
            "env": pairs(entry.get("env"), f"mcp_servers.{name}.env")}


def pairs(items: Any, where: str) -> dict:
    """ACP's ``[{name, value}, …]`` as a mapping."""
    if items is None:
        return {}
    if not isinstance(items, list) or not all(
            isinstance(item, dict) and isinstance(item.get("name"), str) for item in items):
        raise ConfigError(None, where, "expected a list of {name, value} objects")
    return {item["name"]: item.get("value") for item in items}
