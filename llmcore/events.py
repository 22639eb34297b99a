"""A run's events on their way to the caller: masked, recorded, told to the listeners, the
client's own events in order among them, the priced replies' cost summed.

    stream = EventStream(redactor, {"text": "delta"}, failures, record=transcript.record)
    stream.listeners.append(journal)
    client.on_event = stream.provider_event      # retries, model switches
    result = yield from stream.relay(loop)       # the loop's events, then what it returns

Masking comes first: streamed text that may begin a secret is held back until the next
piece. A listener that fails is reported once (``Failures``) and never ends the run. The
client's own events (a ``retry``, a ``model_switch``) belong after the text of the attempt
that a reply restarts: passed on at once while a ``sink`` takes them (the worker's queue; a
``Retry-After`` wait may be long), else held and relayed before the next event.
"""

from __future__ import annotations

from typing import Any, Callable, Generator, Mapping

from .base import add_cost
from .logs import Failures
from .secrets import EventRedactor, Redactor


class EventStream:
    """The events of one run at a time (``start`` begins the next); ``streamed`` maps an
    event type to its text field (``{"text": "delta"}``)."""

    def __init__(self, redactor: Redactor, streamed: Mapping[str, str], failures: Failures,
                 record: Callable[[dict], Any]) -> None:
        self.listeners: list[Callable[[dict], Any]] = []
        self.sink: Callable[[dict], Any] | None = None  # takes the events while a worker runs
        self.cost: float | None = None  # USD of the run's priced replies; None: none priced
        self._redact = EventRedactor(redactor, streamed)
        self._failures = failures
        self._record = record
        self._held: list[dict] = []  # the client's own events, until relayed in order

    def start(self) -> None:
        """A new run: no cost yet, nothing held (a /model switch between runs is no
        restart)."""
        self._held.clear()
        self.cost = None

    def emit(self, event: dict) -> list[dict]:
        """Mask ``event``, record it and tell the listeners; returns the event(s) to pass on
        (streamed text that may begin a secret is held back until the next piece)."""
        if event.get("type") == "usage":
            self.cost = add_cost(self.cost, event.get("cost"))
        out = self._redact(event)
        for item in out:
            self._record(item)
            for listener in self.listeners:
                try:
                    listener(item)
                except Exception as e:  # a listener (journal, budget) must never end the run
                    name = getattr(listener, "__qualname__", type(listener).__name__)
                    self._failures.report(f"listener {name}", e)
        return out

    def priced(self, event: dict) -> dict:
        """``event`` (a run's end) with the run's ``cost`` when a reply was priced."""
        return event if self.cost is None else dict(event, cost=self.cost)

    def provider_event(self, event: dict) -> None:
        """The client's ``on_event`` (a ``retry``, a ``model_switch``) or a ``notice``: to
        the sink at once while one is set, else relayed with the next event."""
        if self.sink is None:
            self._held.append(event)
            return
        for item in self.emit(event):
            self.sink(item)

    def relay(self, loop: Generator[dict, None, Any]) -> Generator[dict, None, Any]:
        """The events of ``loop`` passed on, the held ones before each; returns what it
        returns."""
        while True:
            try:
                event = next(loop)
            except StopIteration as stop:
                yield from self.flush()
                return stop.value
            yield from self.flush()
            yield from self.emit(event)

    def flush(self) -> Generator[dict, None, None]:
        """The held events, passed on (the retries of a request that came to nothing)."""
        while self._held:
            yield from self.emit(self._held.pop(0))
