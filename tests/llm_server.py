"""A local test server for the three provider APIs, with fault injection.

Speaks the documented wire formats on 127.0.0.1: OpenAI Chat Completions
(``/v1/chat/completions``), OpenAI Responses (``/v1/responses``) and Anthropic Messages
(``/v1/messages``), streaming (SSE over chunked HTTP/1.1) and not, or replays a recorded
response byte for byte (golden streams). Each request pops the next queued ``Reply``;
every request is recorded.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator
from urllib.parse import urlsplit

import pytest
from genutil import drain

Event = tuple[str | None, Any]  # (SSE event name, data: dict or raw str)
BAD_EVENT = "{not json"
HTML_PAGE = ("text/html",
             "<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1>"
             "<hr><center>nginx</center></body></html>")
SHUTDOWN_POLL_SECONDS = 0.01  # serve_forever notices shutdown() this fast (default 0.5 s)
QUORUM_SECONDS = 30.0  # sanity bound: a request held for a quorum is answered after this


@dataclass
class Reply:
    text: str = ""
    thinking: str = ""
    tool_calls: list[tuple[str, str]] = field(default_factory=list)  # (name, raw JSON args)
    usage: tuple[int, int, int] = (100, 20, 10)  # input (incl. cached), cached, output
    cache_write: int = 0  # Anthropic: of the input, tokens written to the cache
    stop: str | None = None  # "max_tokens" | "refusal" | "failed" (Responses)
    chunk: int = 4  # characters per streamed text piece
    # faults
    status: int | None = None
    retry_after: str | None = None
    message: str = "injected failure"
    body: dict | None = None  # an error answer's whole body, or an error event's data
    # (default: the API's error shape)
    error_type: str | None = None
    drop_after: int | None = None  # close the connection after this many events
    stall_after: int | None = None  # go silent after this many events …
    stall: float = 0.0  # … for this many seconds
    error_after: int | None = None  # send an in-stream error event after this many events
    bad_event_after: int | None = None  # send an event that is not JSON after this many events
    end_after: int | None = None  # end the stream cleanly (no [DONE]) after this many events
    omit: str = ""  # leave out every event of this name (a malformed stream)
    drip: float = 0.0  # send the stream one byte at a time, this many seconds apart
    page: tuple[str, str] | None = None  # answer 200 with (content type, text), not the API
    repeat_name: bool = False  # tool-call chunks repeat function.name (llama.cpp's server)
    no_usage: bool = False  # the stream carries no usage (llama.cpp's server)
    raw: bytes | None = None  # a recorded HTTP response, sent byte for byte (golden streams)
    linger: float = 0.0  # … then keep the connection this long, unread, before closing it
    delay: float = 0.0  # wait this long before answering (a model that thinks)


def _pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] if text else []


# ----- OpenAI Chat Completions ------------------------------------------------------
def chat_events(r: Reply, model: str) -> Iterator[Event]:
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": model}

    def chunk(delta: dict, finish: str | None = None) -> Event:
        return None, {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    yield chunk({"role": "assistant", "content": ""})
    for p in _pieces(r.thinking, r.chunk):
        yield chunk({"reasoning_content": p})
    for p in _pieces(r.text, r.chunk):
        yield chunk({"content": p})
    for i, (name, args) in enumerate(r.tool_calls):
        yield chunk({"tool_calls": [{"index": i, "id": f"call_{i}_{len(args)}", "type": "function",
                                     "function": {"name": name, "arguments": ""}}]})
        again = {"name": name} if r.repeat_name else {}
        for p in _pieces(args, 5):
            yield chunk({"tool_calls": [{"index": i, "function": {**again, "arguments": p}}]})
    finish = {"max_tokens": "length", "refusal": "content_filter"}.get(r.stop or "", None)
    yield chunk({}, finish or ("tool_calls" if r.tool_calls else "stop"))
    if r.no_usage:
        yield None, "[DONE]"
        return
    inp, cached, out = r.usage
    yield None, {**base, "choices": [], "usage": {
        "prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out,
        "prompt_tokens_details": {"cached_tokens": cached}}}
    yield None, "[DONE]"


def chat_json(r: Reply, model: str) -> dict:
    msg: dict[str, Any] = {"role": "assistant", "content": r.text or None}
    if r.tool_calls:
        msg["tool_calls"] = [{"id": f"call_{i}", "type": "function",
                              "function": {"name": n, "arguments": a}}
                             for i, (n, a) in enumerate(r.tool_calls)]
    inp, cached, out = r.usage
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "message": msg,
                         "finish_reason": "tool_calls" if r.tool_calls else "stop"}],
            "usage": {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out,
                      "prompt_tokens_details": {"cached_tokens": cached}}}


# ----- Anthropic Messages -----------------------------------------------------------
def anthropic_events(r: Reply, model: str) -> Iterator[Event]:
    inp, cached, out = r.usage
    yield "message_start", {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": inp - cached - r.cache_write,
                  "cache_read_input_tokens": cached,
                  "cache_creation_input_tokens": r.cache_write, "output_tokens": 1}}}
    yield "ping", {"type": "ping"}
    idx = 0
    if r.thinking:
        yield from _block(idx, {"type": "thinking", "thinking": "", "signature": ""},
                          [{"type": "thinking_delta", "thinking": p}
                           for p in _pieces(r.thinking, r.chunk)]
                          + [{"type": "signature_delta", "signature": f"sig-{len(r.thinking)}"}])
        idx += 1
    if r.text:
        yield from _block(idx, {"type": "text", "text": ""},
                          [{"type": "text_delta", "text": p} for p in _pieces(r.text, r.chunk)])
        idx += 1
    for i, (name, args) in enumerate(r.tool_calls):
        yield from _block(idx, {"type": "tool_use", "id": f"toolu_{i}_{len(args)}", "name": name,
                                "input": {}},
                          [{"type": "input_json_delta", "partial_json": p}
                           for p in _pieces(args, 5)])
        idx += 1
    stop = r.stop or ("tool_use" if r.tool_calls else "end_turn")
    yield "message_delta", {"type": "message_delta",
                            "delta": {"stop_reason": stop, "stop_sequence": None},
                            "usage": {"output_tokens": out}}
    yield "message_stop", {"type": "message_stop"}


def _block(idx: int, start: dict, deltas: list[dict]) -> Iterator[Event]:
    yield "content_block_start", {"type": "content_block_start", "index": idx,
                                  "content_block": start}
    for d in deltas:
        yield "content_block_delta", {"type": "content_block_delta", "index": idx, "delta": d}
    yield "content_block_stop", {"type": "content_block_stop", "index": idx}


def anthropic_json(r: Reply, model: str) -> dict:
    content: list[dict] = [{"type": "text", "text": r.text}] if r.text else []
    content += [{"type": "tool_use", "id": f"toolu_{i}", "name": n, "input": json.loads(a)}
                for i, (n, a) in enumerate(r.tool_calls)]
    inp, cached, out = r.usage
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": "tool_use" if r.tool_calls else "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": inp - cached,
                                             "cache_read_input_tokens": cached,
                                             "output_tokens": out}}


# ----- OpenAI Responses -------------------------------------------------------------
def _response_obj(r: Reply, model: str, status: str, output: list[dict]) -> dict:
    inp, cached, out = r.usage
    obj: dict[str, Any] = {
        "id": "resp_1", "object": "response", "created_at": 1, "model": model, "status": status,
        "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
        "error": None, "incomplete_details": None}
    if status != "in_progress" and not r.no_usage:
        obj["usage"] = {"input_tokens": inp, "input_tokens_details": {"cached_tokens": cached},
                        "output_tokens": out, "output_tokens_details": {"reasoning_tokens": 0},
                        "total_tokens": inp + out}
    return obj


def responses_events(r: Reply, model: str) -> Iterator[Event]:
    seq = iter(range(10**6))
    out_items: list[dict] = []

    def ev(kind: str, **data: Any) -> Event:
        return kind, {"type": kind, "sequence_number": next(seq), **data}

    yield ev("response.created", response=_response_obj(r, model, "in_progress", []))
    if r.thinking:
        item = {"type": "reasoning", "id": "rs_1", "summary": []}
        yield ev("response.output_item.added", output_index=len(out_items), item=item)
        for p in _pieces(r.thinking, r.chunk):
            yield ev("response.reasoning_summary_text.delta", item_id="rs_1",
                     output_index=len(out_items), summary_index=0, delta=p)
        done = {**item, "summary": [{"type": "summary_text", "text": r.thinking}]}
        yield ev("response.output_item.done", output_index=len(out_items), item=done)
        out_items.append(done)
    if r.text:
        item = {"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress",
                "content": []}
        yield ev("response.output_item.added", output_index=len(out_items), item=item)
        for p in _pieces(r.text, r.chunk):
            yield ev("response.output_text.delta", item_id="msg_1", output_index=len(out_items),
                     content_index=0, delta=p, logprobs=[])
        done = {**item, "status": "completed",
                "content": [{"type": "output_text", "text": r.text, "annotations": []}]}
        yield ev("response.output_item.done", output_index=len(out_items), item=done)
        out_items.append(done)
    for i, (name, args) in enumerate(r.tool_calls):
        item = {"type": "function_call", "id": f"fc_{i}", "call_id": f"call_{i}_{len(args)}",
                "name": name, "arguments": "", "status": "in_progress"}
        yield ev("response.output_item.added", output_index=len(out_items), item=item)
        for p in _pieces(args, 5):
            yield ev("response.function_call_arguments.delta", item_id=f"fc_{i}",
                     output_index=len(out_items), delta=p)
        done = {**item, "arguments": args, "status": "completed"}
        yield ev("response.output_item.done", output_index=len(out_items), item=done)
        out_items.append(done)
    yield _responses_terminal(r, model, out_items, ev)


def _responses_terminal(r: Reply, model: str, items: list[dict], ev: Any) -> Event:
    if r.stop == "failed":
        obj = _response_obj(r, model, "failed", items)
        obj["error"] = {"code": r.error_type or "server_error", "message": r.message}
        return ev("response.failed", response=obj)
    if r.stop in ("max_tokens", "refusal"):
        obj = _response_obj(r, model, "incomplete", items)
        reason = "max_output_tokens" if r.stop == "max_tokens" else "content_filter"
        obj["incomplete_details"] = {"reason": reason}
        return ev("response.incomplete", response=obj)
    return ev("response.completed", response=_response_obj(r, model, "completed", items))


def responses_json(r: Reply, model: str) -> dict:
    events = list(responses_events(r, model))
    return events[-1][1]["response"]


ROUTES = {
    "/v1/chat/completions": (chat_events, chat_json),
    "/v1/messages": (anthropic_events, anthropic_json),
    "/v1/responses": (responses_events, responses_json),
}


def error_body(path: str, status: int, r: Reply) -> dict:
    kinds = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error",
             529: "overloaded_error"}
    kind = r.error_type or kinds.get(status, "api_error")
    if r.body is not None:
        return r.body
    if path == "/v1/messages":
        return {"type": "error", "error": {"type": kind, "message": r.message}}
    return {"error": {"message": r.message, "type": kind, "code": kind, "param": None}}


def stream_error(path: str, r: Reply) -> Event:
    kind = r.error_type or "overloaded_error"
    name = None if path == "/v1/chat/completions" else "error"
    if r.body is not None:
        return name, r.body
    if path == "/v1/messages":
        return "error", {"type": "error", "error": {"type": kind, "message": r.message}}
    if path == "/v1/responses":
        return "error", {"type": "error", "code": kind, "message": r.message, "param": None,
                         "sequence_number": 0}
    return None, {"error": {"message": r.message, "type": kind, "code": kind}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        return

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        received = time.perf_counter()
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        owner = self.server.owner
        target = self.path
        if "://" in target:  # the absolute form a client sends to a proxy: this server as one
            self.path = urlsplit(target).path
        record = {"path": self.path, "target": target, "headers": dict(self.headers),
                  "body": body, "bytes": length, "received": received}
        owner.requests.append(record)
        owner.enter()
        try:
            reply = owner.next_reply(body)
            time.sleep(reply.delay)
            self._answer(reply, body)
        finally:
            record["done"] = time.perf_counter()  # the last byte of the answer is out
            owner.leave()

    def _answer(self, reply: Reply, body: dict) -> None:
        if reply.raw is not None:
            return self._replay(reply.raw, reply.linger)
        if self.path not in ROUTES:
            return self._json(404, {"error": {"message": f"no route {self.path}"}})
        if reply.status:
            headers = {"Retry-After": reply.retry_after} if reply.retry_after else {}
            return self._json(reply.status, error_body(self.path, reply.status, reply), headers)
        if reply.page:
            return self._raw(200, *reply.page)
        events, as_json = ROUTES[self.path]
        model = body.get("model", "test-model")
        if not body.get("stream"):
            return self._json(200, as_json(reply, model))
        self._stream([e for e in events(reply, model) if e[0] != reply.omit], reply)

    def _replay(self, raw: bytes, linger: float) -> None:
        """Send a recorded response (status line, headers, framing and body) as it was."""
        self.close_connection = True
        try:
            self.wfile.write(raw)
            self.wfile.flush()
            time.sleep(linger)  # a request sent meanwhile on this connection goes unanswered
            self.connection.shutdown(socket.SHUT_WR)
        except OSError:
            return

    def _json(self, status: int, data: dict, headers: dict | None = None) -> None:
        self._raw(status, "application/json", json.dumps(data), headers)

    def _raw(self, status: int, content_type: str, text: str,
             headers: dict | None = None) -> None:
        raw = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(raw)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(raw)

    def _stream(self, events: list[Event], r: Reply) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            for i, (name, data) in enumerate(events):
                if i == r.drop_after:
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if i == r.end_after:
                    break
                if i == r.stall_after:
                    time.sleep(r.stall)
                if i == r.error_after:
                    self._send_event(*stream_error(self.path, r), r.drip)
                    break
                if i == r.bad_event_after:
                    self._send_event(name, BAD_EVENT, r.drip)
                self._send_event(name, data, r.drip)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            return  # the client went away (abort, idle timeout): nothing more to send

    def _send_event(self, name: str | None, data: Any, drip: float = 0.0) -> None:
        text = data if isinstance(data, str) else json.dumps(data)
        raw = (f"event: {name}\n" if name else "") + f"data: {text}\n\n"
        payload = raw.encode()
        self.server.owner.sent.append((time.perf_counter(), text))
        frame = f"{len(payload):x}\r\n".encode() + payload + b"\r\n"
        if not drip:
            self.wfile.write(frame)
            self.wfile.flush()
            return
        for i in range(len(frame)):
            self.wfile.write(frame[i:i + 1])
            self.wfile.flush()
            time.sleep(drip)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: LLMServer


class LLMServer:
    """Start with ``LLMServer().start()``; queue replies with ``queue(Reply(...), ...)``."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[dict] = []
        self.sent: list[tuple[float, str]] = []  # (perf_counter, SSE data) per event sent
        self.default = Reply(text="(no reply queued)")
        self.by_marker: dict[str, deque[Reply]] = {}  # replies for the requests naming a text
        self.active = 0  # requests being answered now
        self.max_active = 0  # the most answered at once
        self.quorum = 0  # hold requests until this many have been answered at once (then none)
        self._lock = threading.Lock()
        self._gathered = threading.Condition(self._lock)
        self._httpd: _Server | None = None

    def start(self) -> LLMServer:
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        threading.Thread(target=self._httpd.serve_forever, args=(SHUTDOWN_POLL_SECONDS,),
                         daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd:
            self._httpd.shutdown()
            self._httpd.server_close()

    @property
    def port(self) -> int:
        assert self._httpd is not None
        return self._httpd.server_address[1]

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def queue(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def answer(self, marker: str, *replies: Reply) -> None:
        """Replies for the requests whose body holds ``marker`` (a task's own text: every
        request of its conversation holds it), in order; then the default."""
        self.by_marker.setdefault(marker, deque()).extend(replies)

    def next_reply(self, body: dict | None = None) -> Reply:
        with self._lock:
            if self.by_marker and body is not None:
                text = json.dumps(body)
                for marker, replies in self.by_marker.items():
                    if marker in text:
                        return replies.popleft() if replies else self.default
            return self.replies.popleft() if self.replies else self.default

    def requests_for(self, marker: str) -> list[dict]:
        return [r for r in self.requests if marker in json.dumps(r["body"])]

    def enter(self) -> None:
        """A request arrives; with a ``quorum``, it waits until that many have been in at
        once (the last requests of a run, fewer than the quorum, then go straight on)."""
        with self._gathered:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self._gathered.notify_all()
            self._gathered.wait_for(lambda: self.max_active >= self.quorum, QUORUM_SECONDS)

    def leave(self) -> None:
        with self._lock:
            self.active -= 1

    def bodies(self, path: str | None = None) -> list[dict]:
        return [r["body"] for r in self.requests if path is None or r["path"] == path]


@pytest.fixture
def llm_server() -> Iterator[LLMServer]:
    server = LLMServer().start()
    yield server
    server.stop()


KINDS = ["openai", "openai-responses", "anthropic"]
GO = [{"role": "user", "content": "go"}]


def client_for(home: Any, server: LLMServer, **prof: Any) -> Any:
    """A client for profile ``p`` aimed at ``server``; its provider events (retries,
    switches) collect in ``client.events``."""
    import llmcore

    prof.setdefault("model", "test-model")
    client = llmcore.make_client("p", config_path=write_config(home, server, p=prof), home=home)
    client.events = []
    client.on_event = client.events.append
    return client


KIND_PATHS = {"openai": "/v1/chat/completions", "openai-responses": "/v1/responses",
              "anthropic": "/v1/messages"}


def write_config(home: Any, server: LLMServer, **profiles: dict) -> str:
    """A config.yaml in ``home`` whose profiles point at ``server``; returns its path."""
    import yaml

    models = {}
    for name, prof in profiles.items():
        prof = dict(prof)
        kind = prof.get("provider", "openai")
        if "base_url" not in prof and "mixin" not in prof:
            prof["base_url"] = server.anthropic_url if kind == "anthropic" else server.openai_url
        prof.setdefault("backoff_base", 0.01) if "mixin" not in prof else None
        models[name] = prof
    path = home / "config.yaml"
    path.write_text(yaml.safe_dump({"models": models}), encoding="utf-8")
    return str(path)


def run_chat(client: Any, messages: list[dict], tools: list[dict] | None = None) -> tuple:
    """Drive ``client.chat`` to the end: (streamed chunks, LLMResponse)."""
    return drain(client.chat(messages, tools))


def tool_schema(name: str, **props: str) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": f"the {name} tool",
        "parameters": {"type": "object", "properties": {k: {"type": v} for k, v in props.items()},
                       "required": list(props)}}}
