"""One asyncio event loop on a daemon thread: where a session's MCP clients live.

The runtime's own threads are synchronous; they hand a coroutine to the loop with
``submit`` and wait for it with ``wait``, which cancels it on a timeout. The loop thread
never waits on itself (``wait`` refuses to run there).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Coroutine

STOP_SECONDS = 5.0  # how long close() waits for the loop's thread to end


class LoopThread:
    """An event loop running on its own daemon thread until ``close``."""

    def __init__(self, name: str = "ga-mcp") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def submit(self, coro: Coroutine) -> concurrent.futures.Future:
        """Run ``coro`` on the loop; its result arrives on the returned future."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def wait(self, future: concurrent.futures.Future, timeout: float | None) -> Any:
        """``future``'s result; after ``timeout`` seconds it is cancelled and ``TimeoutError``
        raised. ``CancelledError`` when something else cancelled it (an abort)."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("the MCP event loop cannot wait on itself")
        done, _ = concurrent.futures.wait([future], timeout)
        if not done:  # (a TimeoutError the coroutine raised itself is its result)
            future.cancel()
            raise TimeoutError
        return future.result()

    def run(self, coro: Coroutine, timeout: float | None = None) -> Any:
        return self.wait(self.submit(coro), timeout)

    def call_soon(self, fn: Any, *args: Any) -> None:
        """Run ``fn(*args)`` on the loop's thread (a plain function, not a coroutine)."""
        self.loop.call_soon_threadsafe(fn, *args)

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(STOP_SECONDS)
