"""The provider session: history, repair, trimming, text tool mode, retries, failover, logs.

One ``LLMSession`` serves every provider kind; it delegates one streamed API call to a
small provider object (``llmcore.openai_chat`` …) and owns everything around it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from . import images
from .base import (
    ChatStream,
    ConfigError,
    LLMError,
    LLMResponse,
    ThinkingChunk,
    Usage,
    new_messages_to_blocks,
    response_to_blocks,
)
from .config import Config, Profile, coerce, resolve_key
from .history import (
    CHARS_PER_TOKEN,
    MessageMemo,
    mark_task,
    message_chars,
    repair,
    retire_working_memory,
    since_last_reply,
    task_index,
)
from .logs import SessionLog
from .provider import (
    Deadline,
    ListMemo,
    Request,
    Watchdog,
    estimate_usage,
    tools_chars,
    valid_arguments,
    valid_text,
)
from .retry import Aborted, ProviderFailure, TurnBudget, classify, retrying
from .secrets import Redactor
from .textmode import ToolPrompt, parse_calls, render_message
from .trim import trim

log = logging.getLogger("ga.llm")
FORCED_TRIM_FACTOR = 0.5  # after a context-length error, trim to this share of the budget


def priced(usage: Usage, profile: Profile) -> Usage:
    """``usage`` with its cost in USD, when ``profile`` has a price."""
    if profile.price is not None:
        usage.cost = profile.price.cost(usage)
    return usage


def event_text(event: dict) -> str:
    """The one-line diagnostic of a provider event: a ``retry`` (the reply starts over) or a
    ``model_switch``."""
    if event.get("type") == "retry":
        return (f"{event.get('model')}: {event.get('status')}: {event.get('message')}; "
                f"retry {event.get('attempt')} in {float(event.get('wait') or 0):.1f}s")
    return f"switching model {event.get('from')} -> {event.get('to')} ({event.get('reason')})"


class LLMSession:
    """A chat client for one profile (or a ``mixin`` list of profiles, with failover)."""

    def __init__(self, config: Config, profile: Profile, home: Path,
                 provider_class: Callable[[str], type], redactor: Redactor | None = None):
        self.config = config
        self.redact = redactor or Redactor.from_config(config)
        self._provider_class = provider_class  # kind -> provider class (llmcore.PROVIDERS)
        self.history: list[dict] = []
        self._sent: tuple[dict, ...] = ()  # the history of the last request
        self.system: str | None = None
        self.total_usage = Usage()
        self._lost = Usage()  # this turn's attempts that broke after output and were retried
        # retries and failover switches; a listener shows them, else they are logged here
        self.on_event: Callable[[dict], Any] | None = None
        # called before every request to the model (each retry too) and may wait: a shared
        # request-rate cap (``ga batch --rpm``); an abort meanwhile stops the request
        self.before_request: Callable[[], None] | None = None
        self._abort = threading.Event()
        self._watchdog = Watchdog()  # cuts a request at request_timeout
        self._providers: dict[str, Any] = {}
        self._overrides: dict[str, Any] = {}
        self._tool_prompt = ToolPrompt()
        self._size = MessageMemo(message_chars)  # per message, computed once
        self._tools_size = ListMemo(tools_chars)  # per tool list
        self._as_text = MessageMemo(render_message)  # text tool mode's form of a message
        self._notes = MessageMemo(images.without_images)  # for a model without vision
        self._failed_at = 0.0
        self._turn = 0
        self._set_members(profile)
        self.log = SessionLog(home / "logs", self.redact)

    # ----- identity and switching -------------------------------------------------
    def _set_members(self, profile: Profile) -> None:
        """Use ``profile``; a profile that cannot be used (no key…) raises and changes
        nothing."""
        names = profile.mixin or [profile.name]
        members = [self.config.profile(n) if profile.mixin else profile for n in names]
        members = [dataclasses.replace(m, **self._overrides) for m in members]
        self._keys = {m.name: resolve_key(m, self.config.path) for m in members}
        self.members = members
        self.spring_back = profile.spring_back
        self.max_turn_attempts = profile.max_turn_attempts
        self.active = 0
        self._providers.clear()

    @property
    def profile(self) -> Profile:
        return self.members[self.active]

    @property
    def name(self) -> str:
        return self.profile.name

    @property
    def model(self) -> str:
        return self.profile.model

    def unpriced(self) -> list[str]:
        """The profiles that may serve a request and have no ``price``."""
        return [m.name for m in self.members if m.price is None]

    @property
    def vision(self) -> bool:
        """Whether the active profile's model sees images (``vision:``)."""
        return self.profile.sees_images

    def profiles(self) -> list[str]:
        names = list(self.config.profiles)
        return names if self.name in names else [self.name, *names]

    def switch(self, name: str) -> None:
        """``/model NAME``: another profile (provider, URL, key, model together), same history."""
        old = self.name
        if name in self.config.profiles:
            self._set_members(self.config.profile(name))
        else:
            from .config import spec_profile

            self._set_members(spec_profile(name, self.config.path))
        self._event({"type": "model_switch", "from": old, "to": self.name, "reason": "user"})

    def set_option(self, key: str, value: str) -> None:
        """``/session.KEY=VALUE``: override a setting of the active profile(s)."""
        if key in ("provider", "mixin", "api_key", "api_key_env", "base_url", "script"):
            raise ConfigError(None, key, "cannot be changed at runtime; use /model to switch")
        self._overrides[key] = coerce(None, "", key, value)
        self.members = [dataclasses.replace(m, **self._overrides) for m in self.members]
        self._providers.clear()

    def _move_to(self, index: int, reason: str) -> None:
        old = self.name
        self.active = index
        self.log.note(f"model switch {old} -> {self.name}: {reason}")
        self._event({"type": "model_switch", "from": old, "to": self.name,
                     "reason": self.redact(reason)}, report=True)

    def _event(self, event: dict, report: bool = False) -> None:
        """Pass a provider event on; one to ``report`` is logged when nobody listens."""
        if self.on_event is not None:
            self.on_event(event)
        elif report:
            log.warning("%s", event_text(event))

    def abort(self) -> None:
        """Stop the current stream and any retry wait now (thread-safe)."""
        self._abort.set()
        provider = self._providers.get(self.name)
        if provider is not None:
            provider.cancel()

    def _provider(self) -> Any:
        prof = self.profile
        if prof.name not in self._providers:
            cls = self._provider_class(prof.provider)
            self._providers[prof.name] = cls(prof, self._keys[prof.name])
        return self._providers[prof.name]

    def _drop_provider(self, name: str) -> None:
        """Close a provider's client, so the next call opens a fresh connection (a server
        may close one it just broke a stream on, after the client took it back)."""
        provider = self._providers.pop(name, None)
        client = getattr(provider, "client", None)
        if client is not None:
            client.close()

    # ----- the chat turn ----------------------------------------------------------
    def chat(self, messages: list[dict], tools: list[dict] | None = None) -> ChatStream:
        self._abort.clear()
        self._turn += 1
        system, new = new_messages_to_blocks(messages)
        if system is not None:  # a new task: its first message is kept through trimming
            self.system = system
            new[:1] = [mark_task(m) for m in new[:1]]
        self._maybe_spring_back()
        # repaired now, so the log shows what is sent (a missing tool result as filled in)
        self.history = repair(retire_working_memory([*self.history, *new]), self._sent)
        self.log.request(f"{self.name} ({self.model})", system, since_last_reply(self.history))
        self._lost = Usage()
        try:
            resp = yield from self._chat_members(tools)
        except LLMError as err:
            self.log.note(f"error: {err}")
            self._drop_unanswered()
            self._count_lost(err)
            raise
        resp.usage.add(self._lost)  # their tokens were spent too (--max-tokens counts them)
        self.total_usage.add(resp.usage)
        self.log.response(resp)
        self.history.append(self._assistant_blocks(resp))
        return resp

    def _count_lost(self, err: LLMError) -> None:
        """A turn that failed for good still spent what its broken attempts made: counted,
        and carried by the error (the loop tells it as a ``usage`` event)."""
        if self._lost.input or self._lost.output:
            self.total_usage.add(self._lost)
            err.usage = self._lost

    def _chat_members(self, tools: list[dict] | None) -> ChatStream:
        """The active profile, then (``mixin``) the others in turn until one answers."""
        budget = TurnBudget(self.max_turn_attempts)
        tried = {self.active}
        while True:
            try:
                return (yield from self._chat_profile(tools, budget))
            except LLMError as err:
                nxt = next((i for i in range(len(self.members)) if i not in tried), None)
                if nxt is None or budget.remaining <= 0 or self._abort.is_set():
                    raise
                tried.add(nxt)
                self._failed_at = time.monotonic()
                self._move_to(nxt, str(err))

    def _drop_unanswered(self) -> None:
        """After a failed call, the user message(s) no reply answered leave the history, so
        the next task does not send them again."""
        while self.history and self.history[-1]["role"] == "user":
            self.history.pop()

    def _maybe_spring_back(self) -> None:
        if self.active and time.monotonic() - self._failed_at >= self.spring_back:
            self._move_to(0, "spring back after a quiet period")

    def _assistant_blocks(self, resp: LLMResponse) -> dict:
        msg = response_to_blocks(resp)
        if resp.thinking_blocks:
            rest = [b for b in msg["content"] if b["type"] != "thinking"]
            msg["content"] = [*resp.thinking_blocks, *rest]
        return msg

    def _label(self) -> str:
        prof = self.profile
        return prof.name if ":" in prof.name else f"{prof.name} [{prof.provider}]"

    def _chat_profile(self, tools: list[dict] | None, budget: TurnBudget) -> ChatStream:
        """One profile with retries; one forced trim on a context-length error."""
        forced = False
        while True:
            try:
                return (yield from self._with_retries(tools, budget, forced))
            except Aborted as ab:
                if ab.partial is None:
                    return LLMResponse(stop_reason="aborted")
                ab.partial.usage = priced(ab.partial.usage, self.profile)  # spent, so paid
                return ab.partial
            except ProviderFailure as pf:
                fail = pf.failure
                if fail.context_length and not forced:
                    forced = True
                    log.warning("%s: context too long; trimming history and retrying", self.name)
                    continue
                msg = self.redact(fail.describe())
                if fail.status in (401, 403):
                    msg = f"authentication failed (check the API key): {msg}"
                raise LLMError(self._label(), fail.status, msg) from None

    def _with_retries(self, tools: list[dict] | None, budget: TurnBudget,
                      forced: bool) -> ChatStream:
        prof = self.profile
        policy = retrying(max_retries=prof.max_retries, backoff_base=prof.backoff_base,
                          backoff_max=prof.backoff_max, abort=self._abort, budget=budget,
                          before_sleep=self._on_retry)
        for attempt in policy:
            with attempt:
                if self.before_request is not None:
                    self.before_request()
                if self._abort.is_set():
                    raise Aborted()
                budget.take()
                return (yield from self._attempt(self._request(tools, forced), tools))
        raise Aborted()  # unreachable: tenacity re-raises the last error when it stops

    def _on_retry(self, state: Any) -> None:
        exc = state.outcome.exception()
        fail = exc.failure if isinstance(exc, ProviderFailure) else None
        wait = state.next_action.sleep if state.next_action else 0
        status = fail.status if fail else "error"
        message = self.redact(fail.describe(hint=False) if fail else str(exc))
        self.log.note(f"error: {self.name}: {status}: {message}; retry {state.attempt_number}")
        self._event({"type": "retry", "model": self.name, "status": status,
                     "message": message, "attempt": state.attempt_number, "wait": wait},
                    report=True)

    def _request(self, tools: list[dict] | None, forced: bool) -> Request:
        prof = self.profile
        system = self.system
        if prof.extra_sys_prompt:
            system = f"{system}\n\n{prof.extra_sys_prompt}" if system else prof.extra_sys_prompt
        budget = prof.context_win * CHARS_PER_TOKEN
        if forced:
            budget = int(budget * FORCED_TRIM_FACTOR)
        text_mode = prof.tool_mode == "text"
        budget -= len(system or "") + self._tools_chars(tools, text_mode)  # in the window too
        self.history = trim(self.history, max(budget, 0), prof.trim_keep_prefix, self._size)
        self._sent = tuple(self.history)  # valid: what follows it next time is all to repair
        self._size.keep_only(self.history)
        messages = self.history
        if not prof.sees_images:  # each image a note, made once per message
            self._notes.keep_only(messages)
            messages = [self._notes(m) for m in messages]
        if text_mode:  # the tool list rides with the task's message, wherever it now is
            self._as_text.keep_only(messages)
            rendered = [self._as_text(m) for m in messages]
            task = task_index(messages)
            return Request(system, self._tool_prompt.apply(rendered, task or 0, tools), None,
                           prof)
        return Request(system, messages, tools or None, prof)

    def _tools_chars(self, tools: list[dict] | None, text_mode: bool) -> int:
        if text_mode:
            return self._tool_prompt.chars(tools)
        return self._tools_size(tools) if tools else 0

    def _attempt(self, req: Request, tools: list[dict] | None) -> ChatStream:
        provider = self._provider()
        resp = LLMResponse()
        deadline = self._watchdog.deadline(req.profile.request_timeout, provider.cancel)
        emitted = False
        try:
            for chunk in self._stream(provider, req, resp, deadline):
                emitted = True
                yield chunk
        except provider.errors as exc:
            if self._abort.is_set():
                raise Aborted(resp) from None
            fail = classify(exc, req.profile.retry_after_cap, self.redact)
            if deadline.expired:  # the cut's own error is not what went wrong
                fail = classify(deadline.failure(fail.url), req.profile.retry_after_cap,
                                self.redact)
            fail.url = fail.url or str(provider.client.base_url)
            if not isinstance(fail.status, int):  # below HTTP: the connection may be dead
                self._drop_provider(req.profile.name)
            if not emitted:
                raise ProviderFailure(fail) from None
            # the output made is paid for
            resp.usage = priced(estimate_usage(req, resp, self._size, self._tools_size),
                                req.profile)
            if fail.in_stream or req.tool_started:
                log.warning("%s: stream broke after output: %s", self.name, fail.message)
                resp.tool_calls = []
                resp.stop_reason = "error"
                return resp
            self._lost.add(resp.usage)
            raise ProviderFailure(fail) from None
        if self._abort.is_set():
            raise Aborted(resp)
        if req.profile.tool_mode == "text":
            names = {t["function"]["name"] for t in tools or []}
            resp.tool_calls = parse_calls(resp.content, self._turn, names)
            if resp.tool_calls and resp.stop_reason != "max_tokens":  # a cut call stays "cut"
                resp.stop_reason = "tool_use"
        for call in resp.tool_calls:  # text every writer can store, parsed too
            call.function.name = valid_text(call.function.name)
            call.function.arguments = valid_arguments(call.function.arguments)
        if not (resp.usage.input or resp.usage.output):
            resp.usage = estimate_usage(req, resp, self._size, self._tools_size)
        resp.usage = priced(resp.usage, req.profile)  # by the profile that served it (failover)
        return resp

    def _stream(self, provider: Any, req: Request, resp: LLMResponse,
                deadline: Deadline) -> Iterator[str]:
        """The provider's pieces, under the request deadline; they are joined into
        ``resp.content`` / ``resp.thinking`` once, however the stream ends."""
        text: list[str] = []
        thinking: list[str] = []
        try:
            with deadline:
                for chunk in map(valid_text, provider.stream(req, resp)):
                    (thinking if isinstance(chunk, ThinkingChunk) else text).append(chunk)
                    if self._abort.is_set():
                        raise Aborted(resp)
                    yield chunk
        finally:
            resp.content = "".join(text)
            resp.thinking = "".join(thinking)
