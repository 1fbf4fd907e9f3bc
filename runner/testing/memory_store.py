"""`InMemoryStore`: the store of durable runs in memory, for tests with no database.

A fake of `runner.store.protocol.RunStore` that keeps the same rows the SQL store keeps (the
`runs` and `entries` columns, values encoded as the store encodes them) and applies the same
rules to them: claims that bump the lease epoch, priority then age, delays, queue limits,
suspects taken alone, crash_loop; fenced journal writes; waits, answers and their timeouts;
cancel flags; revivals and forks. One lock stands for the database's transactions (as
SQLite's BEGIN IMMEDIATE serialises them). Time is the store's clock (a `ManualClock`
unless given another), so a lease or an approval_timeout expires when a test moves it.

Its schedules fire (runner.testing.memory_schedules) and its retention rules delete
(runner.testing.memory_retention) by the rules the SQL store keeps. What it does not model:
SQL itself (the views, `runner sql`, migrations), connections and pools, a lost
connection's retries, PostgreSQL's NOTIFY across processes (its wake-ups reach this
process's waiters), a heartbeat (a write renews its lease, as on PostgreSQL).
`tests/integration/test_store_contract.py` runs the same scenarios here and on both
databases, so the two cannot drift apart unseen.

Its rows and lock are `memory_rows`', its answers to waiting runs `memory_answers`', its
inboxes `memory_messages`', a claimed run's journal `memory_journal`'s; claims, reads,
queues, budgets and forks are here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timedelta
from typing import Any

from runner.core.clock import Clock, utc_now
from runner.core.counters import Counters
from runner.core.deltas import Delta
from runner.core.journal import Entry, EntryKind
from runner.core.status import STALLED, RunStatus
from runner.core.stop_reasons import StopReason
from runner.core.waiting import Wait
from runner.errors import AmbiguousRunId, RunnerError, RunNotFound
from runner.store import liveness
from runner.store.delta_writer import DeltaWriter, RunDeltas
from runner.store.follow import Follow
from runner.store.owner import is_dead, local_prefix
from runner.store.payloads import PLAIN, Payloads
from runner.store.protocol import Claim, Decide, Observer
from runner.store.releases import OlderReleases, Releases
from runner.store.rows import (
    FORKED_EPOCH,
    DueQueued,
    QueueInfo,
    RunRow,
    entry_of,
    plain_text,
)
from runner.store.rules import (
    Relay,
    check_limit,
    check_queue,
    crash_loop_error,
    refuse_if_held,
    unanswered,
    wait_of,
)
from runner.testing.memory_answers import MemoryAnswers
from runner.testing.memory_deltas import MemoryDeltas
from runner.testing.memory_journal import MemoryRunJournal
from runner.testing.memory_limits import MemoryLimits
from runner.testing.memory_messages import MemoryMessages
from runner.testing.memory_releases import MemoryReleases
from runner.testing.memory_retention import MemoryRetention
from runner.testing.memory_rows import InMemoryStoreError, MemoryWakeups, Row, json_value
from runner.testing.memory_schedules import MemorySchedules
from runner.testing.memory_scores import MemoryScores


class InMemoryStore(
    MemoryAnswers,
    MemoryMessages,
    MemoryLimits,
    MemorySchedules,
    MemoryRetention,
    MemoryReleases,
    MemoryScores,
):
    """Runs, journals and queue limits in this process's memory (see the module's doc).

    `clock` is what leases, delays and timeouts are measured on (default a `ManualClock`:
    move it with `store.clock.advance(seconds)`); `owner` names this process's leases.
    """

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        owner: str | None = None,
        payloads: Payloads = PLAIN,
    ) -> None:
        super().__init__(clock=clock, owner=owner, payloads=payloads)
        self.deltas = MemoryDeltas()
        self._deltas = DeltaWriter(
            self.deltas.write, lambda: self.deltas.sweep(utc_now(self._clock)), self._clock
        )

    # -- creating and reading runs ------------------------------------------------------

    def create_run(self, row: Mapping[str, Any], *, wake: bool = True) -> bool:
        with self._lock:
            if row["id"] in self.runs:
                return False
            self._insert(row)
        if wake:
            self._wake()
        return True

    def insert_runs(self, rows: Sequence[Mapping[str, Any]], *, wake: bool = True) -> None:
        with self._lock:
            ids = [row["id"] for row in rows]
            taken = [run_id for run_id in ids if run_id in self.runs]
            if taken or len(set(ids)) != len(ids):
                raise InMemoryStoreError(f"run id {(taken or ids)[0]} exists already")
            for row in rows:
                self._insert(row)
        if wake and rows:
            self._wake()

    def refresh_statistics(self) -> None:
        """No planner to tell."""

    def existing_runs(self, run_ids: Sequence[str]) -> dict[str, RunRow]:
        with self._lock:
            return {run_id: self._run(run_id) for run_id in run_ids if run_id in self.runs}

    def get_run(self, run_id: str) -> RunRow:
        with self._lock:
            return self._run(run_id)

    def find_run(self, prefix: str) -> RunRow:
        if not prefix.strip():
            raise ValueError("a run id (or a prefix of one) cannot be empty")
        with self._lock:
            if prefix in self.runs:
                return self._run(prefix)
            found = [run_id for run_id in self.runs if run_id.startswith(prefix)]
        if not found:
            raise RunNotFound(f"no run with id {prefix}")
        if len(found) > 1:
            raise AmbiguousRunId(f"more than one run id starts with {prefix}: give more of it")
        return self.get_run(found[0])

    def entries_after(self, run_id: str, after: int, limit: int) -> list[tuple[int, Entry]]:
        with self._lock:
            rows = [row for row in self.entries.get(run_id, ()) if row["seq"] > after]
        return [(row["seq"], entry_of(row)) for row in rows[:limit]]

    def deltas_after(self, run_id: str, after: int, limit: int) -> list[tuple[int, Delta]]:
        return self.deltas.after(run_id, after, limit)

    def follow(self, run_id: str, poll_seconds: float) -> Follow | None:
        return None  # its followers poll (cheap: nothing leaves the process)

    def run_deltas(self, run_id: str) -> RunDeltas:
        return self._deltas.run(run_id)

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
        with self._lock:
            rows = [
                RunRow.of(row)
                for row in self.runs.values()
                if schedule is None or row.get("schedule") == schedule
            ]
        rows.sort(key=lambda run: (run.created_at, run.id), reverse=True)
        if state is not None and state not in (RunStatus.RUNNING, STALLED):
            status, state = RunStatus(state), None
        elif state is not None:
            status = RunStatus.RUNNING
        chosen = [
            run
            for run in rows
            if (status is None or run.status is status)
            and (stop_reason is None or run.stop_reason == stop_reason)
            and (release is None or run.release == release)
        ]
        observed = self.observe(chosen, now)
        if state is not None:
            observed = [run for run in observed if run.state == state]
        return observed[:limit]

    def observe(self, rows: Sequence[RunRow], now: datetime) -> list[RunRow]:
        found = []
        for run in rows:
            last = self.load_entries(run.id)[-1:] if run.status is not RunStatus.FINISHED else []
            found.append(liveness.observed(run, now, last[0][0].counters if last else None))
        return found

    def tree_runs(self, root_id: str, limit: int) -> list[RunRow]:
        with self._lock:
            rows = [RunRow.of(row) for row in self.runs.values()]
        found = sorted(
            (r for r in rows if r.root_id == root_id), key=lambda r: (r.created_at, r.id)
        )
        return found[:limit]

    def waits(self, rows: Sequence[RunRow]) -> dict[str, list[Wait]]:
        found: dict[str, list[Wait]] = {}
        with self._lock:
            for run in rows:
                if run.status is not RunStatus.WAITING:
                    continue
                open_ = unanswered(self._wait_rows(run.id))
                if open_:
                    found[run.id] = [wait_of(run, entry, at) for entry, at in open_]
        return found

    # -- trees of runs: the in-memory store runs a sub-agent's child inline, inside the
    # parent's call (as run_agent does), so no child run is ever stored, parked or owed.

    def deliver_children(self, parent_id: str, relay: Relay | None = None) -> bool:
        return False

    def deliver_ended(self) -> int:
        return 0

    def child_runs(self, run_id: str) -> list[RunRow]:
        return []

    def request_cancel(self, run_id: str) -> RunRow:
        at = self._now()
        with self._lock:
            row = self._row(run_id)
            run = RunRow.of(row)
            if run.status is RunStatus.FINISHED:
                return run
            row.update(cancel_requested=True, updated_at=at)
            if not run.lease_is_live(at):
                self._cancelled(row, run, at)
            return RunRow.of(row)

    def finish_lapsed_cancels(self) -> list[RunRow]:
        at = self._now()
        finished = []
        with self._lock:
            for row in self.runs.values():
                run = RunRow.of(row)
                lapsed = run.status is RunStatus.RUNNING and not run.lease_is_live(at)
                if lapsed and run.cancel_requested:
                    self._cancelled(row, run, at)
                    finished.append(RunRow.of(row))
        return finished

    def _cancelled(self, row: Row, run: RunRow, at: datetime) -> None:
        """Finish `run`, which nobody executes, cancelled (runner.sql.cancels): under a new
        epoch that fences out a holder that only seemed dead, its task journaled first if it
        never started."""
        epoch = run.lease_epoch + 1
        if not self.entries[run.id]:
            self._append(run.id, epoch, Entry(EntryKind.TASK, 0, Counters(), content=run.task), at)
        row.update(
            self._stopped(run.id, StopReason.CANCELLED, at),
            lease_owner=None,
            lease_expires_at=None,
            lease_epoch=epoch,
            waiting_since=None,
            wait_expires_at=None,
            updated_at=at,
        )

    # -- leases -------------------------------------------------------------------------------

    def claim_run(
        self,
        run_id: str,
        *,
        lease_seconds: float,
        max_resumes: int,
        steal: bool = False,
        owner: str | None = None,
    ) -> Claim:
        at = self._now()
        with self._lock:
            row = self._row(run_id)
            run = RunRow.of(row)
            refuse_if_held(run, at, steal=steal)
            if run.status is RunStatus.FINISHED:
                return Claim(run, run.lease_epoch, 0, crash_loop=False)
            if run.status is RunStatus.WAITING:
                if run.wait_expires_at is None or run.wait_expires_at > at:
                    return Claim(run, run.lease_epoch, 0, crash_loop=False)
                self._time_out(row, at)
            return self._take(row, owner or self._owner, lease_seconds, max_resumes, at)

    def create_claimed(
        self, row: Mapping[str, Any], *, lease_seconds: float, max_resumes: int
    ) -> Claim | None:
        at = self._now()
        with self._lock:
            if row["id"] in self.runs:
                return None
            self._insert(row)
            # Its task journaled with it, as runner.sql.fresh_claims does.
            return self._take(
                self._row(row["id"]), self._owner, lease_seconds, max_resumes, at, with_task=True
            )

    def _take(
        self,
        row: Row,
        owner: str,
        lease_seconds: float,
        max_resumes: int,
        at: datetime,
        *,
        with_task: bool = False,
    ) -> Claim:
        """`with_task`: a fresh run's task is journaled by the claim (a batch's, as
        runner.sql.leases journals it)."""
        run = RunRow.of(row)
        fresh = row["lease_owner"] is None
        recorded = len(self.entries[run.id])
        resumes, stalled = row["resumes"], row["stalled_resumes"]
        if row["lease_owner"] is not None:  # the last holder never let go: it crashed
            resumes += 1
            stalled = stalled + 1 if recorded == row["progress_seq"] else 0
        epoch = row["lease_epoch"] + 1
        deadline = row["deadline"]
        max_seconds = run.budgets.get("max_seconds")
        if deadline is None and max_seconds is not None:
            deadline = at + timedelta(seconds=float(max_seconds))
        row.update(
            status=RunStatus.RUNNING,
            lease_owner=owner,
            lease_epoch=epoch,
            lease_expires_at=at + timedelta(seconds=lease_seconds),
            leased_at=at,
            last_seen_at=at,
            resumes=resumes,
            stalled_resumes=stalled,
            progress_seq=recorded,
            deadline=deadline,
            updated_at=at,
        )
        crash_loop = stalled > max_resumes
        if crash_loop:
            row.update(
                self._stopped(run.id, StopReason.CRASH_LOOP, at),
                error=crash_loop_error(run.id, stalled, max_resumes),
                lease_owner=None,
                lease_expires_at=None,
            )
        if with_task and fresh and not crash_loop and not recorded:
            task = Entry(EntryKind.TASK, 0, Counters(), content=run.task)
            self._append(run.id, epoch, task, at)
            return Claim(RunRow.of(row), epoch, 1, crash_loop=False, stalled=stalled, task=task)
        return Claim(RunRow.of(row), epoch, recorded, crash_loop=crash_loop, stalled=stalled)

    def due_queued(self, queues: Sequence[str] | None, at: datetime) -> DueQueued:
        # A claim takes the store's lock: it never passes a run over (none is held).
        with self._lock:
            free = sum(
                1
                for run in self.runs.values()
                if run["status"] == RunStatus.QUEUED
                and (run["not_before"] is None or run["not_before"] <= at)
                and (queues is None or run["queue"] in queues)
            )
        return DueQueued(free=free)

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
        at = self._now()
        claims: list[Claim] = []
        with self._lock:
            live = self._live_counts(at)
            # A queue found with no room is passed over for the rest of the batch; the
            # others' room is counted with the runs this batch takes.
            refused = [
                name
                for name, most in self.limits.items()
                if most is not None
                and (queues is None or name in queues)
                and live.get(name, 0) >= most
            ]
            while len(claims) < limit:
                found = self._next_claimable(
                    at,
                    skip_agents,
                    queues,
                    refused,
                    live,
                    suspects=suspects and not claims,
                    executing=executing,
                    releases=releases,
                )
                if found is None:
                    break
                row, holds_slot, suspect = found
                if row["status"] == RunStatus.WAITING:
                    self._time_out(row, at)
                claims.append(
                    self._take(row, owner, lease_seconds, max_resumes, at, with_task=True)
                )
                if not holds_slot:
                    live[row["queue"]] = live.get(row["queue"], 0) + 1
                if suspect:
                    break  # it runs alone
        return claims

    def _live_counts(self, at: datetime) -> dict[str, int]:
        """Each queue's runs holding a slot: running under a lease not expired at `at`."""
        counts: dict[str, int] = {}
        for row in self.runs.values():
            expires = row["lease_expires_at"]
            if row["status"] == RunStatus.RUNNING and expires is not None and expires >= at:
                counts[row["queue"]] = counts.get(row["queue"], 0) + 1
        return counts

    def _next_claimable(
        self,
        at: datetime,
        skip_agents: Collection[str],
        served: Sequence[str] | None,
        refused: list[str],
        live: dict[str, int],
        *,
        suspects: bool,
        executing: Collection[str] = (),
        releases: Releases | None = None,
    ) -> tuple[Row, bool, bool] | None:
        while True:
            holds_slot = False
            mine = (row for row in self._runnable(at, executing) if self._may_take(row, releases))
            row = self._first(mine, skip_agents, served, refused)
            if row is None:
                # A dead holder's run (of this host) holds its slot already.
                orphans = (row for row in self._orphans(at) if self._may_take(row, releases))
                row = self._first(orphans, skip_agents, served, refused)
                holds_slot = True
            if row is None:
                return None
            suspect = row["lease_owner"] is not None and (
                len(self.entries[row["id"]]) == row["progress_seq"]
            )
            if suspect and not suspects:
                return None
            most = self.limits.get(row["queue"])
            if most is None or live.get(row["queue"], 0) - holds_slot < most:
                return row, holds_slot, suspect
            refused.append(row["queue"])

    def _runnable(self, at: datetime, executing: Collection[str] = ()) -> Iterator[Row]:
        """Queued and due, running under an expired lease (not one the claimer executes),
        or waiting past its timeout."""
        for row in self.runs.values():
            status, expires, wait_ends = (
                row["status"],
                row["lease_expires_at"],
                row["wait_expires_at"],
            )
            if (
                (
                    status == RunStatus.QUEUED
                    and (row["not_before"] is None or row["not_before"] <= at)
                )
                or (
                    status == RunStatus.RUNNING
                    and (expires is None or expires < at)
                    and row["id"] not in executing
                )
                or (status == RunStatus.WAITING and wait_ends is not None and wait_ends < at)
            ):
                yield row

    def _orphans(self, at: datetime) -> Iterator[Row]:
        here = local_prefix()
        for row in self.runs.values():
            owner, expires = row["lease_owner"], row["lease_expires_at"]
            if row["status"] != RunStatus.RUNNING or owner is None or expires is None:
                continue
            if expires >= at and owner.startswith(here) and is_dead(owner):
                yield row

    @staticmethod
    def _first(
        rows: Iterator[Row],
        skip_agents: Collection[str],
        served: Sequence[str] | None,
        passed: Sequence[str],
    ) -> Row | None:
        """The first of `rows` in claim order (priority, then age), within the bounds."""
        chosen = [
            row
            for row in rows
            if (served is None or row["queue"] in served)
            and row["queue"] not in passed
            # As SQL's NOT IN: a run with no agent reference is left out too.
            and (not skip_agents or (row["agent"] is not None and row["agent"] not in skip_agents))
        ]
        if not chosen:
            return None
        return min(chosen, key=lambda row: (-row["priority"], row["created_at"], row["id"]))

    def release_run(self, run_id: str, epoch: int, error: str | None = None) -> None:
        with self._lock:
            row = self.runs.get(run_id)
            if row is None or row["lease_epoch"] != epoch or row["status"] != RunStatus.RUNNING:
                return
            row.update(
                status=RunStatus.QUEUED,
                lease_owner=None,
                lease_expires_at=None,
                updated_at=self._now(),
            )
            if error is not None:
                row["error"] = plain_text(error)
        if error is None:
            self._wake()

    def open_journal(
        self,
        claim: Claim,
        *,
        lease_seconds: float,
        observer: Observer | None = None,
        relay: Relay | None = None,  # no child runs here: nothing to hand on
    ) -> MemoryRunJournal:
        return MemoryRunJournal(self, claim, lease_seconds=lease_seconds, observer=observer)

    # -- queues, budgets, forks -----------------------------------------------------------------

    def set_queue_limit(self, name: str, limit: int | None) -> None:
        check_queue(name)
        checked = check_limit(limit)
        with self._lock:
            self.limits[name] = checked

    def list_queues(self, now: datetime) -> list[QueueInfo]:
        counts: dict[str, list[int]] = {}
        with self._lock:
            live = self._live_counts(now)
            for row in self.runs.values():
                status = row["status"]
                if status == RunStatus.FINISHED:
                    continue
                mine = counts.setdefault(row["queue"], [0, 0, 0, 0])
                if status == RunStatus.QUEUED:
                    delayed = row["not_before"] is not None and row["not_before"] > now
                    mine[1 if delayed else 0] += 1
                elif status == RunStatus.WAITING:
                    mine[3] += 1
            for name, running in live.items():
                counts.setdefault(name, [0, 0, 0, 0])[2] = running
            limits = dict(self.limits)
            names = sorted(set(limits) | set(counts))
            policies = dict(self.older_releases)
        names = sorted(set(names) | set(policies))
        listed = []
        for name in names:
            queued, delayed, running, waiting = counts.get(name, [0, 0, 0, 0])
            policy = policies.get(name, OlderReleases.CONTINUE).value
            listed.append(
                QueueInfo(
                    name,
                    limits.get(name),
                    queued,
                    delayed,
                    running,
                    waiting,
                    older_releases=policy,
                )
            )
        return listed

    def change_budgets(self, run_id: str, decide: Decide) -> RunRow:
        at = self._now()
        with self._lock:
            row = self._row(run_id)
            rows = self.entries[run_id]
            tail = [(r["seq"], entry_of(r)) for r in reversed(rows[-2:])]
            change = decide(RunRow.of(row), tail, at)
            if change is None:
                return RunRow.of(row)
            self._append(run_id, row["lease_epoch"], change.entry, at)
            row.update(change.values, updated_at=at)
            row["budgets"] = json_value(row["budgets"])
            return RunRow.of(row)

    def create_fork(
        self, row: Mapping[str, Any], parent_id: str, copied: int, extra: Entry | None
    ) -> bool:
        at = self._now()
        with self._lock:
            if row["id"] in self.runs:
                return False
            self._insert(row)
            for source in self.entries[parent_id][:copied]:
                copy = dict(source, run_id=row["id"], lease_epoch=FORKED_EPOCH)
                self.entries[row["id"]].append(copy)
            if extra is not None:
                self._append(row["id"], FORKED_EPOCH, extra, at)
        return True

    # -- waking and writing ------------------------------------------------------------------

    def wakeups(
        self, event: threading.Event, log: Callable[[str], None] | None = None
    ) -> MemoryWakeups:
        return MemoryWakeups(self, event)

    def writing(self) -> AbstractContextManager[None]:
        return _no_turn()

    @property
    def outages(self) -> tuple[type[Exception], ...]:
        return (InMemoryStoreError,)

    def damaged(self, exc: Exception) -> RunnerError | None:
        return None


@contextmanager
def _no_turn() -> Iterator[None]:
    yield  # one lock serialises the store's writes already
