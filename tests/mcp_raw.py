"""A stdio MCP server written by hand, one JSON-RPC message a line, that breaks the rules
the SDK's servers keep (``python mcp_raw.py MODE``):

- ``error``: a call is answered with JSON-RPC error -32000, the connection stays up;
- ``exit``: a call ends the server, unanswered;
- ``init_error``: ``initialize`` is answered with error -32000;
- ``pages``: ``tools/list`` repeats its ``nextCursor`` for ever, and its second page repeats
  the first page's tool under the same name;
- ``schema``: a call's result lacks the structured content the tool's outputSchema asks for.

Each request's method (and cursor) is written to stderr, which ga keeps in the server's log.
"""

from __future__ import annotations

import json
import sys

MODE = sys.argv[1] if len(sys.argv) > 1 else ""
QUOTA = "the quota is used up"
OUTPUT_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def tool(name: str, description: str) -> dict:
    return {"name": name, "description": description, "inputSchema": {"type": "object"},
            "outputSchema": OUTPUT_SCHEMA}


def tools_page(cursor: str | None) -> dict:
    if MODE != "pages":
        return {"tools": [tool("t", "The only tool.")]}
    if cursor is None:
        return {"tools": [tool("t", "The first t.")], "nextCursor": "more"}
    return {"tools": [tool("t", "A second t."), tool("u", "The u tool.")], "nextCursor": "more"}


def call_result() -> dict:
    if MODE == "schema":
        return {"content": [{"type": "text", "text": "no n here"}]}
    return {"content": [{"type": "text", "text": "ok"}], "structuredContent": {"n": 1}}


def answer(request: dict) -> dict:
    method, params = request.get("method"), request.get("params") or {}
    if method == "initialize" and MODE == "init_error":
        return {"error": {"code": -32000, "message": "the licence has expired"}}
    if method == "initialize":
        return {"result": {"protocolVersion": params.get("protocolVersion"),
                           "capabilities": {"tools": {}},
                           "serverInfo": {"name": "raw", "version": "1"}}}
    if method == "tools/list":
        return {"result": tools_page(params.get("cursor"))}
    if method == "tools/call" and MODE == "exit":
        sys.exit(3)
    if method == "tools/call" and MODE == "error":
        return {"error": {"code": -32000, "message": QUOTA}}
    if method == "tools/call":
        return {"result": call_result()}
    return {"error": {"code": -32601, "message": f"no method {method}"}}


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        print(request.get("method"), (request.get("params") or {}).get("cursor", ""),
              file=sys.stderr, flush=True)
        if "id" not in request:  # a notification
            continue
        reply = {"jsonrpc": "2.0", "id": request["id"], **answer(request)}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
