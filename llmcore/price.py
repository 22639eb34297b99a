"""A profile's prices (``price:``, USD per million tokens) and what a request cost."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import COST_DIGITS, ConfigError, Usage, unknown_key

PRICE_KEYS = ("input", "output", "cache_read", "cache_write")
REQUIRED_PRICES = ("input", "output")
TOKENS_PER_PRICE = 1_000_000  # prices are per million tokens
CENT = 0.01  # a cost below this is shown with more decimals
SHOWN_DECIMALS = 4
SMALL_DECIMALS = 6


@dataclass(frozen=True)
class Price:
    """USD per million tokens; cache reads and writes cost the input price unless given."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None

    def cost(self, usage: Usage) -> float:
        """USD for ``usage``: its input (cache reads and writes at their prices, the rest at
        the input price) and its output."""
        read = self.input if self.cache_read is None else self.cache_read
        write = self.input if self.cache_write is None else self.cache_write
        fresh = max(usage.input - usage.cached - usage.cache_write, 0)
        total = (fresh * self.input + usage.cached * read + usage.cache_write * write
                 + usage.output * self.output)
        return round(total / TOKENS_PER_PRICE, COST_DIGITS)


def parse_price(path: str | None, where: str, value: dict[str, Any]) -> Price:
    """A ``price:`` mapping checked: known keys, ``input`` and ``output`` given, each a
    number of at least 0."""
    prices: dict[str, float] = {}
    for key, amount in value.items():
        if key not in PRICE_KEYS:
            raise unknown_key(path, f"{where}.{key}", str(key), PRICE_KEYS, "price")
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount < 0:
            raise ConfigError(path, f"{where}.{key}",
                              f"expected USD per million tokens (a number >= 0), got {amount!r}")
        prices[key] = float(amount)
    for key in REQUIRED_PRICES:
        if key not in prices:
            raise ConfigError(path, f"{where}.{key}", "missing: USD per million tokens "
                              "(price: {input: 3.0, output: 15.0})")
    return Price(**prices)


def format_usd(amount: float) -> str:
    """``$0.0123``; an amount below a cent with up to six decimals (``$0.000042``)."""
    if amount >= CENT:
        return f"${amount:,.{SHOWN_DECIMALS}f}"
    digits = f"{amount:.{SMALL_DECIMALS}f}".rstrip("0")
    return "$" + digits.ljust(SHOWN_DECIMALS + 2, "0")  # "0." and at least four decimals
