"""`SqlStore`: the store of durable runs in one SQLite or PostgreSQL database.

The `RunStore` protocol (runner.store.protocol) over the SQL of the other store modules:
one object per engine, holding what a runner shares between its runs (the clock leases are
measured on, the one heartbeat that renews every lease it holds, the writer its journals
write through).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any
from weakref import WeakValueDictionary

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from runner.core.clock import Clock, utc_now
from runner.core.deltas import Delta
from runner.core.journal import Entry, EntryKind
from runner.core.messages import Sent
from runner.core.status import RunStatus
from runner.core.stop_reasons import StopReason
from runner.core.waiting import Answer, Answered, Wait
from runner.defaults import DEFAULT_LEASE_SECONDS
from runner.errors import RunnerError
from runner.sql import (
    approvals,
    cancels,
    children,
    deltas,
    fresh_claims,
    leases,
    limit_line,
    limits,
    messages,
    queues,
    reads,
    releases,
    retention,
    run_changes,
    run_states,
    runnable,
    schedules,
    scores,
    writer,
)
from runner.sql import runs as store
from runner.sql.backend import backend_for
from runner.sql.blob_references import named_in
from runner.sql.database import connect, damaged, resolve_url
from runner.sql.follows import Followers
from runner.sql.grants import Grants
from runner.sql.heartbeat import Heartbeat
from runner.sql.journal import SqlJournal
from runner.sql.limit_rides import Riders
from runner.sql.payloads import bind_payloads
from runner.sql.reservations import ScorerLimits, SqlLimits
from runner.sql.schedules import Fired
from runner.sql.urls import redact_url
from runner.sql.wakeup import Wakeup
from runner.store.blob_sweep import Swept, offload_stores, sweep
from runner.store.delta_writer import DeltaWriter, RunDeltas
from runner.store.follow import Follow
from runner.store.owner import this_process
from runner.store.payload_config import configured
from runner.store.payloads import Codec, Payloads
from runner.store.protocol import Claim, Decide, Observer
from runner.store.releases import OlderReleases, ReleaseInfo, Releases
from runner.store.rows import DueQueued, LimitInfo, QueueInfo, RunRow, ScheduleRow
from runner.store.rules import Expired, Relay, Rules
from runner.store.scores import DueScore, ScoreClaim, ScoreRow


class SqlStore:
    """Runs in the database at `url` (None: RUNNER_DATABASE_URL, else the default file).

    Payloads are written through `payloads`, else through `codecs` (a user's own) followed
    by the environment's encryption and offload (runner.store.payload_config).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        connections: int | None = None,
        clock: Clock | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        heartbeat_seconds: float | None = None,
        payloads: Payloads | None = None,
        codecs: Sequence[Codec] | None = None,
    ) -> None:
        self.url = resolve_url(url)
        # `connections`: the most this store holds at once (a worker's pool); a run holds
        # one only while it writes, so far fewer than runs in flight serve them.
        # A transaction of a worker cut off from the database holds no run past its lease.
        self.engine: Engine = connect(
            self.url, pool_size=connections, idle_transactions=lease_seconds
        )
        # Every payload this store writes passes through these codecs (the environment's
        # unless given: runner.store.payload_config).
        self.payloads = payloads if payloads is not None else configured(self.url, codecs=codecs)
        bind_payloads(self.engine, self.payloads)
        # The journals' writes: on SQLite they share one connection, kept until close().
        self.writer = writer.Writer(self.engine)
        # Leases and deadlines are compared across machines: on the database's clock.
        self._clock = (
            clock if clock is not None else backend_for(self.engine.dialect.name).clock(self.engine)
        )
        self._owner = this_process()
        # This worker's grants of busy limits, shared by its runs (runner.sql.grants).
        self.grants = Grants(self.engine, self.writer, self._clock)
        # The open journals' limit writes, by run and lease, while their journals live.
        self._riders: WeakValueDictionary[tuple[str, int], Riders] = WeakValueDictionary()
        # One heartbeat for every run this store's runner executes: one statement a beat
        # renews all their leases (a third of the lease apart unless `heartbeat_seconds`).
        self.heartbeat = Heartbeat(
            self.engine,
            lease_seconds=lease_seconds,
            interval=heartbeat_seconds or lease_seconds / 3,
            clock=self._clock,
        )
        # Every follower of a run in this process, woken by one listener (or poller).
        self.followers = Followers(self.engine)
        # Pieces of model responses in flight, written in batches by a thread of their own.
        self.deltas = DeltaWriter(
            lambda changes: deltas.write(self.engine, changes),
            lambda: deltas.sweep(self.engine, utc_now(self._clock)),
            self._clock,
        )

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def owner(self) -> str:
        return self._owner

    def describe(self) -> str:
        return redact_url(self.engine.url)

    def close(self) -> None:
        self.followers.close()
        self.deltas.close()
        self.heartbeat.close()
        self.grants.close()
        self.writer.close()
        self.engine.dispose()

    # -- creating and reading runs ------------------------------------------------------

    def create_run(self, row: Mapping[str, Any], *, wake: bool = True) -> bool:
        return store.insert_run(self.engine, row, wake=wake)

    def insert_runs(self, rows: Sequence[Mapping[str, Any]], *, wake: bool = True) -> None:
        store.insert_runs(self.engine, rows, wake=wake)

    def refresh_statistics(self) -> None:
        store.refresh_statistics(self.engine)

    def existing_runs(self, run_ids: Sequence[str]) -> dict[str, RunRow]:
        return store.existing_runs(self.engine, run_ids)

    def get_run(self, run_id: str) -> RunRow:
        return store.get_run(self.engine, run_id)

    def find_run(self, prefix: str) -> RunRow:
        return store.find_run(self.engine, prefix)

    def load_entries(self, run_id: str, kinds: Sequence[EntryKind] = ()) -> list[tuple[Entry, int]]:
        return store.load_entries(self.engine, run_id, kinds)

    def entries_after(self, run_id: str, after: int, limit: int) -> list[tuple[int, Entry]]:
        return store.entries_after(self.engine, run_id, after, limit)

    def deltas_after(self, run_id: str, after: int, limit: int) -> list[tuple[int, Delta]]:
        return deltas.deltas_after(self.engine, run_id, after, limit)

    def follow(self, run_id: str, poll_seconds: float) -> Follow | None:
        return self.followers.follow(run_id, poll_seconds)

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
        with store.plain_reading(self.engine) as reader:
            return run_states.runs(
                reader, now, status=status, stop_reason=stop_reason, release=release,
                limit=limit, state=state, schedule=schedule,
            )  # fmt: skip

    def observe(self, rows: Sequence[RunRow], now: datetime) -> list[RunRow]:
        with store.plain_reading(self.engine) as reader:
            return run_states.observe(reader, rows, now)

    def tree_runs(self, root_id: str, limit: int) -> list[RunRow]:
        with store.plain_reading(self.engine) as reader:
            return reads.tree_runs(reader, root_id, limit)

    def waits(self, rows: Sequence[RunRow]) -> dict[str, list[Wait]]:
        return approvals.pending(self.engine, rows)

    def request_cancel(self, run_id: str) -> RunRow:
        run = cancels.request_cancel(self.engine, run_id, clock=self._clock)
        # Cancel travels down: every unfinished run below it is asked to stop too (one
        # that a live worker holds stops at its next step; the others at once).
        for below in children.subtree(self.engine, run.id):
            cancels.request_cancel(self.engine, below, clock=self._clock)
        if run.parent_id is not None and run.status is RunStatus.FINISHED:
            children.deliver(self.engine, run.parent_id, self._clock)
        return run

    def finish_lapsed_cancels(self) -> list[RunRow]:
        finished = cancels.finish_lapsed(self.engine, clock=self._clock)
        for run in finished:
            if run.parent_id is not None:  # its end is its parent's observation
                children.deliver(self.engine, run.parent_id, self._clock)
        return finished

    # -- trees of runs ----------------------------------------------------------------------

    def deliver_children(self, parent_id: str, relay: Relay | None = None) -> bool:
        return children.deliver(self.engine, parent_id, self._clock, relay)

    def deliver_ended(self) -> int:
        return children.deliver_ended(self.engine, self._clock)

    def child_runs(self, run_id: str) -> list[RunRow]:
        return children.children_of(self.engine, run_id)

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
        return leases.claim_run(
            self.engine,
            run_id,
            owner=owner or self._owner,
            lease_seconds=lease_seconds,
            max_resumes=max_resumes,
            steal=steal,
            clock=self._clock,
        )

    def create_claimed(
        self, row: Mapping[str, Any], *, lease_seconds: float, max_resumes: int
    ) -> Claim | None:
        return fresh_claims.create_claimed(
            self.engine,
            row,
            owner=self._owner,
            lease_seconds=lease_seconds,
            max_resumes=max_resumes,
            clock=self._clock,
        )

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
        return leases.claim_some(
            self.engine,
            limit=limit,
            owner=owner,
            lease_seconds=lease_seconds,
            max_resumes=max_resumes,
            skip_agents=skip_agents,
            suspects=suspects,
            queues=queues,
            executing=executing,
            releases=releases,
            clock=self._clock,
        )

    def release_run(self, run_id: str, epoch: int, error: str | None = None) -> None:
        leases.release_run(self.engine, run_id, epoch, error, clock=self._clock)

    def open_journal(
        self,
        claim: Claim,
        *,
        lease_seconds: float,
        observer: Observer | None = None,
        relay: Relay | None = None,
    ) -> SqlJournal:
        riders = Riders(claim.run.id, claim.epoch, self.writer, self._clock, self.grants.alone)
        # The run's limits (`run_limits`, asked for while its journal is open) share them.
        self._riders[(claim.run.id, claim.epoch)] = riders
        return SqlJournal(
            self.engine,
            claim,
            lease_seconds=lease_seconds,
            observer=observer,
            relay=relay,
            clock=self._clock,
            heartbeat=self.heartbeat,
            writer=self.writer,
            riders=riders,
        )

    def run_deltas(self, run_id: str) -> RunDeltas:
        return self.deltas.run(run_id)

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
        return approvals.answer(
            self.engine, run_id, given, text=text, by=by, call=call, clock=self._clock
        )

    def send_message(self, run_id: str, key: str, body: str, *, finished_ok: bool = False) -> Sent:
        return messages.send(
            self.engine, run_id, key, body, finished_ok=finished_ok, clock=self._clock
        )

    def inbox(self, run_id: str) -> list[Sent]:
        with self.engine.connect() as connection:
            return messages.undelivered(connection, messages.get_run_row(connection, run_id))

    def set_queue_limit(self, name: str, limit: int | None) -> None:
        queues.set_limit(self.engine, name, limit, clock=self._clock)

    def list_queues(self, now: datetime) -> list[QueueInfo]:
        return queues.list_queues(self.engine, now)

    # -- releases ----------------------------------------------------------------------------

    def set_older_releases(self, name: str, policy: OlderReleases) -> None:
        releases.set_policy(self.engine, name, policy, clock=self._clock)

    def queue_policy(self, name: str) -> OlderReleases:
        return releases.policy_of(self.engine, name)

    def list_releases(self, now: datetime) -> list[ReleaseInfo]:
        return releases.list_releases(self.engine, now)

    def park_run(self, run_id: str, epoch: int, reason: str, error: str) -> bool:
        return leases.release_run(
            self.engine, run_id, epoch, error, clock=self._clock, parked_reason=reason
        )

    def recorded_runs(
        self, *, since: datetime | None, agent: str | None, limit: int
    ) -> list[RunRow]:
        return releases.recorded_runs(self.engine, since=since, agent=agent, limit=limit)

    def change_budgets(self, run_id: str, decide: Decide) -> RunRow:
        return run_changes.change_budgets(self.engine, run_id, decide, clock=self._clock)

    def create_fork(
        self, row: Mapping[str, Any], parent_id: str, copied: int, extra: Entry | None
    ) -> bool:
        return run_changes.insert_fork(
            self.engine, row, parent_id, copied, extra, clock=self._clock
        )

    # -- retention ---------------------------------------------------------------------------

    def set_retention(self, name: str, rules: Rules) -> None:
        retention.set_rules(self.engine, name, rules, utc_now(self._clock))

    def prune_expired(self, now: datetime) -> Expired:
        return retention.prune_expired(self.engine, now)

    def sweep_blobs(self, older_than: datetime, *, dry_run: bool = False) -> Swept:
        stores = offload_stores(self.payloads)
        return sweep(stores, older_than, lambda: named_in(self.engine), dry_run=dry_run)

    # -- schedules ---------------------------------------------------------------------------

    def add_schedule(self, row: Mapping[str, Any]) -> bool:
        return schedules.add_schedule(self.engine, row)

    def schedules(self) -> list[ScheduleRow]:
        return schedules.list_schedules(self.engine)

    def schedule(self, name: str) -> ScheduleRow:
        return schedules.get_schedule(self.engine, name)

    def pause_schedule(self, name: str, paused: bool, now: datetime) -> ScheduleRow:
        return schedules.set_paused(self.engine, name, paused, now)

    def remove_schedule(self, name: str) -> None:
        schedules.remove_schedule(self.engine, name)

    def fire_schedules(self, now: datetime) -> list[Fired]:
        return schedules.fire_due(self.engine, now, utc_now(self._clock))

    def next_tick(self) -> datetime | None:
        return schedules.next_due(self.engine)

    # -- provider limits ------------------------------------------------------------------------

    def set_limit(
        self,
        name: str,
        *,
        tokens_per_minute: int | None,
        requests_per_minute: int | None,
        concurrency: int | None = None,
    ) -> None:
        limits.set_limit(
            self.engine,
            name,
            tokens_per_minute=tokens_per_minute,
            requests_per_minute=requests_per_minute,
            concurrency=concurrency,
            clock=self._clock,
        )

    def remove_limit(self, name: str) -> None:
        limits.remove_limit(self.engine, name)

    def list_limits(self, now: datetime) -> list[LimitInfo]:
        return limits.list_limits(self.engine, now)

    def run_limits(self, run_id: str, epoch: int) -> SqlLimits:
        return SqlLimits(
            self.engine,
            run_id,
            epoch,
            writer=self.writer,
            clock=self._clock,
            grants=self.grants,
            riders=self._riders.get((run_id, epoch)),
        )

    def first_parked(self, queues: Sequence[str] | None, by: datetime) -> datetime | None:
        return limit_line.first_parked(self.engine, queues, by)

    def due_queued(self, queues: Sequence[str] | None, at: datetime) -> DueQueued:
        return runnable.due_queued(self.engine, queues, at)

    # -- waking and writing ------------------------------------------------------------------

    # -- scores ----------------------------------------------------------------------------

    def record_score(self, run_id: str, name: str, value: float, note: str | None) -> ScoreRow:
        return scores.record(self.engine, run_id, name, value, note, utc_now(self._clock))

    def plan_scores(self, run_id: str, names: Sequence[str]) -> None:
        scores.plan(self.engine, run_id, names, utc_now(self._clock))

    def due_scores(self, limit: int, skip_agents: Sequence[str] = ()) -> list[DueScore]:
        return scores.due(self.engine, utc_now(self._clock), limit, skip_agents)

    def claim_score(self, run_id: str, name: str, lease_seconds: float) -> ScoreClaim | None:
        at = utc_now(self._clock)
        return scores.claim(self.engine, run_id, name, self._owner, lease_seconds, at)

    def renew_score(self, held: ScoreClaim, lease_seconds: float) -> bool:
        return scores.renew(self.engine, held, lease_seconds, utc_now(self._clock))

    def finish_score(self, held: ScoreClaim, value: float | None, note: str | None) -> bool:
        return scores.finish(self.engine, held, value, note, utc_now(self._clock))

    def run_scores(self, run_id: str) -> list[ScoreRow]:
        return scores.run_scores(self.engine, run_id)

    def scorer_limits(self, run_id: str) -> ScorerLimits:
        return ScorerLimits(self.engine, run_id, writer=self.writer, clock=self._clock)

    def wakeups(self, event: threading.Event, log: Callable[[str], None] | None = None) -> Wakeup:
        return Wakeup(self.engine, event, log=log)

    def writing(self) -> AbstractContextManager[None]:
        return writer.writing(self.engine)

    @property
    def outages(self) -> tuple[type[Exception], ...]:
        return (SQLAlchemyError,)

    def damaged(self, exc: Exception) -> RunnerError | None:
        return damaged(self.engine.url, exc)
