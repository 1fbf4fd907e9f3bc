"""The durable journal: the loop's writes as fenced SQL transactions, and its lease.

A run holds no database connection of its own, so a worker's runs waiting for their models
hold none (a thousand of them share a handful): a runner's writes share the one connection
it keeps for writing (`writer.Writer`), and the writes of its runs in flight share commits
(on SQLite transactions, on PostgreSQL statements), each run going on once the one holding
its entry has committed (`group_commit`). The calls of a step of
several record their observations from their own threads as they end: a run's writes take
its lock, one at a time. The lease is renewed by the runner's one heartbeat
(runner.heartbeat), beside every other lease the process holds.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, NoReturn

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import IntegrityError

from runner.core.backoff import Backoff
from runner.core.clock import SYSTEM, Clock, utc_now
from runner.core.counters import Counters
from runner.core.faults import fault
from runner.core.journal import Entry, EntryKind, Stop
from runner.core.limits import Estimate, estimated
from runner.core.stop_reasons import StopReason
from runner.core.tree import (
    Ancestor,
    ChildRun,
    Place,
    Spend,
    TreeStop,
    TreeStopped,
    ancestors_stop,
    outcome_of,
)
from runner.errors import EntryRefused, LeaseLost, RunParked, describe
from runner.sql import children, driver, fencing, messages, tree_budget
from runner.sql import children as children_sql
from runner.sql import runs as store
from runner.sql.backend import backend_for
from runner.sql.children import child_row, claimed_child
from runner.sql.database_failures import refused, transient
from runner.sql.fenced_inserts import Heard
from runner.sql.heartbeat import Heartbeat
from runner.sql.limit_rides import Ride, Riders
from runner.sql.payloads import payloads_of
from runner.sql.write_alone import write_alone
from runner.sql.writer import Writer, writing
from runner.store.rows import RunRow, plain_text
from runner.store.rules import Claim, HeldAhead, Relay, wait_of

# Told of each entry after its commit, one at a time, on the thread that wrote it: a call's
# own thread for the outcomes of a step of several calls.
Observer = Callable[[str, Entry], None]

# Each kind's fault points around the commit of a write that begins with it.
_FAULTS = {kind: (f"before_{kind}_commit", f"after_{kind}_commit") for kind in EntryKind}
# Entries that may go first in the commit of another's, whose fault points it keeps.
_RIDERS = (EntryKind.RESPONSE, EntryKind.TASK)

# A write that failed on a lost connection is tried again after these waits (doubling,
# jittered): the cap is what a run may lag behind its database's return.
WRITE_RETRY_FIRST = 0.05
WRITE_RETRY_CAP = 1.0


class SqlJournal:
    """One run's journal while this worker holds its lease (epoch)."""

    def __init__(
        self,
        engine: Engine,
        claim: Claim,
        *,
        lease_seconds: float,
        observer: Observer | None = None,
        clock: Clock = SYSTEM,
        heartbeat_seconds: float | None = None,
        heartbeat: Heartbeat | None = None,
        writer: Writer | None = None,
        relay: Relay | None = None,
        riders: Riders | None = None,
    ) -> None:
        self.engine = engine
        # The run's limit writes that ride in its journal writes (runner.sql.limit_rides).
        self.riders = riders
        # The worker's slot, handed on to this run's first child when it parks for them.
        self.relay = relay
        # The runner's writer, shared by all its journals; else one of this journal's own
        # that keeps no connection between writes.
        self.writer = writer or Writer(engine, keep=False)
        self.clock = clock
        # The runner's heartbeat, shared by all its leases; else one of this journal's own
        # (real seconds between beats: a third of the lease unless a test wants it faster).
        self._own_heartbeat = heartbeat is None
        self.heartbeat = heartbeat or Heartbeat(
            engine,
            lease_seconds=lease_seconds,
            interval=heartbeat_seconds or lease_seconds / 3,
            clock=clock,
        )
        self._run_id = claim.run.id
        self.epoch = claim.epoch
        self.lease_seconds = lease_seconds
        self.observer = observer
        # A run claimed with nothing recorded (most claims of a busy queue) has nothing to
        # read: the claim counted its entries in its own transaction.
        journal = self._kept(claim) if claim.next_seq else []
        # With a relay, the journal as written so far (entries and epochs), for the relay to
        # keep when this run parks for its children.
        self._journal = journal if relay is not None else None
        self._recorded = [entry for entry, _ in journal]
        # Per step, the epoch since which its call may have been tried, and by how many
        # claims already: its action's writer tried it once; after a person's answer (the
        # last such entry of the step), no process has yet.
        self._call_epochs: dict[int, tuple[int, int]] = {}
        # One tuple per (epoch, tries), not per step: a long journal has a few epochs.
        shared: dict[tuple[int, int], tuple[int, int]] = {}
        for entry, epoch in journal:
            if entry.kind is EntryKind.ACTION:
                self._call_epochs[entry.step] = shared.setdefault((epoch, 1), (epoch, 1))
            elif entry.kind is EntryKind.ANSWER:
                self._call_epochs[entry.step] = shared.setdefault((epoch, 0), (epoch, 0))
        # approval_timeout: how long a call of this run may wait for a person.
        self._parking = fencing.Parking(claim.run.budgets.get("approval_timeout"))
        self._run = claim.run
        # A child run: the runs above it (nearest first), charged what it spends as it
        # spends it, whose budgets (and cancels) it checks before each model call.
        self._ancestors = self._ancestors_of(claim.run)
        self._above = tuple(ancestor.run_id for ancestor in self._ancestors)
        self._spent = self._recorded[-1].counters if self._recorded else Counters()
        self.seq = len(self._recorded)
        # Entries held back from a commit of their own to ride in the next one: a child
        # run's task (in its first model call's hold, before the model is asked: see
        # `append_many`), and an observation its answer decided (`append_with_next`).
        self._held_back: tuple[Entry, ...] = ()
        # A child's first model call, held in its parent's park with its task (`wait`).
        self._held_ahead = self._ahead_of(claim.run.id)
        # Every write reports the run's cancel flag: the loop's check before each model call
        # costs no query of its own.
        self._cancel = claim.run.cancel_requested
        # Messages sent to the run and not in its journal yet: the claim read the count,
        # every write reads it again (runner.sql.messages delivers them).
        self._messages = claim.run.undelivered_messages
        self._writing = threading.Lock()
        # A child run's end, delivered to its parent in the commit of its last write (with a
        # relay, the parent claimed for it there too): nothing left to deliver after it.
        self.delivered = False
        self.lost = threading.Event()
        # When the lease was last surely renewed: a write that failed on a lost connection is
        # tried again only while the lease lasts.
        self._renewed_at = clock.time()
        # Whether a write renews the lease itself (PostgreSQL's fenced statement does).
        self._renews_lease = backend_for(engine.dialect.name).writes_renew_lease

    def _kept(self, claim: Claim) -> list[tuple[Entry, int]]:
        """The journal of a claimed run with something recorded: its task alone if the
        claim journaled it (`Claim.task`), as the relay kept it when the run parked, if it is
        all there (as long as the claim counted), else read."""
        if claim.task is not None:
            return [(claim.task, claim.epoch)]
        kept = None if self.relay is None else self.relay.kept.pop(claim.run.id, None)
        if kept is not None and len(kept) == claim.next_seq:
            return kept
        return store.load_entries(self.engine, claim.run.id)

    def _ahead_of(self, run_id: str) -> HeldAhead | None:
        ahead = None if self.relay is None else self.relay.held_ahead
        if ahead is None or ahead.run_id != run_id:
            return None
        assert self.relay is not None
        self.relay.held_ahead = None
        return ahead

    def _ancestors_of(self, run: RunRow) -> list[Ancestor]:
        if run.parent_id is None:
            return []
        handed = None if self.relay is None else self.relay.above
        if handed is not None and handed[0] == run.id:
            return list(handed[1])
        return children.ancestors(self.engine, run)

    def _written(self, entries: Sequence[Entry]) -> None:
        if self._journal is not None:
            self._journal.extend((entry, self.epoch) for entry in entries)

    @property
    def run_id(self) -> str:
        return self._run_id

    def recorded(self) -> Sequence[Entry]:
        return self._recorded

    def append(self, entry: Entry, stop: Stop | None = None) -> None:
        self.append_many((entry,), stop)

    # A sub-agent's call starts a child run, created with the wait that parks this one.
    parks_children = True

    def place(self) -> Place:
        run = self._run
        below = Spend(run.below_steps, run.below_tokens, run.below_cost)
        return Place(depth=len(self._ancestors), below=below)

    def tree_stop(self) -> TreeStop | None:
        return ancestors_stop(self._ancestors)

    @property
    def thread_bound(self) -> bool:
        """Whether only this thread may write it: an in-memory SQLite database is one per
        thread's connection, so another thread would find no tables."""
        engine = self.writer.engine
        return backend_for(engine.dialect.name).thread_bound(engine.url)

    @property
    def holds_tree(self) -> bool:
        """Whether its model calls hold against the budgets of runs above (a child's do)."""
        return bool(self._above)

    def hold_tree(self, step: int, estimate: Estimate) -> tree_budget.Held | None:
        """Hold step `step`'s model call (a step and `estimate` tokens) against the budgets
        of the runs above (runner.sql.tree_budget): TreeStopped if one is spent or
        cancelled, RunParked (the run queued again) if calls in flight hold them. A root
        holds nothing: the runs below it are parked while it calls."""
        if not self._above:
            return None
        ahead, self._held_ahead = self._held_ahead, None
        if ahead is not None and ahead.step == step and estimated(estimate) <= ahead.tokens:
            # Held in the parent's park, for this call or more: nothing to write. (A larger
            # estimate, messages sent meanwhile, reserves afresh: the run's own rows go.)
            self._check_lease()
            return tree_budget.Held(ahead.hold_id)
        with self._writing:
            self._check_lease()
            held_back = self._with_held_back(())
            with self.writer.turn() as connection, connection.begin():
                if held_back:  # the child's task: journaled with its first call's hold
                    heard = self._append_in(connection, held_back)
                decided = tree_budget.reserve(
                    connection,
                    self._run,
                    self.epoch,
                    self._above,
                    step,
                    estimated(estimate),
                    self.clock,
                )
            if held_back:
                self._cancel, self._messages = heard
                self.seq += len(held_back)
                self._written(held_back)
                self._observe(held_back)
        if isinstance(decided, tree_budget.Held):
            return decided
        if isinstance(decided, TreeStop):
            raise TreeStopped(decided)
        raise RunParked(
            f"run {self._run_id} waits for its tree's calls in flight until "
            f"{decided:%H:%M:%S.%f} UTC",
            run_id=self._run_id,
            limit=None,
            until=decided.timestamp(),
        )

    def _append_in(self, connection: Connection, entries: Sequence[Entry]) -> Heard:
        """Write `entries` (spending nothing: no charge) in the caller's transaction."""
        append = fencing.Append.of(
            self.engine.dialect,
            self._run_id,
            self.epoch,
            self.seq,
            entries,
            None,
            self.lease_seconds,
            self.clock,
            payloads=payloads_of(self.engine),
        )
        return append.run(driver.Within(connection))

    def release_tree(self, hold: tree_budget.Held) -> None:
        with self.writer.turn() as connection, connection.begin():
            tree_budget.release(connection, hold)

    def wait(self, entries: Sequence[Entry], children: Sequence[ChildRun] = ()) -> bool:
        with self._writing:
            self._check_lease()
            fault("before_wait_commit")
            # The run is `waiting` once this commits: the lease is gone, so no heartbeat
            # renews it, and a crash from here on leaves a run that waits, not one to take over.
            # A step's calls (unless written before) and waits (one per call that needs an
            # answer) go in this one commit, with the child runs its sub-agents' calls start.
            parking = self._parking
            relay = self.relay if children else None
            first = None
            if children:
                at = utc_now(self.clock)
                payloads = payloads_of(self.engine)
                rows = [child_row(child, self._run, at, payloads) for child in children]
                if relay is not None:
                    # The first child takes this run's slot, claimed as it is created: no
                    # worker has to find it queued and claim it.
                    rows[0] = claimed_child(rows[0], relay.owner, relay.lease_seconds)
                    first = self._first_call(children[0], rows[0])
                parking = replace(parking, children=tuple(rows), first=first)
            written = self._with_held_back(entries)
            cancelled = self._write(tuple(written), None, parking).cancel
            self.seq += len(written)
            self._written(written)
            fault("after_wait_commit")
            if relay is not None and not cancelled:
                # A cancelled run created no child: it finished in the same transaction.
                if self._journal is not None:
                    relay.kept[self._run_id] = self._journal
                run = self._run
                below = Spend(run.below_steps, run.below_tokens, run.below_cost)
                me = Ancestor(self._run_id, run.budgets, Spend.of(self._spent) + below)
                relay.above = (children[0].id, [me, *self._ancestors])
                relay.waits = [
                    wait_of(run, entry, at) for entry in entries if entry.kind is EntryKind.WAIT
                ]
                relay.next = children_sql.claim_of(rows[0], 0 if first is None else 1)
                relay.held_ahead = None
                if first is not None:
                    relay.kept[children[0].id] = [(first.task, first.epoch)]
                    if first.held:
                        hold = first.hold
                        relay.held_ahead = HeldAhead(hold.run_id, hold.id, hold.step, hold.tokens)
            self._observe(written)
        return not cancelled

    def _first_call(self, child: ChildRun, row: dict[str, Any]) -> fencing.FirstCall | None:
        """The task of the child created claimed, and its first model call's hold if its
        estimate is known, to write in this run's park (fencing.FirstCall)."""
        if child.first_tokens is None:
            return None
        hold = tree_budget.HoldAhead(
            id=uuid.uuid4().hex,
            root_id=self._run.root_id or self._run_id,
            run_id=child.id,
            lease_epoch=row["lease_epoch"],
            above=(self._run_id, *self._above),
            step=1,
            tokens=child.first_tokens,
        )
        # As the child's loop would write it first (runner.core.loop: step 0, nothing spent).
        task = Entry(EntryKind.TASK, 0, Counters(), content=child.task)
        return fencing.FirstCall(task, row["lease_epoch"], hold)

    def append_many(self, entries: Sequence[Entry], stop: Stop | None = None) -> None:
        with self._writing:
            self._check_lease()
            if self._holds_back(entries, stop):
                # A child's task goes in the commit of its first model call's hold (or of
                # whatever it writes first): a commit fewer a sub-agent, and still journaled
                # before any model call. A crash before leaves nothing: a resume writes it.
                self._held_back = tuple(entries)
                return
            # A framework's whole response, and a framework run's task, ride in its action's
            # commit: the action's points.
            first = entries[0]
            if first.kind in _RIDERS:
                first = next((e for e in entries if e.kind not in _RIDERS), first)
            before, after = _FAULTS[first.kind]
            fault(before)
            entries = self._with_held_back(entries)
            self._cancel, self._messages = self._write(entries, stop)
            self.seq += len(entries)
            self._written(entries)
            # Committed before the tool runs: a crash now leaves a pending call, never a lost
            # one (for a step of several calls, every call is pending at once).
            fault(after)
            self._observe(entries)

    def append_with_next(self, entry: Entry) -> None:
        """Record `entry` in the run's next write, before what that write records (or
        never, if the run's process ends first): only an entry the loop derives again from
        what is recorded, as the observation of a call its answer decided (a child's end, a
        person's reply or denial). A sub-agent's call costs a commit fewer."""
        with self._writing:
            self._check_lease()
            self._held_back = (*self._held_back, entry)

    def _holds_back(self, entries: Sequence[Entry], stop: Stop | None) -> bool:
        """Whether `entries` are a child run's task, first in its journal and to be held
        back (a root holds nothing: its first model call takes no hold to ride in)."""
        return (
            bool(self._above)
            and stop is None
            and self.seq == 0
            and not self._held_back
            and len(entries) == 1
            and entries[0].kind is EntryKind.TASK
        )

    def _with_held_back(self, entries: Sequence[Entry]) -> Sequence[Entry]:
        """`entries` with the task held back before them, which they take along."""
        if not self._held_back:
            return entries
        held, self._held_back = self._held_back, ()
        return (*held, *entries)

    def _flush_held_back(self) -> None:
        """Write what is held back, in a commit of its own (before a write that cannot
        take it along)."""
        if self._held_back:
            entries = self._with_held_back(())
            self._cancel, self._messages = self._write(entries, None)
            self.seq += len(entries)
            self._written(entries)
            self._observe(entries)

    def _observe(self, entries: Sequence[Entry]) -> None:
        if self.observer is not None:
            for entry in entries:
                self.observer(self._run_id, entry)

    def _write(
        self,
        entries: Sequence[Entry],
        stop: Stop | None,
        parking: fencing.Parking | None = None,
    ) -> Heard:
        """Commit the entries; on a lost connection, try again while the lease lasts.

        A tool's result is worth keeping: dropping it on a short outage would turn a call
        that ran into OutcomeUnknown. A value the database refuses (not a blip: retrying
        cannot fix it) ends the run with the reason recorded, instead of leaving it to be
        taken over, asked the same question, and refused again until crash_loop.
        """
        riders = self.riders
        ride = None if riders is None else riders.take()
        if riders is None or ride is None:
            return self._write_all(entries, stop, parking, None)
        try:
            heard = self._write_all(entries, stop, parking, ride)
        except BaseException:
            riders.undo(ride)
            raise
        riders.done(ride)
        return heard

    def _write_all(
        self,
        entries: Sequence[Entry],
        stop: Stop | None,
        parking: fencing.Parking | None,
        ride: Ride | None,
    ) -> Heard:
        backoff = None  # made at the first failure: most writes never need one
        retried = False
        written_at = utc_now(self.clock)  # every try's entries stamped alike (Append.of)
        charge = None
        if self._above:  # a child's spend, charged up its tree in the same transaction
            spent = Spend.added(self._spent, entries[-1].counters)
            charge = fencing.TreeCharge(self._above, spent)
        while True:
            try:
                heard = self._commit(entries, stop, parking, retried, charge, written_at, ride)
            except (LeaseLost, IntegrityError):
                raise
            except Exception as exc:
                if refused(exc):
                    self._give_up(entries[0], exc)
                if backoff is None:
                    backoff = Backoff(WRITE_RETRY_FIRST, WRITE_RETRY_CAP, jitter=True)
                if not transient(exc) or not self._lease_has(backoff.current * 2 + 1):
                    raise
                # The pool has discarded the broken connection: the next try checks out
                # another (a new one if need be), after a wait outside any lock.
                self.clock.sleep(backoff.next())
                retried = True
                continue
            if self._renews_lease:
                # The write renewed the lease if a third of it was spent.
                self._renewed_at = max(self._renewed_at, self.clock.time() - self.lease_seconds / 3)
            self._spent = entries[-1].counters
            if charge is not None and charge.ancestors:
                self._ancestors = charge.ancestors
            return heard

    def _commit(
        self,
        entries: Sequence[Entry],
        stop: Stop | None,
        parking: fencing.Parking | None,
        retried: bool,
        charge: fencing.TreeCharge | None = None,
        written_at: datetime | None = None,
        ride: Ride | None = None,
    ) -> Heard:
        """One try, through the writer (writer.Writer: in a group commit), or with a child's
        end in a transaction of its own that delivers it."""
        if (
            not retried
            and stop is None
            and parking is None
            and charge is None
            and ride is None
            and written_at is not None
            and len(entries) == 1
        ):
            # The commonest write, an entry alone: straight to its statement where the
            # writer can (no other write queued), in fewer steps than the way below, which
            # takes anything else (on SQLite, a run that has heard a cancel or a message).
            heard = write_alone(
                self.writer,
                self.engine.dialect,
                self._run_id,
                self.epoch,
                self.seq,
                entries[0],
                written_at,
                self.lease_seconds,
                payloads_of(self.engine),
            )
            if heard is not None:
                return heard
        append = fencing.Append.of(
            self.engine.dialect,
            self._run_id,
            self.epoch,
            self.seq,
            entries,
            stop,
            self.lease_seconds,
            self.clock,
            parking,
            charge,
            payloads_of(self.engine),
            written_at,
            ride,
            now=None if retried else written_at,  # read just before this first try
        )
        try:
            if stop is not None and self._run.parent_id is not None:
                return self._commit_delivering(append, self._run.parent_id, stop)
            return self.writer.commit(append)
        except IntegrityError:
            if not retried:
                raise
            # A retry of a write whose commit did happen (only its answer was lost): its
            # entries went in together, so the first one tells.
            with self.writer.turn() as connection:
                written = fencing.entry_written(connection, self._run_id, self.seq, self.epoch)
            if written is None:
                raise
            return written

    def _commit_delivering(self, append: fencing.Append, parent_id: str, stop: Stop) -> Heard:
        """A child's last write and its end's delivery to its parent (runner.sql.children),
        ONE transaction: a crash leaves both or neither, and a relay's worker goes on with
        the parent it claimed there (the end and the claim were two transactions, and the
        delivery's alone more statements than the child's whole answer)."""
        known = None
        if stop.output is None or isinstance(stop.output, str):  # as its row gives it back
            run = self._run
            error = plain_text(stop.error)
            content, is_error = outcome_of(run.id, stop.reason, stop.output, error, run.budgets)
            known = children.Ended(run.id, content, is_error)
        with self.writer.turn() as connection:
            with connection.begin():
                heard = append.run(driver.Within(connection))
                at = utc_now(self.clock)
                delivered = children.deliver_in(connection, parent_id, at, self.relay, known)
            self.delivered = True
        children.settled(delivered, self.relay)
        return heard

    def _lease_has(self, seconds: float) -> bool:
        """Whether the lease surely lasts `seconds` more (with a margin for clock error)."""
        until = self._renewed_at + self.lease_seconds * 0.9
        return self.clock.time() + seconds < until

    def _give_up(self, entry: Entry, exc: BaseException) -> NoReturn:
        what = (
            "the model's output" if entry.kind is not EntryKind.OBSERVATION else "a tool's result"
        )
        error = f"{what} at step {entry.step} could not be journaled: {describe(exc)}"
        # On a connection of its own: the refused statement's may be unusable.
        with writing(self.engine), self.engine.connect() as connection:
            fencing.finish_run(
                connection,
                self._run_id,
                self.epoch,
                Stop(StopReason.MODEL_ERROR, error=error),
                entry.counters,
                self.clock,
            )
        raise EntryRefused(f"run {self._run_id} stopped: {error}") from None

    def messages(self, step: int, counters: Counters) -> Sequence[Entry]:
        if not self._messages:
            return ()  # the last write heard of none: no query
        with self._writing:
            self._check_lease()
            self._flush_held_back()
            fault("before_message_commit")
            with self.writer.turn() as connection:
                delivered = messages.deliver(
                    connection, self._run_id, self.epoch, self.seq, step, counters, self.clock
                )
            self.seq += len(delivered)
            self._written(delivered)
            self._messages = 0
            # Journaled and marked delivered in one commit: a crash from here on leaves them
            # in the journal, for the next worker to replay, and never in the inbox again.
            fault("after_message_commit")
            self._observe(delivered)
        return delivered

    def finish(self, stop: Stop, counters: Counters) -> None:
        with self._writing:
            self._check_lease()
            self._flush_held_back()
            with self.writer.turn() as connection:
                fencing.finish_run(connection, self._run_id, self.epoch, stop, counters, self.clock)

    @property
    def messages_waiting(self) -> bool:
        """Whether messages sent to the run wait for `messages` (its last write heard)."""
        return bool(self._messages)

    def cancel_requested(self) -> bool:
        self._check_lease()
        return self._cancel

    def attempt(self, action: Entry) -> int:
        # Every claim bumps the epoch; each claim since the action was written is one more
        # attempt at its tool call (the first was made by the worker that wrote it). After a
        # person's answer, counted from the answer: the first claim since makes attempt 1.
        since, tried = self._call_epochs.get(action.step, (self.epoch, 1))
        if tried == 0:
            return max(1, self.epoch - since)
        return max(2, self.epoch - since + tried)

    def _check_lease(self) -> None:
        if self.lost.is_set():
            raise LeaseLost(f"run {self._run_id} was taken over by another worker")

    # -- the lease ------------------------------------------------------------------------

    def __enter__(self) -> SqlJournal:
        self.heartbeat.hold(self)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.riders is not None:
            # What no journal write carried: written now (or, if that fails, left counting
            # as calls never settled do).
            with contextlib.suppress(Exception):
                self.riders.flush()
        self.heartbeat.drop(self)
        if self._own_heartbeat:
            self.heartbeat.close()

    def renewed(self, started: float) -> None:
        """Told by the heartbeat: a beat that started at `started` renewed the lease."""
        self._renewed_at = max(self._renewed_at, started)

    def cancel_asked(self) -> None:
        """Told by the heartbeat: the run was asked to cancel (a model call in flight sees
        it through cancel_requested and gives up)."""
        self._cancel = True

    def taken_over(self) -> None:
        """Told by the heartbeat: another worker holds the run; the next write refuses."""
        self.lost.set()

    def beat(self) -> bool:
        """Renew the lease once, now; False (and the journal marked lost) once another worker
        took the run. A database error keeps the lease as it was: it has slack for a blip."""
        self.heartbeat.beat([self])
        return not self.lost.is_set()
