"""The rules both stores keep, written once: the SQL store (runner.store's SQL modules) and
the in-memory one (runner.testing) decide the same way because they ask the same code.

Provider limits: what a call charged (`Charge`), whether a call fits a limit now and from
when it will (`Room`), how long a parked run keeps its place in line, how an amount is
checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from runner.core.limits import COUNTED_SECONDS, WINDOW_SECONDS

# -- provider limits -------------------------------------------------------------------------

# A parked run keeps its place in line this long past its wake-up time: one that no worker
# comes back for (its queue served by none) stops holding back the runs behind it.
WAITER_GRACE_SECONDS = WINDOW_SECONDS


def check_amount(what: str, value: object, most: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be a whole number, 1 or more, not {value!r}")
    if value > most:
        raise ValueError(f"{what} must be at most {most}, got {value}")
    return value


@dataclass(frozen=True)
class Charge:
    """A call charged to a limit in the last minute."""

    tokens: int
    reserved_at: datetime
    # Not settled yet, under a live lease: a call in flight (its tokens are the estimate,
    # as are those of a call not settled whose lease is gone, counted but not in flight).
    in_flight: bool


def aware(moment: datetime) -> datetime:
    # The columns' type gives UTC back already; a value read through a plain query may not.
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


# A run waiting for a call in flight to end (the concurrency) is woken by that call's settle
# (runner.store.limit_line); it looks again this late only in case no settle comes (the call's
# worker died: its charge stops counting when its lease expires). A short recheck claimed
# every waiting run again about once a second, each claim a new lease epoch and a log line.
CONCURRENCY_RECHECK_SECONDS = 30.0
# No wake-up sooner than this: the moment computed is when the room exists.
LEAST_PARK_SECONDS = 0.05


class Room:
    """Whether a call of `tokens` fits a limit at `at`, and if not, from when it will."""

    def __init__(
        self,
        limit: Any,
        at: datetime,
        charged: list[Charge],
        ahead: list[int],
        tokens: int,
    ) -> None:
        self.at, self.charged, self.ahead, self.tokens = at, charged, ahead, tokens
        self.tokens_per_minute: int | None = limit["tokens_per_minute"]
        self.requests_per_minute: int | None = limit["requests_per_minute"]
        self.concurrency: int | None = limit["concurrency"]
        backoff = limit["backoff_until"]
        self.backoff_until = None if backoff is None else aware(backoff)

    def _excess_tokens(self) -> int:
        if self.tokens_per_minute is None:
            return 0
        used = sum(charge.tokens for charge in self.charged) + sum(self.ahead)
        if used == 0:
            return 0  # alone, a call larger than the whole minute goes through
        return used + self.tokens - self.tokens_per_minute

    def _excess_requests(self) -> int:
        if self.requests_per_minute is None:
            return 0
        return len(self.charged) + len(self.ahead) + 1 - self.requests_per_minute

    def _too_many_in_flight(self) -> bool:
        if self.concurrency is None:
            return False
        return sum(charge.in_flight for charge in self.charged) + 1 > self.concurrency

    def _backing_off(self) -> bool:
        return self.backoff_until is not None and self.backoff_until > self.at

    def fits(self) -> bool:
        return (
            self._excess_tokens() <= 0
            and self._excess_requests() <= 0
            and not self._too_many_in_flight()
            and not self._backing_off()
        )

    def wake_at(self) -> datetime:
        """When enough of the minute's charges age out for the call (and the runs ahead)."""
        window = timedelta(seconds=COUNTED_SECONDS)
        moments = [self.at + timedelta(seconds=LEAST_PARK_SECONDS)]
        if self._backing_off():
            assert self.backoff_until is not None
            moments.append(self.backoff_until)
        excess = self._excess_tokens()
        if excess > 0:
            moments.append(self._freed(excess, lambda charge: charge.tokens) + window)
        excess = self._excess_requests()
        if excess > 0:
            moments.append(self._freed(excess, lambda charge: 1) + window)
        if self._too_many_in_flight():
            moments.append(self.at + timedelta(seconds=CONCURRENCY_RECHECK_SECONDS))
        return max(moments)

    def _freed(self, excess: int, amount: Any) -> datetime:
        """The reservation time of the charge whose ageing out frees `excess` (the minute's
        charges age out oldest first); now, if they cannot free that much."""
        freed = 0
        for charge in self.charged:
            freed += amount(charge)
            if freed >= excess:
                return charge.reserved_at
        return self.at
