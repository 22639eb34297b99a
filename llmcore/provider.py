"""What the session hands one provider call, and what every provider's stream shares: SDK
client options, reading SDK events safely, cutting a stream, the total deadline.

A provider's ``stream(req, resp)`` yields answer text (``str``) and reasoning
(``ThinkingChunk``) exactly as they arrive, and fills ``resp``'s other fields; the session
joins the yielded pieces into ``resp.content`` and ``resp.thinking`` once.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from .base import LLMResponse, Usage
from .config import Profile
from .history import CHARS_PER_TOKEN, history_chars, message_chars
from .retry import HINTS, BadResponse, StreamFailure, body_error, error_status

log = logging.getLogger("ga.llm")
REASONING_MODEL_PREFIXES = ("o1", "o3", "o4", "gpt-5")
EVENT_STREAM = "text/event-stream"  # the one content type a streamed answer may have
RECUT_SECONDS = 0.1  # after the deadline, try to cut the stream again this often
WATCHDOG_IDLE = 30.0  # the deadline thread ends after this many seconds with no request
BODY_PEEK_BYTES = 65536  # of an answer that is no event stream, read to report it
NO_KEY = "no-key"  # the SDKs need a string where no key is sent; plainly not a key
LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # half a UTF-16 pair: no writer stores it
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # one in JSON text, when parsed


@dataclass
class Request:
    """One streamed API call: canonical (repaired, trimmed) history and the tools."""

    system: str | None
    messages: list[dict]
    tools: list[dict] | None
    profile: Profile
    tool_started: bool = False  # set by the provider once a tool-call piece has arrived


class ListMemo:
    """A value computed from a list once, and again only when the list holds other items
    (compared by identity: an item is never changed in place). A tool list is made once per
    task and sent with every request: its JSON is built once."""

    def __init__(self, make: Callable[[list], Any]):
        self._make = make
        self._items: tuple | None = None
        self._value: Any = None

    def __call__(self, items: list) -> Any:
        held = self._items
        if held is None or len(held) != len(items) or any(
                a is not b for a, b in zip(held, items, strict=True)):
            self._value = self._make(items)
            self._items = tuple(items)  # held, so no item's id is taken by a new object
        return self._value


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


class Events:
    """An SDK stream's events. A 200 answer that is no event stream (an HTML page, a proxy's
    text or JSON: any content type named but ``text/event-stream``) or an event that is not
    JSON raises ``BadResponse`` naming the URL and what came back; an error object in a JSON
    answer is a ``StreamFailure``. What the server sent goes in whole: it is masked before
    it is shortened (``retry.classify``)."""

    def __init__(self, stream: Any):
        self.stream = stream
        self.response = getattr(stream, "response", None)
        self.url = str(getattr(self.response, "url", "") or "") or None

    def __iter__(self) -> Iterator[Any]:
        headers = getattr(self.response, "headers", None) or {}
        ctype = headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype and ctype != EVENT_STREAM:
            raise self._not_a_stream(ctype)
        try:
            yield from self.stream
        except json.JSONDecodeError as e:
            raise BadResponse("bad response", self.url, "a stream event is not JSON",
                              HINTS["bad_response"], said=e.doc) from None

    def _not_a_stream(self, ctype: str) -> Exception:
        text = _head(self.response).decode("utf-8", errors="replace")
        kind, message = None, ""
        if "json" in ctype:
            try:
                kind, message = body_error(json.loads(text), limit=None)
            except json.JSONDecodeError:
                log.debug("a JSON answer that is not JSON")
        if error_status(kind) is not None:  # an API error sent with status 200
            return StreamFailure(kind, message)
        return BadResponse("bad response", self.url, f"answered 200 {ctype}, not an event "
                           "stream", HINTS["bad_response"], said=text)

    def malformed(self, what: str) -> BadResponse:
        """An event out of the API's order (a delta for a block never started)."""
        return BadResponse("bad response", self.url, f"a malformed stream: {what}",
                           HINTS["bad_response"])

    def dropped(self, missing: str) -> BadResponse:
        """The stream ended without ``missing``: the server dropped it."""
        return BadResponse("dropped stream", self.url, f"the stream ended without {missing}",
                           HINTS["dropped"])


def _head(response: Any) -> bytes:
    """The first ``BODY_PEEK_BYTES`` of a body: enough to say what it is, whatever its size."""
    got = bytearray()
    for part in response.iter_bytes():
        got += part
        if len(got) >= BODY_PEEK_BYTES:
            break
    response.close()
    return bytes(got[:BODY_PEEK_BYTES])


class Watchdog:
    """Cuts requests still running after their deadline (``Deadline``), from one thread a
    session's requests share: a request starts no thread of its own. The thread starts with
    the first deadline and sleeps until the earliest one due (a request that ends wakes
    nobody), at most ``WATCHDOG_IDLE`` seconds at a time; it ends once that long passes
    without a request."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._armed: set[Deadline] = set()
        self._wake = math.inf  # when the thread looks next
        self._idle_until = 0.0
        self.thread: threading.Thread | None = None

    def deadline(self, seconds: float | None, cut: Callable[[], None]) -> Deadline:
        return Deadline(seconds, cut, self)

    def arm(self, deadline: Deadline) -> None:
        with self._cond:
            self._armed.add(deadline)
            if self.thread is None:
                self.thread = threading.Thread(target=self._watch, name="ga-deadline",
                                               daemon=True)
                self.thread.start()
            elif deadline.due < self._wake:  # else the thread wakes in time by itself
                self._cond.notify()

    def disarm(self, deadline: Deadline) -> None:
        """The request ended: its ``cut`` is not called from now on."""
        with self._cond:
            self._armed.discard(deadline)
            self._idle_until = time.monotonic() + WATCHDOG_IDLE

    def _watch(self) -> None:
        with self._cond:
            try:
                while self._armed or time.monotonic() < self._idle_until:
                    now = time.monotonic()
                    for deadline in [d for d in self._armed if d.due <= now]:
                        deadline.expired = True
                        deadline.cut()  # again until the request ends: it may not be open yet
                        deadline.due = now + RECUT_SECONDS
                    self._wake = min([d.due for d in self._armed] + [now + WATCHDOG_IDLE])
                    self._cond.wait(self._wake - now)
            finally:
                self.thread = None
                self._wake = math.inf


class Deadline:
    """Cuts a request still running after ``seconds`` in all (``request_timeout``): a server
    that drips a byte now and then never trips the idle ``read_timeout``. ``cut`` is the
    provider's ``cancel``; it is repeated until the request ends, in case the stream was not
    open yet. Use as a context manager around one request; made by a ``Watchdog``."""

    def __init__(self, seconds: float | None, cut: Callable[[], None], watchdog: Watchdog):
        self.seconds = seconds
        self.cut = cut
        self.expired = False
        self.due = math.inf
        self._watchdog = watchdog

    def __enter__(self) -> Deadline:
        if self.seconds:
            self.due = time.monotonic() + self.seconds
            self._watchdog.arm(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.seconds:
            self._watchdog.disarm(self)

    def failure(self, url: str | None) -> BadResponse:
        return BadResponse("timeout", url, f"no complete answer within request_timeout "
                           f"({self.seconds:g} s)", HINTS["timeout"])


def sdk_options(profile: Profile, api_key: str | None, sdk: Any) -> dict[str, Any]:
    """Keyword arguments for ``openai.OpenAI`` / ``anthropic.Anthropic``: no SDK retries;
    the SDK's own HTTP client settings, with the process's one TLS context."""
    import httpx2

    timeout = httpx2.Timeout(connect=profile.timeout, read=profile.read_timeout,
                             write=profile.timeout, pool=profile.timeout)
    opts: dict[str, Any] = {"api_key": api_key or NO_KEY, "max_retries": 0, "timeout": timeout}
    if profile.base_url:
        opts["base_url"] = profile.base_url
    opts["http_client"] = sdk.DefaultHttpxClient(proxy=profile.proxy, timeout=timeout,
                                                 verify=tls_context())
    return opts


@functools.lru_cache(maxsize=1)
def tls_context() -> Any:
    """The TLS context every client of this process shares (the HTTP library's default,
    made once): loading the certificate store costs ≈ 30 ms of CPU, which a client made for
    each session — a batch task, an editor's session — would pay every time."""
    import httpx2

    return httpx2.create_ssl_context()


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
    """A tool result's text; of a content list (text and image blocks), its text blocks."""
    content = block.get("content", "")
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(b, dict) and "type" in b for b in content):
        return joined_text(content)
    return json.dumps(content, ensure_ascii=False)


def joined_text(blocks: list[dict]) -> str:
    return "\n".join(b["text"] for b in blocks if b["type"] == "text")


def tools_chars(tools: list[dict]) -> int:
    """Size of a tool list as it counts against the context window: its JSON form."""
    return len(json.dumps(tools, ensure_ascii=False))


def estimate_usage(req: Request, resp: LLMResponse,
                   size: Callable[[dict], int] = message_chars,
                   tools_size: Callable[[list[dict]], int] = tools_chars) -> Usage:
    """Usage from the characters sent and received, for a server that reports none
    (``size``, ``tools_size``: a message's and the tool list's characters, e.g. the
    session's memos)."""
    sent = len(req.system or "") + history_chars(req.messages, size)  # images by pixels
    if req.tools:
        sent += tools_size(req.tools)
    got = len(resp.content) + len(resp.thinking) + sum(
        len(tc.function.name) + len(tc.function.arguments) for tc in resp.tool_calls)
    return Usage(input=-(-sent // CHARS_PER_TOKEN), output=-(-got // CHARS_PER_TOKEN),
                 estimated=True)


def compact(obj: Any) -> str:
    """JSON as sent on the wire (the SDKs' own serialisation: no spaces, UTF-8 kept)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def json_body(params: dict[str, Any], built: dict[str, str]) -> bytes:
    """A request body: ``params`` plus fields already serialised with ``compact`` (``built``:
    the tool list, made once per list, and the messages as a list of wire forms made once
    each; neither is re-walked on every call)."""
    head = compact(params)
    fields = ",".join(f'"{key}":{text}' for key, text in built.items())
    sep = "," if params and fields else ""
    return f"{head[:-1]}{sep}{fields}}}".encode()


def json_list(items: list[str]) -> str:
    """A JSON list of items already serialised (empty ones left out)."""
    return f"[{','.join(item for item in items if item)}]"


def valid_text(text: str) -> str:
    """``text`` as every writer can store it: a lone surrogate (a reply's JSON may escape one,
    ``"\\ud800"``) becomes U+FFFD; a ``ThinkingChunk`` stays one."""
    if LONE_SURROGATE.search(text) is None:
        return text
    return type(text)(LONE_SURROGATE.sub("\ufffd", text))


def valid_arguments(raw: str) -> str:
    """A call's JSON arguments as ``valid_text``, and with no lone surrogate once parsed:
    arguments that escape one are written again with U+FFFD there, others stay as made."""
    raw = valid_text(raw)
    if SURROGATE_ESCAPE.search(raw) is None:
        return raw
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return raw  # not JSON: the call fails as such, with this text
    clean = _valid_data(value)
    return raw if clean == value else json.dumps(clean, ensure_ascii=False)


def _valid_data(value: Any) -> Any:
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, list):
        return [_valid_data(v) for v in value]
    if isinstance(value, dict):
        return {valid_text(k): _valid_data(v) for k, v in value.items()}
    return value
