"""`runner worker`: a long-running process that claims runs and executes them.

N runs at a time on threads (a run's model and tool calls block for seconds). Claims are
atomic in the database (SKIP LOCKED on PostgreSQL, BEGIN IMMEDIATE on SQLite), so any
number of workers on any number of machines can share one queue. A worker that dies leaves
its leases to expire; the next claimer resumes those runs by the step protocol. A run taken
over without having recorded anything since its last takeover is a suspect (it may be what
kills its workers): it runs alone until it records an entry, so it takes no neighbour down
with it, and no innocent neighbour is counted towards crash_loop. A run that comes to a call
needing a person's answer gives its slot back at once and waits in the database. An idle
worker sleeps its poll interval, or on PostgreSQL until a NOTIFY says a run was queued.

This module is the serving loop: it claims runs into slots and ties together the parts a
worker owns, each a module of its own: when to claim (`claim_pacing`), executing one claim
in a slot (`claim_execution`) on the slot's thread (`slot_threads`), the agents it loaded
(`loaded_agents`), the house it keeps between claims (`housekeeping`: the schedules' ticks,
retention, blobs, lapsed cancels), the scorers of ended runs (`scorer_pool`), when a drain is
done (`drain_end`), waiting out the database (`database_wait`), what it logs (`worker_log`)
and its process's start-up and signals (`worker_process`).

The worker logs through the standard `logging` module, on the `runner.worker` logger: each
record about a run carries its id (`record.run_id`) and every record the worker's name
(`record.worker`). `runner worker` configures the handler (text or JSON lines on stderr).

The rest of this feature (docs/architecture.md, "Where a feature lives"):
`runner.service.claim_pacing`, `runner.service.claim_execution`,
`runner.service.slot_threads`, `runner.service.loaded_agents`, `runner.service.housekeeping`,
`runner.service.scorer_pool`, `runner.service.drain_end`, `runner.service.database_wait`,
`runner.service.worker_log`, `runner.service.worker_process`, `runner.cli.worker`.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING

from runner.core.clock import Clock
from runner.core.journal import Entry
from runner.errors import first_line
from runner.service.claim_execution import ClaimExecution
from runner.service.claim_pacing import CLAIMS_PER_TRANSACTION, ClaimPacing
from runner.service.database import pool_for
from runner.service.database_wait import DatabaseWait, raise_if_damaged
from runner.service.drain_end import DrainEnd
from runner.service.housekeeping import SWEEP_SECONDS, Housekeeping
from runner.service.loaded_agents import LoadedAgents
from runner.service.runner import DEFAULT_LEASE_SECONDS, DEFAULT_MAX_RESUMES, Runner
from runner.service.scorer_pool import ScorerPool
from runner.service.slot_threads import SlotThreads
from runner.service.worker_log import WorkerLog, counted, log
from runner.service.worker_process import stop_on_signals
from runner.store.payloads import Codec
from runner.store.protocol import Claim, RunStore
from runner.store.releases import Releases
from runner.store.rules import Relay, chosen

if TYPE_CHECKING:
    from runner.service.database import PoolChoice


class Worker:
    """Claims runnable runs from one database and executes up to `concurrency` at once."""

    def __init__(
        self,
        url: str | None = None,
        *,
        concurrency: int = 1,
        poll: float = 1.0,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        max_resumes: int = DEFAULT_MAX_RESUMES,
        once: bool = False,
        queues: Sequence[str] | None = None,
        connections: int | None = None,
        store: RunStore | None = None,
        schedule_clock: Clock | None = None,
        codecs: Sequence[Codec] | None = None,
        release: str | None = None,
        drain: bool = False,
    ) -> None:
        """A worker of the database at `url`, or of `store` (say, runner.testing's
        InMemoryStore, for tests with no database). `schedule_clock`: the time schedules'
        ticks are fired on (default the store's clock: the database's on PostgreSQL); a test
        gives a simulated one.

        `release`: the release this worker runs every run with (None: each agent's own, as
        its code declares it), which a queue's policy for older releases compares with the
        run's (runner.store.releases). `drain`: take only the runs of `release`, and exit
        when none is left queued, parked or running."""
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if drain and release is None:
            raise ValueError("a worker that drains needs its release")
        self.release = release
        self.drain = drain
        # The queues this worker claims from (None: every queue).
        self.queues = chosen(queues)
        # The pool, from the concurrency and what the database can spare (at most
        # `connections`): runs hold a connection only while they write.
        self.pool: PoolChoice | None = None
        if store is None:
            self.pool = pool_for(url, concurrency, cap=connections)
        self.runner = Runner(
            url,
            lease_seconds=lease_seconds,
            max_resumes=max_resumes,
            observer=self._progressed,
            connections=None if self.pool is None else self.pool.size,
            store=store,
            codecs=codecs,
        )
        self.store = self.runner.store
        self.schedule_clock = schedule_clock or self.store.clock
        self.concurrency = concurrency
        self.poll = poll
        self.once = once
        # Set by the first SIGTERM/SIGINT: finish the steps in flight, release, exit.
        self.stopping = threading.Event()
        self._wake = threading.Event()
        self._log = WorkerLog(self.name)
        self._database = DatabaseWait()
        self._housekeeping = Housekeeping(
            self.runner,
            schedule_clock=self.schedule_clock,
            poll=poll,
            database=self._database,
            say=self._log,
        )
        self._active: dict[str, Future[None]] = {}
        # Held while the runs in `_active` change: a slot's own thread adds the run it
        # hands the slot to, beside the serving loop that adds and reaps.
        self._slots = threading.Lock()
        self._epochs: dict[str, int] = {}  # the epoch of each run's claim in _active
        self._ended: deque[tuple[str, int]] = deque()  # (run id, epoch) of claims that ended
        # Suspects (taken over with no new journal entry since their previous claim) run
        # with no other run beside them until they write one: if a suspect kills this
        # worker, no innocent run dies with it and gets counted towards crash_loop.
        self._alone: set[str] = set()
        self._agents = LoadedAgents()
        self._swept_at = -SWEEP_SECONDS  # when children's ends owed to parents were last sought
        self._pacing = ClaimPacing(concurrency)
        self._drain_end = DrainEnd(
            self.runner,
            self.queues,
            release,
            poll=poll,
            database=self._database,
            wake=self._wake,
            say=self._log,
        )
        # Scorers of ended runs, on threads of their own: a scorer takes no run's slot.
        self._scorers = ScorerPool(
            self.runner, self._agents, concurrency=concurrency, wake=self._wake, say=self._log
        )
        self._execution = ClaimExecution(
            self.runner,
            self._agents,
            release=release,
            once=once,
            stopping=self.stopping,
            drain_end=self._drain_end,
            scorers=self._scorers,
            say=self._log,
        )
        # On PostgreSQL, a listener sets _wake as soon as a run is submitted or answered.
        self.wakeup = self.store.wakeups(
            self._wake, log=lambda message: self._log(logging.WARNING, message)
        )

    @property
    def name(self) -> str:
        return self.runner.owner

    @property
    def finished(self) -> int:
        """How many runs this worker finished."""
        return self._execution.finished

    # -- the serving loop -----------------------------------------------------------------

    def serve(self) -> None:
        """Claim and execute runs until stopped (or, with `once`, until none is runnable
        and every run it started has finished or waits for something other than a limit:
        a run it parked for a limit is claimed again when the limit has room)."""
        listening = not self.once and self.wakeup.start()
        self._log(
            logging.INFO,
            f"worker {self.name} serving {self.store.describe()}"
            + (f", queues {', '.join(self.queues)}" if self.queues is not None else "")
            + (" (woken by NOTIFY)" if listening else ""),
        )
        if self.pool is not None:
            self._log(logging.INFO, self.pool.describe(self.concurrency))
        try:
            with self._scorers.start(), SlotThreads("runner-run") as pool:
                try:
                    self._serve(pool)
                finally:
                    # Graceful stop (or a damaged database, raised by a claim): each run
                    # pauses before its next model call and is released. Every slot is
                    # waited for here (its threads are never joined), then the first
                    # failure of one is raised.
                    self.stopping.set()
                    with self._slots:
                        slots = set(self._active.values())
                    # A slot's future covers the runs it was handed to.
                    failed = [error for slot in slots if (error := slot.exception())]
                    self._reap()
                    if failed:
                        raise failed[0]
        finally:
            self.wakeup.close()
            self.runner.close()
        finished = counted(self.finished, "run")
        self._log(logging.INFO, f"worker {self.name} stopped after finishing {finished}")

    def _serve(self, pool: SlotThreads) -> None:
        while not self.stopping.is_set():
            # Cleared before looking, not after: a wake-up that comes while this looks
            # (a run submitted just after the claim found none) must not be lost.
            self._wake.clear()
            ended = self._reap()
            self._housekeeping.keep()
            self._scorers.look(every_pass=self.once and not self._active)
            claimed = False
            if len(self._active) < self.concurrency:
                running, stopping = len(self._active), self.stopping.is_set()
                gather = max(
                    self._pacing.gathering(running, stopping),
                    self._pacing.pausing(ended, running, stopping),
                )
                if gather > 0:
                    self._wake.wait(gather)  # a run that ends meanwhile wakes it to count
                    continue
                claimed = self._claim_into(pool)
            if claimed:
                self._drain_end.claimed_again = False
                continue
            idle = self._database.seconds or self.poll
            if self.drain and not self._active and self._drain_end.drained():
                break
            if self.once and not self._active:
                if self._scorers.busy():
                    self._wake.wait(self.poll)
                    continue
                parked_for = self._drain_end.parked_for()
                if parked_for is None:
                    if self._drain_end.passed_over():
                        continue  # a claim passed over a run that is runnable still
                    break
                idle = min(idle, parked_for)
            # Awake for the next tick: no sooner (no busy polling), no later.
            idle = max(0.0, min(idle, self._housekeeping.ticks_due_in()))
            if log.isEnabledFor(logging.DEBUG):
                self._log(logging.DEBUG, f"nothing to claim: idle until woken or {idle:g}s pass")
            self._wake.wait(idle)

    def _reap(self) -> int:
        # The runs that ended since the last look (told by their futures): a worker with a
        # thousand runs in flight does not look through all of them at every claim. How
        # many ended.
        ended = 0
        while self._ended:
            ended += 1
            run_id, epoch = self._ended.popleft()
            # Only the claim that ended: the run may have been claimed again meanwhile (a
            # person's answer queued it the moment it began to wait).
            with self._slots:  # a slot's thread registers the run it hands the slot to
                if self._epochs.get(run_id) == epoch:
                    del self._active[run_id], self._epochs[run_id]
                    self._alone.discard(run_id)
        return ended

    def _progressed(self, run_id: str, _entry: Entry) -> None:
        # Called after each journal commit, on the thread that made it (the run's, or a
        # call's in a step of several): it only touches a set and an event.
        if run_id in self._alone:
            self._alone.discard(run_id)
            self._wake.set()

    def _claim_into(self, pool: SlotThreads) -> bool:
        if self._alone:
            return False
        now = time.monotonic()
        free = self.concurrency - len(self._active)
        skip = self._agents.backed_off(now)
        try:
            with self.store.writing():
                if now - self._swept_at >= SWEEP_SECONDS:
                    # A child whose process died between its end and its delivery strands
                    # no parent: any worker delivers it here.
                    self._swept_at = now
                    self.store.deliver_ended()
                claims = self._claim_some(skip)
        except self.store.outages as exc:
            raise_if_damaged(self.store, exc)  # out of serve(): a damaged file is no outage
            wait = self._database.failed()
            self._log(
                logging.WARNING,
                f"database error, retrying in {wait:.1f}s: {first_line(exc)}",
            )
            return False
        self._database.answered()
        self._pacing.claimed(len(claims), free)
        for claim in claims:
            self._start(claim, pool)
        return bool(claims)

    def _start(self, claim: Claim, pool: SlotThreads) -> None:
        run = claim.run
        if claim.crash_loop:
            self._log(logging.WARNING, f"run {run.id} stopped: crash_loop ({run.error})", run.id)
            return
        if claim.stalled:
            self._log(
                logging.WARNING,
                f"run {run.id} was taken over {claim.stalled} time(s) in a row without "
                "progress: running it alone until it records an entry",
                run.id,
            )
            self._alone.add(run.id)  # before it starts, so its first entry is seen
        # The slot's future, done once the slot is free: after this run and any the run
        # handed the slot to (a tree's relay).
        slot: Future[None] = Future()
        with self._slots:
            self._epochs[run.id] = claim.epoch
            self._active[run.id] = slot
        pool.submit(functools.partial(self._execute_and_tell, claim, slot))

    def _execute_and_tell(self, claim: Claim, slot: Future[None]) -> None:
        try:
            self._run_slot(claim, slot)
        except BaseException as exc:
            slot.set_exception(exc)
            raise
        slot.set_result(None)

    def _run_slot(self, claim: Claim, slot: Future[None]) -> None:
        """Run `claim`, then each run it hands the slot to: a run that parks for its
        sub-agents' calls goes on with its first child, and a child whose end was the last
        its parent waited for goes on with the parent, each claimed by the same transaction
        that made it runnable (runner.store.rules.Relay): no claim, no wake-up between."""
        ran = claim
        # One relay for the slot: the journals kept by the runs parked on the way.
        relay = Relay(self.name, self.runner.lease_seconds, self.runner.max_resumes)
        try:
            while True:
                handed = self._execute(ran, relay)
                if handed is None:
                    break
                self._log(
                    logging.DEBUG,
                    f"run {handed.run.id} takes the slot of run {ran.run.id}",
                    handed.run.id,
                )
                with self._slots:  # the slot stays taken: no wake-up, nothing to claim
                    if self._epochs.get(ran.run.id) == ran.epoch:
                        del self._active[ran.run.id], self._epochs[ran.run.id]
                        self._alone.discard(ran.run.id)
                    self._epochs[handed.run.id] = handed.epoch
                    self._active[handed.run.id] = slot
                ran = handed
        finally:
            # Before the future is done: whoever waits for it finds the run ended at once.
            self._ended.append((ran.run.id, ran.epoch))
            self._wake.set()

    def _claim_some(self, skip: list[str]) -> list[Claim]:
        # A batch per transaction: claims one at a time (a transaction each) filled a
        # thousand slots at only 70-130 a second, the worker's CPU the limit. A batch is
        # capped so the claim's transaction, and SQLite's write lock, stay short.
        free = self.concurrency - len(self._active)
        return self.store.claim_some(
            limit=min(free, CLAIMS_PER_TRANSACTION),
            owner=self.name,
            lease_seconds=self.runner.lease_seconds,
            max_resumes=self.runner.max_resumes,
            skip_agents=skip,
            suspects=not self._active,
            queues=self.queues,
            # A run this worker still executes is never its to take over, even under a lease
            # that lapsed while a loaded machine held its heartbeat up.
            executing=self._active,
            releases=Releases(self.release, dict(self._agents.releases), only=self.drain),
        )

    # -- one run --------------------------------------------------------------------------

    def _execute(self, claim: Claim, relay: Relay) -> Claim | None:
        """Run `claim` to its stop or park; the claim it handed its slot to, if any (none
        once the worker is stopping)."""
        relay.next = None
        self._execution.execute(claim, None if self.stopping.is_set() else relay)
        return relay.next

    # -- signals --------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """First SIGTERM/SIGINT: stop gracefully. Second: exit at once (leases expire)."""
        stop_on_signals(self.stopping, self._wake, self._log)
