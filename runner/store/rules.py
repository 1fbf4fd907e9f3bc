"""The rules both stores keep, written once: the SQL store (runner.store's SQL modules) and
the in-memory one (runner.testing) decide the same way because they ask the same code.

Queues: what a queue's name, a priority and a queue's limit may be. Retention: a queue's
rules (`Rules`), the default's name, the batches a pass deletes in, and which rules apply to
a queue (`effective`). Leases: what a claim holds (`Claim`), when a run is held by a live
worker (`refuse_if_held`), what a crash loop is told. Provider limits: what a call charged
(`Charge`), whether a call fits a limit now and from when it will (`Room`), how long a
parked run keeps its place in line, how an amount is checked. None of it reads a database.

The rest of this feature (docs/architecture.md, "Where a feature lives"):
`runner.sql.retention`, `runner.testing.memory_retention`, `runner.service.housekeeping` (where
a worker applies the rules between claims), `runner.history.archive`.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from runner.core.journal import Entry, EntryKind
from runner.core.limits import COUNTED_SECONDS, WINDOW_SECONDS
from runner.core.status import RunStatus
from runner.core.waiting import Answer, Asks, Wait
from runner.errors import LeaseHeld, NotWaiting, WrongAnswer
from runner.store.rows import COUNTER_MAX, RunRow
from runner.store.run_views import result_of as result_of
from runner.store.run_views import unanswered as unanswered
from runner.store.run_views import wait_of as wait_of

if TYPE_CHECKING:
    # Named only in a relay's annotation: `runner list` and `show` never load the trees'
    # module (tests/integration/test_startup_imports.py).
    from runner.core.tree import Ancestor

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


def chosen(names: Collection[str] | None) -> list[str] | None:
    """The queues a worker serves, each checked (None: every queue)."""
    if names is None:
        return None
    picked = [check_queue(name) for name in names]
    if not picked:
        raise ValueError("a worker must serve at least one queue")
    return picked


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


@dataclass(frozen=True)
class Cutoff:
    """Which finished runs of a queue its rules delete: every one (`everything`), or those
    that finished before `before`."""

    everything: bool = False
    before: datetime | None = None

    def deletes(self, finished_at: datetime) -> bool:
        return self.everything or (self.before is not None and finished_at < self.before)


def cutoff(rules: Rules, now: datetime, oldest_kept: datetime | None) -> Cutoff | None:
    """What `rules` delete at `now` (None: nothing). A run goes when either rule says so:
    it finished longer ago than `keep_seconds`, or it is not among the newest `keep_runs`
    finished runs of its queue: those that finished before the oldest of them
    (`oldest_kept`, which the store reads; None when the queue has fewer) go, and ties
    with it stay, so at least `keep_runs` are kept. Either store deletes, besides, only a
    run whose whole tree is finished."""
    if rules.keep_runs == 0:
        return Cutoff(everything=True)
    befores = []
    if rules.keep_seconds is not None:
        # Longer ago than any time (OverflowError): nothing is that old.
        with contextlib.suppress(OverflowError):
            befores.append(now - timedelta(seconds=rules.keep_seconds))
    if rules.keep_runs is not None and oldest_kept is not None:
        befores.append(oldest_kept)
    return Cutoff(before=max(befores)) if befores else None


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
    # A fresh run's task, journaled (entry 0) by the claim's own transaction: its journal
    # starts with it, and nothing is read or written for it (runner.sql.leases, _Together).
    task: Entry | None = None


@dataclass
class Relay:
    """A worker's slot handed along a tree of runs, with no claim between its runs: a run
    that parks for its sub-agents' calls creates its first child already claimed for
    `owner` (in the transaction that creates it, epoch 1), and the child whose end is the
    last its parent waited for takes the parent back (claimed in the delivery's
    transaction, its epoch bumped as any claim bumps it). The store sets `next`: the claim
    the worker runs next on the same slot. A worker that dies between the two holds a
    lease that lapses like any other, and the next claimer takes the run over."""

    owner: str
    lease_seconds: float
    max_resumes: int
    next: Claim | None = None
    # The journals (entries with the epoch that wrote each) of the runs parked on the way,
    # by run: a parent taken back goes on from these and its children's ends, without
    # reading its journal again (each resume read it whole: a parent's cost grew with the
    # square of its children). Used only while it is as long as the journal in the
    # database when taken back.
    kept: dict[str, list[tuple[Entry, int]]] = field(default_factory=dict)
    # The child handed the slot and the runs above it as its parent knew them when it
    # parked (nearest first): the child reads none of them again before it starts (its
    # model calls' reservations read them in their own transactions).
    above: tuple[str, list[Ancestor]] | None = None
    # What the run that handed the slot on waits for (its worker says so).
    waits: list[Wait] = field(default_factory=list)
    # The child handed the slot, if its first model call was held in its parent's park.
    held_ahead: HeldAhead | None = None


@dataclass(frozen=True)
class HeldAhead:
    """A child's first model call (`step`, an estimate of `tokens`) held against its tree's
    budgets in the transaction that created it (runner.sql.tree_budget.hold_ahead): its
    call goes on that hold, unless its own estimate is larger."""

    run_id: str
    hold_id: str
    step: int
    tokens: int


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


# -- waits and answers ------------------------------------------------------------------------


# `unanswered`, `wait_of` and `result_of` are runner.store.run_views' (imported above).


# -- answers to waiting runs ------------------------------------------------------------------

# The width of entries.answered_by.
BY_LIMIT = 200


def check_answer(given: Answer, text: str | None, by: str) -> None:
    """ValueError for an answer no run could take (whatever it waits for)."""
    if given is Answer.TIMED_OUT:
        raise ValueError("a timeout is recorded by the runner, not given as an answer")
    if given in (Answer.DENIED, Answer.REPLIED) and not (text or "").strip():
        what = "a reason" if given is Answer.DENIED else "the reply's text"
        raise ValueError(f"{what} must not be empty")
    if len(by) > BY_LIMIT:
        raise ValueError(f"who answers must be named in at most {BY_LIMIT} characters")


def answer_entry(
    wait: Entry, given: Answer, text: str | None, by: str | None, *, is_error: bool = False
) -> Entry:
    """The journal entry of an answer to `wait`: its step, counters, tool and key, the
    answer and who gave it (every store writes the same one; a child's end that failed is
    an error)."""
    return Entry(
        EntryKind.ANSWER,
        wait.step,
        wait.counters,
        content=text,
        tool=wait.tool,
        idempotency_key=wait.idempotency_key,
        is_error=is_error,
        answer=given,
        answered_by=by,
    )


def chosen_wait(
    run: RunRow, waits: Sequence[Wait], call: str | None, answered: Callable[[], str]
) -> Wait:
    """The open wait an answer is for: the one `call` names, or the only one. `answered`
    says how `call` was answered already, if it was ("" if not)."""
    if call is None:
        if len(waits) == 1:
            return waits[0]
        raise WrongAnswer(
            f"run {run.id} waits for {len(waits)} calls: name the one you answer with "
            f"--call ({_calls(waits)})"
        )
    for wait in waits:
        if wait.call == call:
            return wait
    already = answered()
    if already:
        raise NotWaiting(f"run {run.id} waits for other calls: {already}")
    return _wrong_call(run, waits, call)


def _wrong_call(run: RunRow, waits: Sequence[Wait], call: str) -> NoReturn:
    if len(waits) == 1:
        raise WrongAnswer(
            f"run {run.id} waits for call {waits[0].call} ({waits[0].question}), not for {call}"
        )
    raise WrongAnswer(f"run {run.id} waits for calls {_calls(waits)}, not for {call}")


def _calls(waits: Sequence[Wait]) -> str:
    return ", ".join(f"{wait.call} {wait.question}" for wait in waits)


def check_fits(run: RunRow, wait: Wait, given: Answer, call: str | None = None) -> None:
    """WrongAnswer unless `given` (for `call`, if named) answers what `run` waits for."""
    if wait.asks is Asks.CHILD:
        raise WrongAnswer(
            f"run {run.id} waits for its sub-agent's run to end (call {wait.call}), not for "
            "a person: its end is delivered by the runner"
        )
    if call is not None and call != wait.call:
        raise WrongAnswer(
            f"run {run.id} waits for call {wait.call} ({wait.question}), not for {call}"
        )
    if given is Answer.APPROVED and wait.asks is Asks.REPLY:
        raise WrongAnswer(
            f"run {run.id} waits for a reply to its question, not an approval: "
            f"runner reply {run.id} --call {wait.call} TEXT "
            f"(or runner deny {run.id} --call {wait.call} --reason TEXT)"
        )
    if given is Answer.REPLIED and wait.asks is Asks.APPROVAL:
        raise WrongAnswer(
            f"run {run.id} waits for approval of {wait.question}, not a reply: "
            f"runner approve {run.id} --call {wait.call} "
            f"or runner deny {run.id} --call {wait.call} --reason TEXT"
        )


def answer_words(entry: Entry, at: datetime) -> str:
    """An answer (entry, written at `at`) in words: `call K was already approved by ann ...`."""
    by = f" by {entry.answered_by}" if entry.answered_by else ""
    verb = str(entry.answer).replace("_", " ")
    return f"call {entry.idempotency_key} was already {verb}{by} at {at:%Y-%m-%d %H:%M:%S} UTC"


def why_not_waiting(run: RunRow, answered: str | tuple[Entry, datetime] | None) -> str:
    """Why an answer to `run` is refused, given how it (or the call named) was answered
    last: in words, or as the answer entry and when it was written."""
    if isinstance(answered, tuple):
        answered = answer_words(*answered)
    answered = answered or ""
    if run.status is RunStatus.FINISHED:
        why = f"run {run.id} is finished ({run.stop_reason}): it waits for no answer"
        return f"{why} ({answered})" if answered else why
    if answered and run.status is not RunStatus.WAITING:
        return f"run {run.id} is not waiting: {answered}"
    return f"run {run.id} is not waiting for an answer (it is {run.status})"


# -- messages sent to runs --------------------------------------------------------------------


def conflict_words(run: RunRow, key: str, number: int) -> str:
    """Why a message is refused whose key names another message of the run."""
    return (
        f"key {key} was sent to run {run.id} with another message (message {number}): "
        "a key names one message; send this one with a new key"
    )


def finished_words(run: RunRow) -> str:
    """Why a message to a finished run is refused, and what to do instead."""
    return (
        f"run {run.id} is finished ({run.stop_reason}): no step of it would read a message; "
        "send it with --revive to continue the run with it"
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
    # Within its minute: its tokens and its request count against the limit's minute. A call
    # in flight longer than that (a slow model) no longer does, but still holds its slot of
    # the concurrency for as long as its lease lives.
    counted: bool = True


@dataclass(frozen=True)
class Charged:
    """What a limit has charged over its minute: the totals a call's fit needs, and the
    charges themselves, oldest first, only when asked (`listed`): a call that does not fit
    needs them to know when enough age out. The SQL store sums in the database and reads the
    rows only then; a minute of a busy limit is hundreds of them."""

    tokens: int
    requests: int
    in_flight: int
    listed: Callable[[], Sequence[Charge]]

    @classmethod
    def of(cls, charges: Sequence[Charge]) -> Charged:
        counted = [charge for charge in charges if charge.counted]
        return cls(
            sum(charge.tokens for charge in counted),
            len(counted),
            sum(charge.in_flight for charge in charges),
            lambda: counted,
        )


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
        charged: Sequence[Charge] | Charged,
        ahead: list[int],
        tokens: int,
        requests: int = 1,
    ) -> None:
        self.at, self.ahead, self.tokens = at, ahead, tokens
        self.charged = charged if isinstance(charged, Charged) else Charged.of(charged)
        # `requests`: more than 1 for a worker's grant of several calls (runner.sql.grants).
        self.requests = requests
        self.tokens_per_minute: int | None = limit["tokens_per_minute"]
        self.requests_per_minute: int | None = limit["requests_per_minute"]
        self.concurrency: int | None = limit["concurrency"]
        backoff = limit["backoff_until"]
        self.backoff_until = None if backoff is None else aware(backoff)

    def _excess_tokens(self) -> int:
        if self.tokens_per_minute is None:
            return 0
        used = self.charged.tokens + sum(self.ahead)
        if used == 0:
            return 0  # alone, a call larger than the whole minute goes through
        return used + self.tokens - self.tokens_per_minute

    def _excess_requests(self) -> int:
        if self.requests_per_minute is None:
            return 0
        return self.charged.requests + len(self.ahead) + self.requests - self.requests_per_minute

    def _too_many_in_flight(self) -> bool:
        if self.concurrency is None:
            return False
        return self.charged.in_flight + 1 > self.concurrency

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
        for charge in self.charged.listed():
            if not charge.counted:
                continue  # past its minute already: its ageing out frees nothing
            freed += amount(charge)
            if freed >= excess:
                return charge.reserved_at
        return self.at


# Letters, digits and `_ . : - / @`: a provider and a model, as in `openai/gpt-4.1`.
LIMIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/@-]{0,199}")


# The columns are 32-bit integers on PostgreSQL (tokens 64-bit).
_INT_MAX = 2**31 - 1


def check_limit_name(name: object) -> str:
    if not isinstance(name, str) or not LIMIT_NAME.fullmatch(name):
        raise ValueError(
            f"limit {name!r} must be 1 to 200 letters, digits, '_', '.', ':', '/', '@' or '-', "
            "starting with a letter or digit"
        )
    return name


def limit_values(
    tokens_per_minute: int | None, requests_per_minute: int | None, concurrency: int | None
) -> dict[str, int | None]:
    """A limit's three measures as its row's columns, each checked (ValueError if not a
    whole number from 1 to what its column holds); both stores set a limit from these."""
    return {
        "tokens_per_minute": check_amount("tokens per minute", tokens_per_minute, COUNTER_MAX),
        "requests_per_minute": check_amount("requests per minute", requests_per_minute, _INT_MAX),
        "concurrency": check_amount("concurrency", concurrency, _INT_MAX),
    }


@dataclass(frozen=True)
class Waiter:
    """A run in a limit's line, in line order."""

    run_id: str
    tokens: int
    parked: bool  # queued with a wake-up time still to come (else running, or due already)


def woken(limit: Any, at: datetime, charged: Sequence[Charge], line: Sequence[Waiter]) -> list[str]:
    """The parked runs of `line` to wake at `at`: each whose call fits the limit with the
    runs before it in line counted as calls in flight, up to the first that does not."""
    counted = list(charged)
    found: list[str] = []
    for waiter in line:
        if not Room(limit, at, counted, [], waiter.tokens).fits():
            break
        counted.append(Charge(waiter.tokens, at, True))
        if waiter.parked:
            found.append(waiter.run_id)
    return found
