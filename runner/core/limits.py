"""Limits a run's model calls draw from: the protocol the loop reserves and settles through.

Before a model call the loop reserves one request and an estimate of the call's tokens from
the limit the agent names (`Agent(limit=...)`, or the adapter's own `limit` attribute, such
as `openai/gpt-4.1`); after it, the reservation is settled with the tokens the model reported
(0 for a call that failed). A limit with no room parks the run (`RunParked`): it is queued
again with a wake-up time and holds no worker slot meanwhile. A provider's `Retry-After` is
handed back (`back_off`) so that every run of the limit waits, not only the one told.

The estimate is documented, and deliberately simple: the text of what the model is sent (its
JSON) at four characters a token, plus the model's `max_tokens` (its output allowance), or
DEFAULT_OUTPUT_TOKENS when the model does not say. The settle replaces it with the truth.

The store implements `Limits` (SQL, shared by every worker); `NO_LIMITS` reserves nothing.

The rest of this feature (docs/architecture.md, "Where a feature lives"):
`runner.store.rules`, `runner.sql.limits`, `runner.sql.reservations`, `runner.sql.grants`,
`runner.sql.limit_rides`, `runner.sql.reserving`, `runner.sql.limit_line`,
`runner.testing.memory_limits`, `runner.service.limiting`, `runner.cli.limits`,
`runner.history.limit_use`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from runner.core.actions import parse_action
from runner.core.counters import Counters
from runner.core.faults import fault
from runner.core.journal import Entry, EntryKind
from runner.errors import ModelRetryable

# A limit counts what was charged to it over this many seconds up to now.
WINDOW_SECONDS = 60.0
# A charge counts a little longer than the minute: the provider sees a call some time after
# it was reserved, so without this a call reserved the moment an old one ages out here could
# reach the provider before that old one ages out there (and be refused with a 429).
WINDOW_GUARD_SECONDS = 1.0
COUNTED_SECONDS = WINDOW_SECONDS + WINDOW_GUARD_SECONDS
# A charge's minute starts where the provider may last have received the call: at its settle
# for a call that ended (the provider had answered by then, however late the request left),
# and this long after its reservation for one not settled (in flight, or its worker died
# before it heard back): a worker short of CPU sent calls 2.2 s after reserving them in the
# crash soak (benchmarks/crash_soak.py F), and the provider's minute ran on past ours.
UNSETTLED_GRACE_SECONDS = 10.0


def counted_from(reserved_at: datetime, settled: bool, settled_at: datetime | None) -> datetime:
    """When a charge's minute starts (see UNSETTLED_GRACE_SECONDS)."""
    if settled:
        return settled_at or reserved_at
    return reserved_at + timedelta(seconds=UNSETTLED_GRACE_SECONDS)


# The output allowance of a call whose model states no max_tokens.
DEFAULT_OUTPUT_TOKENS = 1000
# The prompt's estimate: characters of its JSON per token (a common rule of thumb for English).
CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class Reservation:
    """One model call's charge to a limit, held from before the call to its settle."""

    limit: str
    id: str | None  # None: the limit is not set, nothing was reserved
    tokens: int  # the estimate reserved
    waited: float = 0.0  # seconds the run waited in line for it (0: it found room at once)


# The tokens to reserve, or how to estimate them: made only for a limit that is set, since
# an adapter draws from `provider/model` by default and the estimate reads the whole prompt.
Estimate = int | Callable[[], int]


def estimated(tokens: Estimate) -> int:
    return tokens() if callable(tokens) else tokens


class Limits(Protocol):
    """Where a run's model calls reserve and settle (one run's, under its lease)."""

    def reserve(self, limit: str, tokens: Estimate) -> Reservation:
        """Charge one request and `tokens` to `limit`; if it has no room, park the run until
        it may (and raise RunParked). A limit that is not set reserves nothing (and leaves
        an estimate unmade: its reservation holds 0 tokens)."""
        ...

    def settle(self, reservation: Reservation, tokens: int) -> None:
        """The call ended having used `tokens` (as the provider reported; 0 if it failed)."""
        ...

    def back_off(self, limit: str, seconds: float) -> None:
        """The provider said to come back in `seconds`: no run reserves from `limit` before."""
        ...


class NoLimits:
    """Reserves nothing: `run_agent`, and any run on a store without limits."""

    def reserve(self, limit: str, tokens: Estimate) -> Reservation:
        return Reservation(limit, None, tokens if isinstance(tokens, int) else 0)

    def settle(self, reservation: Reservation, tokens: int) -> None:
        return None

    def back_off(self, limit: str, seconds: float) -> None:
        return None


NO_LIMITS: Limits = NoLimits()


def estimate_tokens(shown: Any, max_tokens: int | None) -> int:
    """The tokens reserved for a call sending `shown` (see the module's doc)."""
    return tokens_of(len(json.dumps(shown, default=str, ensure_ascii=False)), max_tokens)


def tokens_of(characters: int, max_tokens: int | None) -> int:
    """The estimate of a call whose prompt's JSON is `characters` long."""
    allowance = DEFAULT_OUTPUT_TOKENS if max_tokens is None else max_tokens
    return math.ceil(characters / CHARS_PER_TOKEN) + allowance


def characters_added(messages: Sequence[Any]) -> int:
    """How much longer `messages` make a prompt's JSON (a list): each item and its ", "
    (the brackets and the one separator fewer make up for each other in a list of one
    or more, so a list's JSON is exactly this long when it is its items)."""
    return sum(len(json.dumps(m, default=str, ensure_ascii=False)) + 2 for m in messages)


def limit_of(model: Any, named: str | None = None) -> str | None:
    """The limit a model's calls draw from: `named`, else the model's own `limit` attribute
    (an adapter's `provider/model`), else None."""
    if named is not None:
        return named
    own = getattr(model, "limit", None)
    return own if isinstance(own, str) and own else None


@dataclass
class Draw:
    """One run's model calls drawing from one limit: reserve before, settle after.

    `waited` is told of each reservation the run had to wait for (the loop journals it).
    """

    limits: Limits
    limit: str
    max_tokens: int | None = None
    waited: Callable[[Reservation], None] | None = None
    # The length of the JSON of the last prompt whose estimate was made (None: none yet).
    characters: int | None = None

    def reserve(self, shown: Any) -> Reservation:
        reservation = self.limits.reserve(self.limit, lambda: self._estimate(shown))
        fault("after_limit_reserve")
        if reservation.waited > 0 and self.waited is not None:
            self.waited(reservation)
        return reservation

    def _estimate(self, shown: Any) -> int:
        self.characters = len(json.dumps(shown, default=str, ensure_ascii=False))
        return tokens_of(self.characters, self.max_tokens)

    def ahead(self, characters: Callable[[], int]) -> None:
        """The run's next call will send a prompt whose JSON is about `characters()` long,
        right after the journal's next write: a store may reserve it in that write
        (runner.sql.limit_rides), so that the call's own reservation costs no commit."""
        reserve_ahead = getattr(self.limits, "reserve_ahead", None)
        if reserve_ahead is not None:
            reserve_ahead(self.limit, lambda: tokens_of(characters(), self.max_tokens))

    def settle(self, reservation: Reservation, output: Any) -> None:
        """Settle with the usage `output` reports (None: the call failed, it used none).

        A call that gave an output is recorded by the journal's next write, which a store
        may settle it in (`settle_later`); a failed one is settled at once (a run that
        retries it may wait first, and its slot of a concurrency is free meanwhile)."""
        used = 0
        if output is not None:
            try:
                used = parse_action(output).tokens
            except Exception:  # an output the loop will call invalid: charge the estimate
                used = reservation.tokens
            later = getattr(self.limits, "settle_later", None)
            if later is not None:
                later(reservation, used)
                return
        self.limits.settle(reservation, used)

    def failed(self, exc: BaseException) -> None:
        """A provider's 429 with Retry-After backs the limit off for every run."""
        if isinstance(exc, ModelRetryable) and exc.retry_after is not None:
            self.limits.back_off(self.limit, exc.retry_after)


def max_tokens_of(model: Any) -> int | None:
    """The output allowance a model states (`max_tokens`), if it states one."""
    value = getattr(model, "max_tokens", None)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def limit_wait_entry(counters: Counters, reservation: Reservation) -> Entry:
    """The journal's record that the run waited for its limit before its next model call
    (not shown to the model; a resumed loop passes over it)."""
    return Entry(
        EntryKind.LIMIT_WAIT,
        counters.steps + 1,
        counters,
        content=f"waited {reservation.waited:.1f}s for limit {reservation.limit}",
        args={"limit": reservation.limit, "waited_seconds": round(reservation.waited, 3)},
    )


def first_call_tokens(agent: Any, task: str) -> int | None:
    """What a child run of `agent` on `task` will estimate its first model call at, as its
    loop does (`ModelCall.hold_tree`: the transcript of its task alone, and its model's
    output allowance), or None where its parent cannot tell: a context function decides
    what the model is sent, or a framework drives the loop. Only a guess by the parent: the
    child holds afresh if its own estimate is larger (messages sent to it meanwhile)."""
    if getattr(agent, "context", None) is not None or getattr(agent, "loop", None) is not None:
        return None
    model = getattr(agent, "model", None)
    if model is None:
        return None
    return estimate_tokens([{"role": "user", "content": task}], max_tokens_of(model))
