"""Which provider failures are transient, and the tenacity policy that retries them.

Providers raise SDK exceptions, ``StreamFailure`` for errors reported inside an HTTP-200
stream, or ``BadResponse`` for a 200 answer that is no usable stream; ``classify`` turns any
of them into a ``Failure`` record the session acts on, with the URL and a hint where known.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Callable

from tenacity import RetryCallState, Retrying, retry_if_exception, wait_exponential_jitter

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})
AUTH_STATUS = frozenset({401, 403})
# error "type"/"code" strings seen in stream bodies, mapped to the HTTP status they mean
ERROR_TYPES = {
    "overloaded_error": 529, "overloaded": 529, "rate_limit_error": 429,
    "rate_limit_exceeded": 429, "api_error": 500, "server_error": 500,
    "internal_server_error": 500, "timeout_error": 504, "service_unavailable": 503,
    "authentication_error": 401, "invalid_api_key": 401, "permission_error": 403,
    "invalid_request_error": 400, "request_too_large": 413, "not_found_error": 404,
    "context_length_exceeded": 400, "exceed_context_size_error": 400,
}
_CONTEXT_RE = re.compile(
    r"context[ _-]?(length|window|size)|prompt is too long|too many tokens|maximum context|"
    r"input is too long|reduce the length", re.I)
CONTEXT_KINDS = ("context_length_exceeded", "exceed_context_size_error")  # OpenAI, llama.cpp
_OVERLOAD_RE = re.compile(r"overload|temporarily unavailable|try again later", re.I)
_TITLE_RE = re.compile(r"<title[^>]*>(.*?)</title>", re.I | re.S)
_TAG_RE = re.compile(r"<[^>]+>")
SNIPPET_CHARS = 200  # of a body or event shown in an error
MESSAGE_CHARS = 300
CONNECT_RETRIES = 2  # a refused (or unresolvable) connection is retried at most this often
HINTS = {
    "connect": "is the server running at that address?",
    "dropped": ("the server closed the stream before the reply ended; check its log "
                "(a prompt larger than the server's context size does this: lower context_win "
                "or raise the server's context size)"),
    "bad_response": "a proxy, or a base_url that points at something else?",
    "timeout": "the server answers too slowly; raise request_timeout if that is expected",
    "/responses": "this server may not implement the Responses API; use provider: openai",
    "/messages": "this server may not implement the Messages API; use provider: openai",
    "404": "check base_url (OpenAI-compatible URLs end in /v1) and the model name",
}


class StreamFailure(Exception):
    """An error reported inside a successful (HTTP 200) stream; ``message`` as the server
    sent it (``classify`` masks it, then shortens it)."""

    def __init__(self, kind: str | int | None, message: str):
        self.kind = kind
        self.message = message
        super().__init__(f"{kind or 'error'}: {message}")


class BadResponse(Exception):
    """A 200 answer that is no usable stream (an HTML page, an event that is not JSON, a
    stream that ends early, a deadline passed): transient, reported with URL and hint.
    ``said``: what the server sent, as it came (``classify`` masks it, then shortens it)."""

    def __init__(self, status: str, url: str | None, message: str, hint: str = "",
                 said: str = ""):
        self.status = status
        self.url = url
        self.message = message
        self.hint = hint
        self.said = said
        super().__init__(f"{status}: {message}")


@dataclass
class Failure:
    status: int | str | None
    message: str
    retryable: bool = False
    retry_after: float | None = None
    context_length: bool = False
    in_stream: bool = False
    url: str | None = None
    hint: str = ""
    connect: bool = False  # the connection itself failed (refused, unknown host)

    def describe(self, hint: bool = True) -> str:
        """The message with the URL (and the hint): what the user reads."""
        text = self.message
        if self.url and self.url not in text:
            text = f"{text} (at {self.url})"
        return f"{text}; {self.hint}" if hint and self.hint else text


def snippet(text: str, limit: int = SNIPPET_CHARS) -> str:
    """A short one-line view of what came back: an HTML page by its title (or its text),
    anything else quoted, cut at ``limit``."""
    title = _TITLE_RE.search(text)
    if title:
        return f"an HTML page titled {' '.join(title.group(1).split())!r}"
    flat = " ".join(_TAG_RE.sub(" ", text).split()) if text.lstrip().startswith("<") else text
    flat = " ".join(flat.split())
    return repr(flat[:limit] + ("…" if len(flat) > limit else ""))


class ProviderFailure(Exception):
    """A classified failure; tenacity retries it when ``failure.retryable``."""

    def __init__(self, failure: Failure):
        self.failure = failure
        super().__init__(f"{failure.status}: {failure.message}")


class Aborted(Exception):
    """The user aborted: stop now, no retry. ``partial`` is what had streamed so far."""

    def __init__(self, partial: Any = None):
        self.partial = partial
        if partial is not None:
            partial.stop_reason = "aborted"
            partial.tool_calls = []
        super().__init__("aborted")


def classify(exc: BaseException, retry_after_cap: float,
             redact: Callable[[str], str] = str) -> Failure:
    """Turn an SDK/transport exception into a ``Failure``. ``redact`` masks secrets in
    what the server or the exception says before it is shortened."""
    if isinstance(exc, BadResponse):
        message = f"{exc.message}: {server_text(exc.said, redact)}" if exc.said else exc.message
        return Failure(exc.status, message, retryable=True, url=exc.url, hint=exc.hint)
    if isinstance(exc, StreamFailure):
        return _from_kind(exc.kind, redact(exc.message)[:MESSAGE_CHARS], in_stream=True)
    status = getattr(exc, "status_code", None)
    body = getattr(exc, "body", None)
    url = _url(exc)
    if status is None and body is None:
        return _transport(exc, url, redact)
    kind, message = body_error(_masked(body, redact))
    message = message or _short(exc, redact)
    if status is None or status == 200:
        fail = _from_kind(kind, message, in_stream=True)
        fail.url = url
        return fail
    fail = Failure(status, message, retryable=status in RETRY_STATUS or status >= 500, url=url)
    fail.context_length = status in (400, 413) and _is_context(kind, message)
    fail.retry_after = _retry_after(getattr(exc, "response", None))
    fail.hint = _status_hint(status, url)
    if fail.retryable and fail.retry_after is not None and fail.retry_after > retry_after_cap:
        fail.retryable = False
        fail.message = (f"{message} (server asks to retry after {fail.retry_after:g}s, "
                        f"above the {retry_after_cap:g}s cap)")
    return fail


def _masked(body: Any, redact: Callable[[str], str]) -> Any:
    """An error body with its texts masked, dict keys and list items included (a server may
    echo the key it was sent)."""
    if isinstance(body, str):
        return redact(body)
    if isinstance(body, dict):
        return {_masked(k, redact): _masked(v, redact) for k, v in body.items()}
    if isinstance(body, list):
        return [_masked(v, redact) for v in body]
    return body


def server_text(text: str, redact: Callable[[str], str] = str) -> str:
    """What a server sent, as an error shows it: an error body's message, else a snippet
    (an HTML page by its title); masked before it is shortened."""
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        return snippet(redact(text))
    return body_error(_masked(body, redact))[1] or snippet(redact(text))


def _transport(exc: BaseException, url: str | None,
               redact: Callable[[str], str] = str) -> Failure:
    """A failure below HTTP: a timeout, a refused connection, a dropped stream."""
    import httpx2

    chain = _causes(exc)
    if any(isinstance(e, httpx2.TimeoutException) or "timeout" in type(e).__name__.lower()
           for e in chain):
        return Failure("timeout", _short(exc, redact), retryable=True, url=url)
    connect = next((e for e in chain
                    if isinstance(e, (httpx2.ConnectError, ConnectionRefusedError))), None)
    if connect is not None:
        refused = any(isinstance(e, ConnectionRefusedError) for e in chain) or (
            "refused" in str(connect).lower())
        message = ("connection refused" if refused
                   else f"cannot connect: {_short(connect, redact)}")
        return Failure("connection", message, retryable=True, url=url, hint=HINTS["connect"],
                       connect=True)
    return Failure("connection", _short(exc, redact), retryable=True, url=url)


def _causes(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in out:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def _url(exc: BaseException) -> str | None:
    try:
        request = getattr(exc, "request", None)
    except RuntimeError:  # httpx: an error raised before it had a request
        return None
    url = getattr(request, "url", None)
    return str(url) if url is not None else None


def _status_hint(status: int, url: str | None) -> str:
    if status != 404:
        return ""
    path = (url or "").split("?")[0].rstrip("/")
    for ending in ("/responses", "/messages"):
        if path.endswith(ending):
            return HINTS[ending]
    return HINTS["404"]


def error_status(kind: str | int | None) -> int | None:
    """The HTTP status an error body's type or code means: a known type, or the status
    itself (OpenRouter sends ``{"code": 429}`` inside a 200 stream)."""
    name = str(kind or "")
    return ERROR_TYPES.get(name) or (int(name) if name.isdigit() else None)


def _from_kind(kind: str | int | None, message: str, in_stream: bool) -> Failure:
    status: int | str | None = error_status(kind)
    if status is None:
        status = 529 if _OVERLOAD_RE.search(message) else (kind or "stream error")
    retryable = isinstance(status, int) and (status in RETRY_STATUS or status >= 500)
    return Failure(status, message, retryable=retryable, in_stream=in_stream,
                   context_length=_is_context(kind, message))


def _is_context(kind: str | None, message: str) -> bool:
    return kind in CONTEXT_KINDS or bool(_CONTEXT_RE.search(message))


def body_error(body: Any, limit: int | None = MESSAGE_CHARS) -> tuple[str | None, str]:
    """(error kind, message) from an error body: ``error``, ``message`` or ``detail``; the
    message cut at ``limit`` (None: whole, to be masked before it is cut)."""
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except json.JSONDecodeError:
            return None, snippet(body, limit or len(body))
    if not isinstance(body, dict):
        return None, ""
    err = body.get("error", body)
    if not isinstance(err, dict):
        return None, _text(err, limit)
    kind = err.get("type") or err.get("code")
    message = err.get("message") or body.get("message") or body.get("detail") or ""
    return (str(kind) if kind else None), _text(message, limit)


def _text(value: Any, limit: int | None) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text[:limit]


def _retry_after(response: Any) -> float | None:
    """Seconds the server asks to wait: ``retry-after-ms``, else ``Retry-After`` as seconds
    or as an HTTP date."""
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    ms = _number(headers.get("retry-after-ms"))
    if ms is not None:
        return ms / 1000
    value = headers.get("retry-after")
    seconds = _number(value)
    return seconds if seconds is not None else _until(value)


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _until(value: str | None) -> float | None:
    """Seconds from now to an HTTP date, 0 for a date past; None if it is no date."""
    if value is None:
        return None
    try:
        when = parsedate_to_datetime(value)
    except ValueError:
        return None
    if when.tzinfo is None:  # "-0000": UTC
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


def _short(exc: BaseException, redact: Callable[[str], str] = str) -> str:
    text = redact(str(exc)).strip() or type(exc).__name__
    return text.splitlines()[0][:MESSAGE_CHARS]


@dataclass
class TurnBudget:
    """Attempts left for one turn across all profiles (failover included)."""

    remaining: int

    def take(self) -> None:
        self.remaining -= 1


def retrying(*, max_retries: int, backoff_base: float, backoff_max: float,
             abort: threading.Event, budget: TurnBudget,
             before_sleep: Callable[[RetryCallState], None]) -> Retrying:
    """The tenacity policy: retryable ``ProviderFailure`` only, abort-aware sleeps. A
    server's ``Retry-After`` is waited as given: ``classify`` made one above the cap final."""
    backoff = wait_exponential_jitter(multiplier=backoff_base, max=backoff_max,
                                      jitter=backoff_base / 2)

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        after = exc.failure.retry_after if isinstance(exc, ProviderFailure) else None
        if after is not None:
            return after
        return backoff(state)

    def stop(state: RetryCallState) -> bool:
        exc = state.outcome.exception() if state.outcome else None
        connect = isinstance(exc, ProviderFailure) and exc.failure.connect
        limit = min(max_retries, CONNECT_RETRIES) if connect else max_retries
        return state.attempt_number > limit or abort.is_set() or budget.remaining <= 0

    def retryable(exc: BaseException) -> bool:
        return isinstance(exc, ProviderFailure) and exc.failure.retryable

    return Retrying(retry=retry_if_exception(retryable), stop=stop, wait=wait,
                    sleep=abort.wait, before_sleep=before_sleep, reraise=True)
