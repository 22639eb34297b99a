"""Test helper: run a generator to its end."""

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
