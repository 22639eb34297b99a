"""Cuts the page makes, masked in Python first (SPEC §4 "Redaction sees everything once").

The page's code shortens texts where it reads them (an element's outerHTML, an attribute, a
title, a URL, the line at the scan's budget), but the page never holds a secret, so it
cannot cut around one. It keeps ``margin`` characters past each cut instead (``tails``) and
marks the cut with one code point of a private-use range chosen at random per call, which
no page can forge. ``PageCuts.restore`` then masks the text before each mark together with
its tail, and cuts it where the page did: a key across the cut shows as ``***…``, never its
head (``Redactor.head``, with ``Redactor.margin`` past each cut).
"""

from __future__ import annotations

import json
import re
import secrets
from typing import TYPE_CHECKING, Any

from llmcore.secrets import Redactor

if TYPE_CHECKING:
    from .tab import Tab

CUTS_MAX = 16_384  # marks per call; cuts past these share one mark, without a tail
PRIVATE_FIRST, PRIVATE_LAST = 0xF0000, 0xFFFFD  # Supplementary Private Use Area-A
ELLIPSIS = "…"


class PageCuts:
    """The cuts of one call to the page: ``options()`` for its code, ``restore`` after."""

    def __init__(self, redact: Redactor) -> None:
        self.redact = redact
        self.first = PRIVATE_FIRST + secrets.randbelow(PRIVATE_LAST - PRIVATE_FIRST - CUTS_MAX)
        self.margin = redact.margin
        self._mark = re.compile(f"([{chr(self.first)}-{chr(self.first + CUTS_MAX)}])")

    def options(self) -> dict:
        return {"mark": self.first, "marks": CUTS_MAX, "margin": self.margin}

    def restore(self, value: Any, tails: list[str] | None) -> Any:
        """``value`` (the page's data) with each marked cut made: the text before the mark
        masked with the cut's tail, then cut there, the mark shown as '…'."""
        if not tails:
            return value
        if isinstance(value, str):
            return self._text(value, tails)
        if isinstance(value, dict):
            return {self.restore(k, tails): self.restore(v, tails) for k, v in value.items()}
        if isinstance(value, list):
            return [self.restore(v, tails) for v in value]
        return value

    def _text(self, text: str, tails: list[str]) -> str:
        parts = self._mark.split(text)
        if len(parts) == 1:
            return text
        shown = []
        for seg, mark in zip(parts[:-1:2], parts[1::2], strict=True):
            index = ord(mark) - self.first
            tail = tails[index] if index < len(tails) else ""
            shown += [self.redact.head(seg + tail, len(seg)), ELLIPSIS]
        shown.append(parts[-1])
        return "".join(shown)


def page_call(tab: Tab, function: str, opts: dict | None = None) -> Any:
    """``window.__ga.FUNCTION(opts)`` in ``tab`` (extract.js), its cuts made: a dict."""
    cuts = PageCuts(tab.browser.redact)
    arg = json.dumps({**(opts or {}), "cuts": cuts.options()})
    value = tab.page_value(f"window.__ga.{function}({arg})") or {}
    return cuts.restore(value, value.pop("tails", None))
