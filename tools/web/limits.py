"""The limits of the web call running: how long the page may take to answer it, and its
abort. Every wait on a page asks here, so a call keeps to its timeout and ends at once
when the task is aborted (Ctrl-C, a signal)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from .tab import Aborted

PAGE_TIMEOUT = 20.0  # seconds a page may take to answer outside a web call
ANSWER_MIN = 1.0  # seconds the page gets to answer a step even past the call's deadline


class CallLimits:
    """The deadline and the abort event of the web call running, if any."""

    def __init__(self) -> None:
        self._abort: threading.Event | None = None
        self._deadline: float | None = None
        self.timeout: float | None = None  # the call's own, as the model gave it

    @contextlib.contextmanager
    def running(self, abort: threading.Event | None, timeout: float) -> Iterator[None]:
        """A web call: the page is waited on for at most ``timeout`` s (a step at least
        ``ANSWER_MIN``), and every wait ends when ``abort`` is set."""
        self._abort, self._deadline = abort, time.monotonic() + timeout
        self.timeout = timeout
        try:
            yield
        finally:
            self._abort = self._deadline = self.timeout = None

    def aborted(self) -> bool:
        return self._abort is not None and self._abort.is_set()

    def check(self) -> None:
        """Raise Aborted when the call was aborted."""
        if self.aborted():
            raise Aborted("the web call was aborted")

    def time_left(self) -> float:
        """Seconds the page may take to answer in the call running."""
        if self._deadline is None:
            return PAGE_TIMEOUT
        return max(self._deadline - time.monotonic(), ANSWER_MIN)
