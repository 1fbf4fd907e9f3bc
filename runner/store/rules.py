"""The rules both stores keep, written once: the SQL store (runner.store's SQL modules) and
the in-memory one (runner.testing) decide the same way because they ask the same code.

Queues: what a queue's name, a priority and a queue's limit may be. Retention: a queue's
rules (`Rules`), the default's name, the batches a pass deletes in, and which rules apply to
a queue (`effective`). Leases: what a claim holds (`Claim`), when a run is held by a live
worker (`refuse_if_held`), what a crash loop is told. Provider limits: what a call charged
(`Charge`), whether a call fits a limit now and from when it will (`Room`), how long a
parked run keeps its place in line, how an amount is checked. None of it reads a database.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from runner.core.limits import COUNTED_SECONDS, WINDOW_SECONDS
from runner.core.status import RunStatus
from runner.errors import LeaseHeld
from runner.store.rows import RunRow

# -- queues -----------------------------------------------------------------------------------

# Letters, digits and `_ . : -`, like a run id: a name a shell and `--queue a,b` keep whole.
QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")


# runs.priority is a 32-bit integer on PostgreSQL.
PRIORITY_RANGE = (-(2**31), 2**31 - 1)


def check_queue(name: object) -> str:
    """The queue name, or ValueError saying what a name may be."""
    if not isinstance(name, str) or not QUEUE_NAME.fullmatch(name):
        raise ValueError(
            f"queue {name!r} must be 1 to 64 letters, digits, '_', '.', ':' or '-', "
            "starting with a letter or digit"
        )
    return name


def check_priority(priority: object) -> int:
    low, high = PRIORITY_RANGE
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ValueError(f"priority must be a whole number, not {priority!r}")
    if not low <= priority <= high:
        raise ValueError(f"priority must be between {low} and {high}, got {priority}")
    return priority


def check_limit(limit: object) -> int | None:
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"a queue's limit must be a whole number, 0 or more, not {limit!r}")
    if limit > PRIORITY_RANGE[1]:
        raise ValueError(f"a queue's limit must be at most {PRIORITY_RANGE[1]}, got {limit}")
    return limit


# -- retention --------------------------------------------------------------------------------

# The queue name of the default rules: no queue can be named so (check_queue).
DEFAULT_RULES = "*"


# The most runs one transaction deletes, and the most batches one pass of a worker runs.
BATCH_SIZE = 100


BATCHES_PER_PASS = 10


# A run's id, seconds and count columns hold at most these.
MOST_SECONDS = 2**63 - 1


MOST_RUNS = 2**31 - 1


@dataclass(frozen=True)
class Rules:
    """What a queue keeps: None for a rule not set."""

    keep_seconds: int | None = None
    keep_runs: int | None = None

    def __bool__(self) -> bool:
        return self.keep_seconds is not None or self.keep_runs is not None


@dataclass
class Expired:
    """What a pass of retention deleted, per queue."""

    runs: int = 0
    queues: Counter[str] = field(default_factory=Counter)


def check_rules_name(name: object) -> str:
    """A queue's name, or `*` for the default of every queue."""
    return DEFAULT_RULES if name == DEFAULT_RULES else check_queue(name)


def check_keep_seconds(seconds: object) -> int | None:
    if seconds is None:
        return None
    if isinstance(seconds, timedelta):
        seconds = seconds.total_seconds()
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
        raise ValueError(f"keep must be a duration of 0 seconds or more, not {seconds!r}")
    if seconds > MOST_SECONDS:
        raise ValueError(f"keep must be at most {MOST_SECONDS} seconds, got {seconds:g}")
    return int(seconds)


def check_keep_runs(count: object) -> int | None:
    if count is None:
        return None
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"keep_runs must be a whole number, 0 or more, not {count!r}")
    if count > MOST_RUNS:
        raise ValueError(f"keep_runs must be at most {MOST_RUNS}, got {count}")
    return count


def effective(rules: dict[str, Rules], queue: str) -> Rules:
    """The queue's rules, each falling back on the default's when the queue leaves it NULL."""
    own, default = rules.get(queue, Rules()), rules.get(DEFAULT_RULES, Rules())
    return Rules(
        own.keep_seconds if own.keep_seconds is not None else default.keep_seconds,
        own.keep_runs if own.keep_runs is not None else default.keep_runs,
    )


# -- leases -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """A lease this worker now holds: write with `epoch` until told otherwise."""

    run: RunRow
    epoch: int
    next_seq: int
    crash_loop: bool  # the run was given up: taken over too often without progress
    # Takeovers in a row that found no new journal entry: more than 0 makes the run a
    # suspect of killing its workers, which a worker runs alone until it progresses.
    stalled: int = 0


def crash_loop_error(run_id: str, stalled: int, max_resumes: int) -> str:
    """What is known of a crash loop: takeovers with no journal entry, after owners that
    died holding the run. Whether the run itself killed them, nobody can tell."""
    return (
        f"resumed {stalled} times in a row without a new journal entry (max_resumes "
        f"{max_resumes}): each time, its last owner had died without releasing the run; once "
        f"the cause is fixed, continue it with `runner resume {run_id} --max-resumes N`"
    )


def refuse_if_held(run: RunRow, at: datetime, *, steal: bool) -> None:
    """LeaseHeld when a live worker executes `run` at `at` and the caller does not steal it
    (a finished run is never held). Every store takes a run for a resume by this rule."""
    if run.status is not RunStatus.FINISHED and not steal and run.lease_is_live(at):
        raise LeaseHeld(
            f"run {run.id} is being executed by {run.lease_owner} (lease until "
            f"{run.lease_expires_at:%H:%M:%S} UTC); pass --steal to take it over"
        )


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
    # When its minute starts: its settle, or its reservation plus a grace while it is not
    # settled (runner.core.limits.counted_from): it ages out a minute and a guard later.
    reserved_at: datetime
    # Not settled yet, under a live lease: a call in flight (its tokens are the estimate,
    # as are those of a call not settled whose lease is gone, counted but not in flight).
    in_flight: bool


def aware(moment: datetime) -> datetime:
    # The columns' type gives UTC back already; a value read through a plain query may not.
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


# A run waiting for a call in flight to end (the concurrency) is woken by that call's settle
# (runner.sql.limit_line); it looks again this late only in case no settle comes (the call's
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
