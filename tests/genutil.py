"""Test helpers: run a generator to its end; leave a REPL."""

from __future__ import annotations

from typing import Any, Generator


def drain(gen: Generator) -> tuple[list, Any]:
    """All that ``gen`` yields, and what it returns."""
    items = []
    while True:
        try:
            items.append(next(gen))
        except StopIteration as stop:
            return items, stop.value


def quit_repl(child: Any) -> int:
    """Leave a pexpect-driven REPL at its prompt with /exit; its exit status."""
    import pexpect

    child.sendline("/exit")
    child.expect(pexpect.EOF)
    child.close()
    return child.exitstatus
