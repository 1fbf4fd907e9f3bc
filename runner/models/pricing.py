"""What a model call cost: from the rates given with `price=`, or from genai-prices' table
by model (unless `price_table=False` says the table does not apply to the host).

A price nobody knows is never guessed: the call costs 0 and its usage says
`"cost_known": False` (and the adapter logs it once per model), so a cost budget is
visibly blind rather than quietly wrong.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("runner.models")


@dataclass(frozen=True)
class Price:
    """Dollars per million tokens. Cache rates left out are charged at the input rate."""

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None

    def __post_init__(self) -> None:
        for name in ("input", "output", "cached_input", "cache_write"):
            value = getattr(self, name)
            if value is None and name in ("cached_input", "cache_write"):
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise ValueError(
                    f"price {name} must be dollars per million tokens >= 0, not {value!r}"
                )

    def cost(self, tokens: Tokens) -> float:
        """The dollars `tokens` cost at these rates."""
        cached = self.input if self.cached_input is None else self.cached_input
        written = self.input if self.cache_write is None else self.cache_write
        plain = max(tokens.input - tokens.cached - tokens.cache_write, 0)
        return (
            plain * self.input
            + tokens.cached * cached
            + tokens.cache_write * written
            + tokens.output * self.output
        ) / 1_000_000


@dataclass(frozen=True)
class Tokens:
    """A response's token counts. `input` counts every input token, cached ones included."""

    input: int = 0
    output: int = 0
    cached: int = 0  # input tokens read from the provider's prompt cache
    cache_write: int = 0  # input tokens written to it


# What a counter column holds: a count a provider reports past it (10**400 tokens) is
# taken as this many, so the cost stays a finite float and the run goes on.
_COUNT_MAX = 2**63 - 1


def count(value: object) -> int:
    """A token count from a response, 0 when it is missing or not a count, saturated at
    2**63-1 (what comes from a model is never trusted to fit)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return min(value, _COUNT_MAX)
    return 0


# What `price=` accepts.
PriceLike = Price | tuple[float, float] | Mapping[str, float]


def as_price(price: PriceLike | None) -> Price | None:
    """`price=` as given: a Price, an (input, output) pair, or a mapping of Price's fields."""
    if price is None or isinstance(price, Price):
        return price
    if isinstance(price, tuple):
        if len(price) != 2:
            raise ValueError(f"a price tuple is (input, output) per million tokens, not {price!r}")
        return Price(*price)
    if isinstance(price, Mapping):
        try:
            return Price(**price)
        except TypeError:
            raise ValueError(
                f"a price mapping has input, output, cached_input, cache_write: {dict(price)!r}"
            ) from None
    raise ValueError(f"price must be a Price, an (input, output) pair or a mapping, not {price!r}")


class Pricer:
    """Turns one adapter's token counts into the usage mapping of an action.

    Without rates of its own (`price=`) a call is priced by its model in genai-prices'
    table, whatever host answered it: a gateway or a proxy in front of the provider
    (OPENAI_BASE_URL elsewhere) passes the provider's list prices on. A host the table
    knows by its URL (OpenRouter, say) is priced as that host first. `price_table=False`
    says the table's prices do not apply (a local model, a server that bills otherwise):
    the cost is then unknown unless `price=` gives it.
    """

    def __init__(
        self,
        price: Price | None,
        *,
        provider_id: str,
        provider_api_url: str | None,
        price_table: bool = True,
    ) -> None:
        self.price = price
        self.provider_id = provider_id
        self.provider_api_url = provider_api_url
        self.price_table = price_table
        self._unknown: set[str] = set()
        self._lock = threading.Lock()

    def usage(self, model: str, tokens: Tokens) -> dict[str, Any]:
        usage: dict[str, Any] = {"input_tokens": tokens.input, "output_tokens": tokens.output}
        if tokens.cached:
            usage["cached_tokens"] = tokens.cached
        cost = (
            self.price.cost(tokens) if self.price is not None else self._table_cost(model, tokens)
        )
        usage["cost"] = 0.0 if cost is None else cost
        usage["cost_known"] = cost is not None
        return usage

    def _table_cost(self, model: str, tokens: Tokens) -> float | None:
        if model in self._unknown:
            return None
        if not self.price_table:
            self._unpriced(model, "price_table=False: the price table does not apply; pass price=")
            return None
        try:
            import genai_prices
        except ImportError:
            self._unpriced(model, "pass price= or install genai-prices")
            return None
        usage = genai_prices.Usage(
            input_tokens=tokens.input,
            output_tokens=tokens.output,
            cache_read_tokens=tokens.cached,
            cache_write_tokens=tokens.cache_write,
        )
        if self.provider_api_url is not None:
            # A host with prices of its own in the table (a gateway it knows by its URL);
            # any other host, and a model that host does not list, by the provider's.
            with contextlib.suppress(LookupError):
                found = genai_prices.calc_price(
                    usage, model, provider_api_url=self.provider_api_url
                )
                return float(found.total_price)
        try:
            found = genai_prices.calc_price(usage, model, provider_id=self.provider_id)
        except LookupError:
            table = f"genai-prices' table has no {self.provider_id} model of that name"
            self._unpriced(model, f"{table}: pass price=")
            return None
        return float(found.total_price)

    def _unpriced(self, model: str, advice: str) -> None:
        with self._lock:
            first = model not in self._unknown
            self._unknown.add(model)
        if first:
            log.warning(
                "no price is known for model %s (%s): its calls count as cost 0", model, advice
            )
        return None
