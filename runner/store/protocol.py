"""What the service asks of a store: the operations on runs, as one typed protocol.

The `Runner` and the worker drive runs through a `RunStore` and nothing else of the store:
`SqlStore` (runner.sql.store) is the SQL of the other store modules behind it, for
one database; `runner.testing.InMemoryStore` is a fake of it in memory, for fast tests of
the logic above the store (claims, answers, queue limits, revival, forks). Each operation
is one transaction in SQL: whole or absent, and fenced by the lease epoch where it says so.

The rest of this feature (docs/architecture.md, "Where a feature lives"): `runner.sql.runs`,
`runner.sql.queues`, `runner.cli.runs`, `runner.cli.queues`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from runner.core.clock import Clock
from runner.core.deltas import Delta
from runner.core.journal import Entry, EntryKind, Journal
from runner.core.limits import Limits
from runner.core.messages import Sent
from runner.core.status import RunStatus
from runner.core.stop_reasons import StopReason
from runner.core.waiting import Answer, Answered, Wait
from runner.errors import RunnerError
from runner.store.blob_sweep import Swept
from runner.store.delta_writer import RunDeltas
from runner.store.follow import Follow
from runner.store.releases import OlderReleases, ReleaseInfo, Releases
from runner.store.rows import DueQueued, Fired, LimitInfo, QueueInfo, RunRow, ScheduleRow
from runner.store.rules import Claim as Claim  # re-exported: what a claim holds
from runner.store.rules import Expired, Relay, Rules
from runner.store.scores import DueScore, ScoreClaim, ScoreRow

# Told of each journal entry after its commit, on the thread that wrote it.
Observer = Callable[[str, Entry], None]


@dataclass(frozen=True)
class BudgetChange:
    """What a change of a run's budgets writes: one journal entry after the run's last, and
    the run's new column values (see `RunStore.change_budgets`)."""

    entry: Entry
    values: dict[str, Any]


# Given the run (locked), its last two entries (seq, entry), newest first, and now: the
# change to write, or None for none. Raises to refuse (nothing is written then).
Decide = Callable[[RunRow, Sequence[tuple[int, Entry]], datetime], BudgetChange | None]


class OpenJournal(Journal, AbstractContextManager["OpenJournal"], Protocol):
    """A claimed run's journal, held (its lease renewed) while the context is open."""


class Wakeups(Protocol):
    """Sets an event when a run may have become runnable (a submit, an answer, a release)."""

    def start(self) -> bool:
        """Begin listening; False where the store cannot tell (then callers poll)."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Wakeups: ...

    def __exit__(self, *exc: object) -> None: ...


class RunStore(Protocol):
    """The store of durable runs, as the service uses it (see the module's doc)."""

    @property
    def clock(self) -> Clock:
        """The clock leases and deadlines are measured on (the database's, on PostgreSQL)."""
        ...

    @property
    def owner(self) -> str:
        """This process's name as a lease holder."""
        ...

    def describe(self) -> str:
        """The store as a log line names it (a URL with no password)."""
        ...

    def close(self) -> None: ...

    # -- creating and reading runs ------------------------------------------------------

    def create_run(self, row: Mapping[str, Any], *, wake: bool = True) -> bool:
        """Insert a run (a row of `runs.new_run`); False, nothing written, if its id exists."""
        ...

    def insert_runs(self, rows: Sequence[Mapping[str, Any]], *, wake: bool = True) -> None:
        """Insert runs in one transaction: all or none (the store's error if an id exists)."""
        ...

    def refresh_statistics(self) -> None:
        """After a bulk insert: what the planner knows of the runs (PostgreSQL's statistics)."""
        ...

    def existing_runs(self, run_ids: Sequence[str]) -> dict[str, RunRow]: ...

    def get_run(self, run_id: str) -> RunRow:
        """The run with exactly this id (RunNotFound)."""
        ...

    def find_run(self, prefix: str) -> RunRow:
        """The run whose id is `prefix`, or the only one whose id starts with it."""
        ...

    def load_entries(self, run_id: str, kinds: Sequence[EntryKind] = ()) -> list[tuple[Entry, int]]:
        """The run's journal in order (of `kinds`, if given), each with its writer's epoch."""
        ...

    def entries_after(self, run_id: str, after: int, limit: int) -> list[tuple[int, Entry]]:
        """At most `limit` of the run's journal entries whose position (seq) is after
        `after`, in order, each with its position."""
        ...

    def deltas_after(self, run_id: str, after: int, limit: int) -> list[tuple[int, Delta]]:
        """At most `limit` of the run's stored deltas (pieces of a model call in flight)
        whose id is above `after`, in order, each with its id (a cursor, not a position)."""
        ...

    def follow(self, run_id: str, poll_seconds: float) -> Follow | None:
        """Register a follower of `run_id`, to be woken when the run may have moved (its
        journal, its deltas or its status), by the one watcher of this process: call it
        before the first read. None where the store cannot tell (the follower polls every
        `poll_seconds` on its own); on SQLite, `poll_seconds` is how often the watcher
        looks for it."""
        ...

    def list_runs(
        self,
        now: datetime,
        *,
        status: RunStatus | None = None,
        stop_reason: StopReason | None = None,
        release: str | None = None,
        limit: int = 20,
        state: str | None = None,
        schedule: str | None = None,
    ) -> list[RunRow]:
        """Runs, newest first, with their state at `now` (runner.sql.run_states.runs)."""
        ...

    def observe(self, rows: Sequence[RunRow], now: datetime) -> list[RunRow]:
        """The rows with their state at `now` and an unfinished run's journal counters."""
        ...

    def tree_runs(self, root_id: str, limit: int) -> list[RunRow]:
        """The runs of the tree rooted at `root_id` (the root included), oldest first, at
        most `limit` (runner.sql.reads.tree_runs)."""
        ...

    def waits(self, rows: Sequence[RunRow]) -> dict[str, list[Wait]]:
        """Every call each waiting run among `rows` waits for, in call order, by id (a step of
        several calls may wait for several)."""
        ...

    def request_cancel(self, run_id: str) -> RunRow:
        """Ask the run, and every run below it, to stop: at its next step while a live
        worker holds it, else now."""
        ...

    def finish_lapsed_cancels(self) -> list[RunRow]:
        """Finish `cancelled`, without a step, the runs asked to cancel whose lease lapsed
        (their worker died holding them), each end delivered to its parent; the runs."""
        ...

    # -- trees of runs (runner.sql.children) ---------------------------------------------

    def deliver_children(self, parent_id: str, relay: Relay | None = None) -> bool:
        """Record the end of each finished child the parent waits for as its answer; the
        last queues the parent again (True then). Exactly once, whoever races for it. With
        `relay`, the last claims the parent for the relay's owner instead (`relay.next`)."""
        ...

    def deliver_ended(self) -> int:
        """Deliver every child's end still owed to a waiting parent (a crash may have cut a
        delivery short): how many parents were queued again."""
        ...

    def child_runs(self, run_id: str) -> list[RunRow]:
        """The run's children (the runs its sub-agents' calls started), oldest first."""
        ...

    # -- leases and the journal -----------------------------------------------------------

    def claim_run(
        self,
        run_id: str,
        *,
        lease_seconds: float,
        max_resumes: int,
        steal: bool = False,
        owner: str | None = None,
    ) -> Claim:
        """Take the lease of one run for `owner` (None: this process), LeaseHeld while a
        live holder has it."""
        ...

    def create_claimed(
        self, row: Mapping[str, Any], *, lease_seconds: float, max_resumes: int
    ) -> Claim | None:
        """`create_run` and `claim_run` (for this process) at once, in one commit: None,
        nothing written, if its id exists."""
        ...

    def claim_some(
        self,
        *,
        limit: int,
        owner: str,
        lease_seconds: float,
        max_resumes: int,
        skip_agents: Collection[str] = (),
        suspects: bool = True,
        queues: Sequence[str] | None = None,
        executing: Collection[str] = (),
        releases: Releases | None = None,
    ) -> list[Claim]:
        """Take up to `limit` runnable runs in claim order (runner.sql.leases.claim_some);
        never one of `executing` (the claimer's runs in flight) under a lapsed lease, nor
        one that `releases` (the claimer's release) may not take (runner.store.releases).
        A run taken that had nothing journaled has its task journaled by the claim
        (`Claim.task`), before any worker runs it."""
        ...

    def release_run(self, run_id: str, epoch: int, error: str | None = None) -> None:
        """Give an unfinished run back to the queue (if `epoch` still holds it)."""
        ...

    def open_journal(
        self,
        claim: Claim,
        *,
        lease_seconds: float,
        observer: Observer | None = None,
        relay: Relay | None = None,
    ) -> OpenJournal:
        """The claimed run's journal: every write fenced by the claim's epoch. With
        `relay`, a park for sub-agents' calls creates its first child claimed for the
        relay's owner (`relay.next`): a store that cannot leaves `next` empty."""
        ...

    def run_deltas(self, run_id: str) -> RunDeltas:
        """The sink of the run's deltas while this process drives it: hand it to the loop,
        make it an observer of the run's journal, close it when the run leaves."""
        ...

    # -- people, queues, budgets, forks ----------------------------------------------------

    def answer(
        self,
        run_id: str,
        given: Answer,
        *,
        text: str | None,
        by: str,
        call: str | None = None,
    ) -> Answered:
        """Record a person's answer to the run's wait and queue it: exactly once."""
        ...

    def send_message(self, run_id: str, key: str, body: str, *, finished_ok: bool = False) -> Sent:
        """Put a message in the run's inbox, once per key: the same key again finds the
        first (MessageRefused if its body differs); RunFinished for a finished run unless
        `finished_ok` (see runner.sql.messages.send)."""
        ...

    def inbox(self, run_id: str) -> list[Sent]:
        """The messages the run has not read yet, in the order they were sent."""
        ...

    def set_queue_limit(self, name: str, limit: int | None) -> None: ...

    def list_queues(self, now: datetime) -> list[QueueInfo]: ...

    def set_older_releases(self, name: str, policy: OlderReleases) -> None:
        """Store queue `name`'s policy for runs of another release than a worker's."""
        ...

    def queue_policy(self, name: str) -> OlderReleases:
        """Queue `name`'s policy for runs of another release than a worker's."""
        ...

    def list_releases(self, now: datetime) -> list[ReleaseInfo]:
        """Each release (of each agent) with an unfinished run, and how those runs stand."""
        ...

    def park_run(self, run_id: str, epoch: int, reason: str, error: str) -> bool:
        """Queue a claimed run again, parked with `reason` (a failed check: only a worker
        of its release takes it), if `epoch` still holds it; False if it did not."""
        ...

    def recorded_runs(
        self, *, since: datetime | None, agent: str | None, limit: int
    ) -> list[RunRow]:
        """The newest `limit` finished runs with an agent reference (of `agent` if given),
        finished at `since` or later, newest first: what a deploy gate replays."""
        ...

    def change_budgets(self, run_id: str, decide: Decide) -> RunRow:
        """In one transaction on the locked run: `decide` (see `Decide`), then its entry and
        values written; the run's row after (unchanged if `decide` gave None)."""
        ...

    def create_fork(
        self, row: Mapping[str, Any], parent_id: str, copied: int, extra: Entry | None
    ) -> bool:
        """Insert a fork (a row of `runs.new_run`) with a copy of the parent's first
        `copied` entries (epoch 0, kept as they are) and `extra` after them, in one
        transaction; False, nothing written, when the id is taken."""
        ...

    # -- retention ---------------------------------------------------------------------------

    def set_retention(self, name: str, rules: Rules) -> None:
        """Store a queue's retention rules (`*`: the default of every queue)."""
        ...

    def prune_expired(self, now: datetime) -> Expired:
        """Delete the finished runs their queues' rules expire at `now`, a small batch per
        transaction (runner.sql.retention)."""
        ...

    def sweep_blobs(self, older_than: datetime, *, dry_run: bool = False) -> Swept:
        """Delete the offloaded blobs last written before `older_than` that no row names
        (runner.store.blob_sweep); with `dry_run`, only count them."""
        ...

    # -- schedules ---------------------------------------------------------------------------

    def add_schedule(self, row: Mapping[str, Any]) -> bool:
        """Keep a schedule (its columns, checked by runner.store.cron); False, nothing kept,
        when its name is taken."""
        ...

    def schedules(self) -> list[ScheduleRow]:
        """Every schedule, by name."""
        ...

    def schedule(self, name: str) -> ScheduleRow:
        """The schedule `name`, or ScheduleNotFound."""
        ...

    def pause_schedule(self, name: str, paused: bool, now: datetime) -> ScheduleRow:
        """Pause or resume it; resumed, it fires from its first tick after `now` (the ticks
        of its pause are not caught up). ScheduleNotFound if there is none."""
        ...

    def remove_schedule(self, name: str) -> None:
        """Forget the schedule (its runs stay), or ScheduleNotFound."""
        ...

    def fire_schedules(self, now: datetime) -> list[Fired]:
        """Handle every schedule's tick due at `now`: a run started or a skip recorded each,
        exactly once whatever the number of callers (runner.sql.schedules)."""
        ...

    def next_tick(self) -> datetime | None:
        """When the next tick of any schedule not paused comes (None: none)."""
        ...

    # -- provider limits (runner.sql.limits, runner.sql.reservations) ----------------------

    def set_limit(
        self,
        name: str,
        *,
        tokens_per_minute: int | None,
        requests_per_minute: int | None,
        concurrency: int | None = None,
    ) -> None:
        """Store limit `name` (None: not limited by that measure)."""
        ...

    def remove_limit(self, name: str) -> None:
        """Remove limit `name` and what is charged to it (LimitNotFound if none)."""
        ...

    def list_limits(self, now: datetime) -> list[LimitInfo]:
        """Every limit, with its use over the minute up to `now`."""
        ...

    def run_limits(self, run_id: str, epoch: int) -> Limits:
        """Where the run's model calls reserve and settle, under the lease of `epoch`."""
        ...

    def first_parked(self, queues: Sequence[str] | None, by: datetime) -> datetime | None:
        """The first wake-up, no later than `by`, of a run in `queues` (None: any) parked
        by a limit (queued, in a limit's line); None if there is none by then."""
        ...

    def due_queued(self, queues: Sequence[str] | None, at: datetime) -> DueQueued:
        """The runs in `queues` (None: any) queued and due by `at`: how many are free now,
        and how many another transaction holds (a claim passed them over). A drain that
        claimed nothing asks before it ends."""
        ...

    # -- waking and writing ------------------------------------------------------------------

    # -- scores (runner.store.scores) ---------------------------------------------------

    def record_score(self, run_id: str, name: str, value: float, note: str | None) -> ScoreRow:
        """A person's score of the run, replacing one of the same name (RunNotFound)."""
        ...

    def plan_scores(self, run_id: str, names: Sequence[str]) -> None:
        """The rows of the run's scorers, `pending`, for those it has none of yet."""
        ...

    def due_scores(self, limit: int, skip_agents: Sequence[str] = ()) -> list[DueScore]:
        """Scorers' rows of ended runs that no live worker runs, oldest first (but those of
        runs of `skip_agents`: agents this worker cannot load now)."""
        ...

    def claim_score(self, run_id: str, name: str, lease_seconds: float) -> ScoreClaim | None:
        """Start a scorer (None: another has it, it is done, or it crashed twice: failed)."""
        ...

    def renew_score(self, held: ScoreClaim, lease_seconds: float) -> bool: ...

    def finish_score(self, held: ScoreClaim, value: float | None, note: str | None) -> bool:
        """Keep a scorer's value (None: failed), fenced by the claim (False: it was lost)."""
        ...

    def run_scores(self, run_id: str) -> list[ScoreRow]: ...

    def scorer_limits(self, run_id: str) -> Limits:
        """Where a finished run's model-judged scorers reserve: they wait for room."""
        ...

    def wakeups(self, event: threading.Event, log: Callable[[str], None] | None = None) -> Wakeups:
        """What sets `event` when a run may have become runnable."""
        ...

    def writing(self) -> AbstractContextManager[None]:
        """This process's turn to write (SQLite's file takes one writer at a time)."""
        ...

    @property
    def outages(self) -> tuple[type[Exception], ...]:
        """The errors of an outage (a lost connection, a server away): a worker waits them
        out and tries again."""
        ...

    def damaged(self, exc: Exception) -> RunnerError | None:
        """The error to stop on if `exc` says the store itself is damaged, else None."""
        ...
