"""Which provider failures are transient, and the tenacity policy that retries them.

Providers raise SDK exceptions (or ``StreamFailure`` for errors reported inside an HTTP-200
stream); ``classify`` turns any of them into a ``Failure`` record the session acts on.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
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
    "context_length_exceeded": 400,
}
_CONTEXT_RE = re.compile(
    r"context[ _-]?(length|window)|prompt is too long|too many tokens|maximum context|"
    r"input is too long|reduce the length", re.I)
_OVERLOAD_RE = re.compile(r"overload|temporarily unavailable|try again later", re.I)


class StreamFailure(Exception):
    """An error reported inside a successful (HTTP 200) stream."""

    def __init__(self, kind: str | None, message: str):
        self.kind = kind
        self.message = message
        super().__init__(f"{kind or 'error'}: {message}")


@dataclass
class Failure:
    status: int | str | None
    message: str
    retryable: bool = False
    retry_after: float | None = None
    context_length: bool = False
    in_stream: bool = False


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


def classify(exc: BaseException, retry_after_cap: float) -> Failure:
    """Turn an SDK/transport exception into a ``Failure``."""
    if isinstance(exc, StreamFailure):
        return _from_kind(exc.kind, exc.message, in_stream=True)
    status = getattr(exc, "status_code", None)
    body = getattr(exc, "body", None)
    if status is None and body is None:
        timeout = "timeout" in type(exc).__name__.lower()
        return Failure("timeout" if timeout else "connection", _short(exc), retryable=True)
    kind, message = _body_error(body)
    message = message or _short(exc)
    if status is None or status == 200:
        return _from_kind(kind, message, in_stream=True)
    fail = Failure(status, message, retryable=status in RETRY_STATUS or status >= 500)
    fail.context_length = status in (400, 413) and _is_context(kind, message)
    fail.retry_after = _retry_after(getattr(exc, "response", None))
    if fail.retryable and fail.retry_after is not None and fail.retry_after > retry_after_cap:
        fail.retryable = False
        fail.message = (f"{message} (server asks to retry after {fail.retry_after:g}s, "
                        f"above the {retry_after_cap:g}s cap)")
    return fail


def _from_kind(kind: str | None, message: str, in_stream: bool) -> Failure:
    status: int | str | None = ERROR_TYPES.get(kind or "")
    if status is None:
        status = 529 if _OVERLOAD_RE.search(message) else (kind or "stream error")
    retryable = isinstance(status, int) and (status in RETRY_STATUS or status >= 500)
    return Failure(status, message, retryable=retryable, in_stream=in_stream,
                   context_length=_is_context(kind, message))


def _is_context(kind: str | None, message: str) -> bool:
    return kind == "context_length_exceeded" or bool(_CONTEXT_RE.search(message))


def _body_error(body: Any) -> tuple[str | None, str]:
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except json.JSONDecodeError:
            return None, body[:300]
    if not isinstance(body, dict):
        return None, ""
    err = body.get("error", body)
    if not isinstance(err, dict):
        return None, str(err)[:300]
    kind = err.get("type") or err.get("code")
    return (str(kind) if kind else None), str(err.get("message") or "")[:300]


def _retry_after(response: Any) -> float | None:
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return float(value) / scale
        except ValueError:
            continue
    return None


def _short(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


@dataclass
class TurnBudget:
    """Attempts left for one turn across all profiles (failover included)."""

    remaining: int

    def take(self) -> None:
        self.remaining -= 1


def retrying(*, max_retries: int, backoff_base: float, backoff_max: float,
             retry_after_cap: float, abort: threading.Event, budget: TurnBudget,
             before_sleep: Callable[[RetryCallState], None]) -> Retrying:
    """The tenacity policy: retryable ``ProviderFailure`` only, abort-aware sleeps."""
    backoff = wait_exponential_jitter(multiplier=backoff_base, max=backoff_max,
                                      jitter=backoff_base / 2)

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        after = exc.failure.retry_after if isinstance(exc, ProviderFailure) else None
        if after is not None:
            return min(after, retry_after_cap)
        return backoff(state)

    def stop(state: RetryCallState) -> bool:
        return state.attempt_number > max_retries or abort.is_set() or budget.remaining <= 0

    def retryable(exc: BaseException) -> bool:
        return isinstance(exc, ProviderFailure) and exc.failure.retryable

    return Retrying(retry=retry_if_exception(retryable), stop=stop, wait=wait,
                    sleep=abort.wait, before_sleep=before_sleep, reraise=True)
