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

Between claims a worker also keeps two kinds of house: it fires the schedules' ticks that
are due (runner.sql.schedules: it wakes up for the next tick, and looks every 20 s at
most for schedules added elsewhere; a tick's run id makes a second run of it impossible)
and, once a minute, deletes a few batches of the finished runs its queues' retention rules
expire (runner.sql.retention).

The worker logs through the standard `logging` module, on the `runner.worker` logger: each
record about a run carries its id (`record.run_id`) and every record the worker's name
(`record.worker`). `runner worker` configures the handler (text or JSON lines on stderr).

The rest of this feature (docs/architecture.md, "Where a feature lives"):
`runner.cli.worker`.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta
from types import FrameType
from typing import TYPE_CHECKING

from runner.core.agent import Agent, load_agent
from runner.core.backoff import Backoff
from runner.core.clock import Clock, utc_now
from runner.core.journal import Entry
from runner.core.limits import COUNTED_SECONDS
from runner.core.status import RunStatus
from runner.core.tree import child_run_id
from runner.core.waiting import Asks, Wait
from runner.errors import (
    AgentLoadError,
    DatabaseRefused,
    DatabaseUnavailable,
    LeaseLost,
    RunnerError,
    RunParked,
    RunPaused,
    RunWaiting,
    first_line,
)
from runner.service.database import pool_for
from runner.service.releases import diverged
from runner.service.runner import DEFAULT_LEASE_SECONDS, DEFAULT_MAX_RESUMES, Runner
from runner.store.blob_sweep import BLOB_GRACE_SECONDS
from runner.store.payloads import Codec
from runner.store.protocol import Claim, RunStore
from runner.store.releases import OlderReleases, Releases, held_back
from runner.store.rules import BATCH_SIZE, BATCHES_PER_PASS, Relay, chosen
from runner.store.scores import DueScore

if TYPE_CHECKING:
    from runner.service.database import PoolChoice
    from runner.service.replay import Replay

log = logging.getLogger("runner.worker")

# Backoff after an agent that will not load: doubling, capped.
FIRST_BACKOFF = 0.5
MAX_BACKOFF = 30.0
# Backoff after a database error, jittered: capped low, so that the first step after an
# outage follows the database's return within about a second (a longer cap left runs
# waiting up to 38 s after PostgreSQL came back), while each worker knocks at most once a
# second or so (one failed connect: no herd a recovering server would notice).
DB_FIRST_BACKOFF = 0.1
DB_MAX_BACKOFF = 1.0

# Most runs claimed in one transaction: enough that a worker fills a thousand slots in a
# second or two (50 left PostgreSQL at 600-770 in flight of 1,000), few enough that the claim
# holds its locks (SQLite's file) for tens of milliseconds at most (~0.5 ms a claim).
CLAIMS_PER_TRANSACTION = 100
# A worker whose last claim took every slot it asked for (runs wait in the queue) lets a
# few slots free up before claiming again, for at most this long: a claim transaction costs
# it about ten statements whatever it takes, and at saturation one a run ended was half its
# CPU (docs/performance.md, Saturation). A slot waits at most this, a twentieth of a poll.
CLAIM_GATHER_SECONDS = 0.02
# How many slots it waits for: an eighth of its concurrency (none below 16 runs at once).
CLAIM_GATHER_SHARE = 8
# A claim that took nothing is followed by another that a run's end prompts no sooner than
# this: when a worker's queue runs dry, each of its runs' ends woke it to claim again (115
# claims of nothing in the last second of a drain of a thousand runs, each several
# statements). Any other wake-up (a NOTIFY, the poll) claims at once; a run's end can free a
# full queue's slot, whose next run waits this long at most.
EMPTY_CLAIM_PAUSE = 0.05
# How often a worker looks for children's ends still owed to their parents (see deliver_ended)
# and for cancelled runs whose lease lapsed (see _finish_cancels).
SWEEP_SECONDS = 1.0

# Schedules added (or resumed) by another process are found within this many seconds: well
# inside a tick's on-time window (runner.store.cron.ON_TIME_SECONDS), so none is late.
SCHEDULES_LOOK = 20.0

# Retention: a pass a minute (sooner while a pass finds its fill, RETENTION_FULL_PASS runs).
RETENTION_EVERY = 60.0
# Offloaded blobs no row names (retention's runs, a crash between a blob and its row) are
# swept this often at most: a sweep lists the blob store and reads every row's references.
BLOB_SWEEP_EVERY = 600.0
RETENTION_FULL_PASS = BATCH_SIZE * BATCHES_PER_PASS

# Scorers of ended runs run at once on at most this many threads (fewer than the concurrency).
SCORER_THREADS = 4


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
        # The release each agent loaded so far declares (when `release` is not given).
        self._agent_releases: dict[str, str | None] = {}
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
        # When this worker looks for due ticks next: at the next tick, or SCHEDULES_LOOK
        # seconds from now (a schedule added or resumed meanwhile by another process),
        # whichever comes first.
        self._look_for_ticks_at = float("-inf")
        # After a database error stopped a look for due ticks, when the next look comes
        # (monotonic time, None: no error): the database's return is awaited on the real
        # clock, whatever the schedules' clock says (a test's may stand still meanwhile).
        self._retry_ticks_at: float | None = None
        self._ticks_backoff = Backoff(DB_FIRST_BACKOFF, DB_MAX_BACKOFF, jitter=True)
        # When this worker applies the queues' retention rules next (monotonic time).
        self._prune_at = time.monotonic()
        # The first sweep of blobs a minute after start (a worker started for a moment, as
        # tests do, sweeps nothing), then every BLOB_SWEEP_EVERY.
        self._sweep_at = time.monotonic() + RETENTION_EVERY
        self.concurrency = concurrency
        self.poll = poll
        self.once = once
        # Set by the first SIGTERM/SIGINT: finish the steps in flight, release, exit.
        self.stopping = threading.Event()
        self._wake = threading.Event()
        self._active: dict[str, Future[None]] = {}
        # Held while the runs in `_active` change: a slot's own thread adds the run it
        # hands the slot to, beside the serving loop that adds and reaps.
        self._slots = threading.Lock()
        self._epochs: dict[str, int] = {}  # the epoch of each run's claim in _active
        self._ended: deque[tuple[str, int]] = deque()  # (run id, epoch) of claims that ended
        # The runs this worker parked for a limit, each with the epoch of the claim that
        # parked it: a drain (`once`) finishes them before it exits.
        self._parked: dict[str, int] = {}
        # Suspects (taken over with no new journal entry since their previous claim) run
        # with no other run beside them until they write one: if a suspect kills this
        # worker, no innocent run dies with it and gets counted towards crash_loop.
        self._alone: set[str] = set()
        self._agents: dict[str, Agent] = {}
        # An agent that will not load is skipped until its backoff passes: ref -> (until, wait).
        self._agent_backoff: dict[str, tuple[float, Backoff]] = {}
        self._db_backoff = Backoff(DB_FIRST_BACKOFF, DB_MAX_BACKOFF, jitter=True)
        self._swept_at = -SWEEP_SECONDS  # when children's ends owed to parents were last sought
        self._cancels_at = -SWEEP_SECONDS  # when lapsed cancels were last sought
        self._db_wait = 0.0
        # Whether the last claim took every slot it asked for (more runs wait), and since
        # when slots have been free without a claim (see CLAIM_GATHER_SECONDS).
        self._backed_up = False
        self._free_since: float | None = None
        # When the last claim took nothing (monotonic time; None: it took runs).
        self._found_none_at: float | None = None
        self.finished = 0
        # Whether a drain that claimed nothing, and saw a due run free, has claimed once
        # more since (see _passed_over).
        self._claimed_again = False
        # Scorers of ended runs (runner.service.scoring), on threads of their own: a scorer
        # takes no run's slot. Looked for after a run of an agent with scorers ends, and
        # every SWEEP_SECONDS (a run another process ended, a lapsed claim).
        self._scorers: ThreadPoolExecutor | None = None
        self._scoring: set[tuple[str, str]] = set()
        self._scoring_lock = threading.Lock()
        self._scores_at = -SWEEP_SECONDS
        self._scores_due = False
        # On PostgreSQL, a listener sets _wake as soon as a run is submitted or answered.
        self.wakeup = self.store.wakeups(
            self._wake, log=lambda message: self._log(logging.WARNING, message)
        )

    @property
    def name(self) -> str:
        return self.runner.owner

    def _log(self, level: int, message: str, run_id: str | None = None) -> None:
        extra = {"worker": self.name} if run_id is None else {"worker": self.name, "run_id": run_id}
        log.log(level, message, extra=extra)

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
            scorers = ThreadPoolExecutor(
                min(self.concurrency, SCORER_THREADS), thread_name_prefix="runner-score"
            )
            with (
                scorers,
                ThreadPoolExecutor(self.concurrency, thread_name_prefix="runner-run") as pool,
            ):
                self._scorers = scorers
                try:
                    self._serve(pool)
                finally:
                    # Graceful stop (or a damaged database, raised by a claim): each run
                    # pauses before its next model call and is released.
                    self.stopping.set()
                    with self._slots:
                        slots = set(self._active.values())
                    for slot in slots:  # a slot's future covers the runs it was handed to
                        slot.result()
                    self._reap()
        finally:
            self.wakeup.close()
            self.runner.close()
        finished = _counted(self.finished, "run")
        self._log(logging.INFO, f"worker {self.name} stopped after finishing {finished}")

    def _serve(self, pool: ThreadPoolExecutor) -> None:
        while not self.stopping.is_set():
            # Cleared before looking, not after: a wake-up that comes while this looks
            # (a run submitted just after the claim found none) must not be lost.
            self._wake.clear()
            ended = self._reap()
            self._fire_ticks()
            self._prune()
            self._finish_cancels()
            self._score()
            claimed = False
            if len(self._active) < self.concurrency:
                gather = max(self._gathering(), self._pausing(ended))
                if gather > 0:
                    self._wake.wait(gather)  # a run that ends meanwhile wakes it to count
                    continue
                claimed = self._claim_into(pool)
            if claimed:
                self._claimed_again = False
                continue
            idle = self._db_wait or self.poll
            if self.drain and not self._active and self._drained():
                break
            if self.once and not self._active:
                if self._scores_due or self._scoring:
                    self._wake.wait(self.poll)
                    continue
                parked_for = self._parked_for()
                if parked_for is None:
                    if self._passed_over():
                        continue  # a claim passed over a run that is runnable still
                    break
                idle = min(idle, parked_for)
            # Awake for the next tick: no sooner (no busy polling), no later.
            idle = max(0.0, min(idle, self._ticks_due_in()))
            if log.isEnabledFor(logging.DEBUG):
                self._log(logging.DEBUG, f"nothing to claim: idle until woken or {idle:g}s pass")
            self._wake.wait(idle)

    def _parked_for(self) -> float | None:
        """For a drain with nothing runnable now: None if it is over, else the seconds
        until the first run parked by a limit that it waits for comes back. It waits for
        the runs it parked itself, whenever they come back, and for any other run of its
        queues parked by a limit that comes back within the limit's window (a minute): only
        runs not started and not runnable within that window are left. A run claimed again
        since this worker parked it is no longer its own (again if it parks again)."""
        try:
            now = self.runner.now()
            wakes: list[datetime] = []
            if self._parked:
                rows = self.store.existing_runs(list(self._parked))
                for run_id, epoch in list(self._parked.items()):
                    row = rows.get(run_id)
                    if (
                        row is None
                        or row.status is not RunStatus.QUEUED
                        or row.lease_epoch != epoch
                    ):
                        del self._parked[run_id]
                    else:
                        wakes.append(row.not_before or now)
            other = self.store.first_parked(self.queues, now + timedelta(seconds=COUNTED_SECONDS))
        except self.store.outages as exc:
            corrupt = self.store.damaged(exc)
            if corrupt is not None:
                raise corrupt from None
            self._db_wait = self._db_backoff.next()
            return self._db_wait
        if other is not None:
            wakes.append(other)
        if not wakes:
            return None
        return max(0.0, (min(wakes) - now).total_seconds())

    def _passed_over(self) -> bool:
        """For a drain that claimed nothing: whether to claim again rather than end. A
        claim passes over a run another transaction holds for a moment (a follower's mark,
        another claimer: SKIP LOCKED on PostgreSQL); the drain waits a poll (or a wake-up)
        while one is held. A due run seen free may have been held at the claim and freed
        since, or be left by a rule of the claim's own (a full queue, another release, an
        agent that will not load): one more claim tells which."""
        try:
            due = self.store.due_queued(self.queues, self.runner.now())
        except self.store.outages as exc:
            corrupt = self.store.damaged(exc)
            if corrupt is not None:
                raise corrupt from None
            self._db_wait = self._db_backoff.next()
            self._wake.wait(self._db_wait)  # not known: look again once the database answers
            return True
        if due.held:
            self._log(logging.DEBUG, "a runnable run is held by another transaction: looking again")
            self._claimed_again = False
            self._wake.wait(self._db_wait or self.poll)
            return True
        if due.free and not self._claimed_again:
            self._claimed_again = True
            return True
        return False

    def _gathering(self) -> float:
        """Seconds to wait for more slots to free before claiming (0: claim now). Only
        while the queue is backed up and fewer than an eighth of the slots are free."""
        if not self._backed_up or self.stopping.is_set():
            return 0.0
        free = self.concurrency - len(self._active)
        if free >= max(1, self.concurrency // CLAIM_GATHER_SHARE):
            return 0.0
        now = time.monotonic()
        if self._free_since is None:
            self._free_since = now
        return max(0.0, self._free_since + CLAIM_GATHER_SECONDS - now)

    def _pausing(self, ended: int) -> float:
        """Seconds to wait before claiming again (0: claim now): only after a claim that
        took nothing, when what woke the worker was `ended` runs' ends and others still
        run (see EMPTY_CLAIM_PAUSE). A worker left with no run claims at once: a drain then
        ends, and a suspect is claimed only by an idle worker."""
        if self._found_none_at is None or not ended or not self._active or self.stopping.is_set():
            return 0.0
        return max(0.0, self._found_none_at + EMPTY_CLAIM_PAUSE - time.monotonic())

    def _ticks_due_in(self) -> float:
        """Seconds until this worker looks for due ticks again (0 or less: now)."""
        if self._retry_ticks_at is not None:
            return self._retry_ticks_at - time.monotonic()
        return self._look_for_ticks_at - self.schedule_clock.time()

    def _fire_ticks(self) -> None:
        # Two cheap reads at each tick (and every SCHEDULES_LOOK seconds at most, for
        # schedules added elsewhere): the schedules due, each fired in a short transaction
        # of its own (the run id derived from the tick makes a second run of it impossible,
        # whichever worker fires it), then the next tick, which is the next wake-up.
        if self._ticks_due_in() > 0:
            return
        now = self.schedule_clock.time()
        self._retry_ticks_at = None
        self._look_for_ticks_at = now + (self._db_wait or SCHEDULES_LOOK)
        try:
            with self.store.writing():
                fired = self.store.fire_schedules(utc_now(self.schedule_clock))
            upcoming = self.store.next_tick()
        except self.store.outages as exc:
            corrupt = self.store.damaged(exc)
            if corrupt is not None:
                raise corrupt from None
            # Again once the database answers (about a second at most), not at the next
            # look SCHEDULES_LOOK seconds on: by then the tick due may be late.
            wait = self._ticks_backoff.next()
            self._retry_ticks_at = time.monotonic() + wait
            self._log(
                logging.WARNING,
                f"schedules not fired, retrying in {wait:.1f}s: {first_line(exc)}",
            )
            return
        self._ticks_backoff.reset()
        for tick in fired:
            if tick.run_id is not None:
                self._log(
                    logging.INFO,
                    f"schedule {tick.schedule}: tick {tick.tick:%Y-%m-%dT%H:%MZ} started run "
                    f"{tick.run_id}",
                    tick.run_id,
                )
            else:
                self._log(
                    logging.INFO,
                    f"schedule {tick.schedule}: tick {tick.tick:%Y-%m-%dT%H:%MZ} skipped "
                    f"({tick.skipped})",
                )
        if upcoming is not None:
            self._look_for_ticks_at = min(self._look_for_ticks_at, upcoming.timestamp())

    def _prune(self) -> None:
        # Retention, a pass a minute: at most a few batches of runs, each deleted in a short
        # transaction of its own, so claims and journal writes never wait long behind it.
        # A full pass means more is due: the next comes after one poll, not a minute.
        if time.monotonic() < self._prune_at:
            return
        self._prune_at = time.monotonic() + RETENTION_EVERY
        try:
            with self.store.writing():
                expired = self.store.prune_expired(self.runner.now())
        except self.store.outages as exc:
            corrupt = self.store.damaged(exc)
            if corrupt is not None:
                raise corrupt from None
            self._log(logging.WARNING, f"retention not applied, retrying: {first_line(exc)}")
            return
        if expired.runs:
            per_queue = ", ".join(f"{n} of {queue}" for queue, n in sorted(expired.queues.items()))
            self._log(logging.INFO, f"retention deleted {expired.runs} finished runs ({per_queue})")
        if expired.runs >= RETENTION_FULL_PASS:
            self._prune_at = time.monotonic() + self.poll
        self._sweep_blobs()

    def _sweep_blobs(self) -> None:
        if time.monotonic() < self._sweep_at:
            return
        self._sweep_at = time.monotonic() + BLOB_SWEEP_EVERY
        older_than = self.runner.now() - timedelta(seconds=BLOB_GRACE_SECONDS)
        failures: tuple[type[Exception], ...] = (*self.store.outages, OSError, RunnerError)
        try:
            swept = self.store.sweep_blobs(older_than)
        except failures as exc:  # a blob store or database away: the next sweep tries again
            self._log(logging.WARNING, f"blobs not swept, retrying later: {first_line(exc)}")
            return
        if swept.blobs:
            self._log(
                logging.INFO, f"swept {swept.blobs} blobs no run names ({swept.bytes:,} bytes)"
            )

    def _finish_cancels(self) -> None:
        # A cancelled run whose worker died holding it is finished as soon as its lease
        # lapses, by whichever worker looks first (about once a second, whatever its queues
        # or free slots), not when one with a slot in its queue takes it over.
        now = time.monotonic()
        if now - self._cancels_at < SWEEP_SECONDS:
            return
        self._cancels_at = now
        try:
            with self.store.writing():
                finished = self.store.finish_lapsed_cancels()
        except self.store.outages as exc:
            corrupt = self.store.damaged(exc)
            if corrupt is not None:
                raise corrupt from None
            self._log(logging.WARNING, f"cancels not applied, retrying: {first_line(exc)}")
            return
        for run in finished:
            self._log(
                logging.INFO,
                f"run {run.id} finished: cancelled (its worker was gone, its lease lapsed)",
                run.id,
            )

    def _score(self) -> None:
        # The scorers of ended runs that no live worker runs, a few at a time. A drain
        # (`once`) with no run left looks at every pass: it exits only when none is left.
        # While its runs go on it looks as a server does (every SWEEP_SECONDS, and after a
        # run of an agent with scorers ends): a look at every pass was a query each time a
        # run ended, a thousand in a drain of a thousand runs.
        if self._scorers is None:
            return
        now = time.monotonic()
        every_pass = self.once and not self._active
        if not every_pass and now - self._scores_at < SWEEP_SECONDS:
            return
        self._scores_at = now
        with self._scoring_lock:
            free = min(self.concurrency, SCORER_THREADS) - len(self._scoring)
            busy = set(self._scoring)
        if free <= 0:
            return
        skip = [ref for ref, (until, _) in self._agent_backoff.items() if until > now]
        try:
            due = self.store.due_scores(free + len(busy), skip)
        except self.store.outages as exc:
            corrupt = self.store.damaged(exc)
            if corrupt is not None:
                raise corrupt from None
            self._log(logging.WARNING, f"scores not looked for, retrying: {first_line(exc)}")
            return
        due = [d for d in due if (d.run_id, d.name) not in busy][:free]
        self._scores_due = False
        for one in due:
            try:
                agent = self._agent(one.agent, one.run_id)
            except AgentLoadError as exc:
                self._log(logging.WARNING, f"run {one.run_id} not scored: {exc}", one.run_id)
                continue
            self._scores_due = True
            with self._scoring_lock:
                self._scoring.add((one.run_id, one.name))
            self._scorers.submit(self._run_scorer, one, agent)

    def _run_scorer(self, due: DueScore, agent: Agent) -> None:
        try:
            kept = self.runner.run_scorer(due, agent)
            if kept is not None:
                self._log(
                    logging.INFO if kept else logging.WARNING,
                    f"run {due.run_id} scored: {due.name}"
                    if kept
                    else f"run {due.run_id}: score {due.name} lost its claim, not kept",
                    due.run_id,
                )
        except Exception as exc:
            self._log(
                logging.WARNING,
                f"run {due.run_id}: scorer {due.name} interrupted: {first_line(exc)}",
                due.run_id,
            )
        finally:
            with self._scoring_lock:
                self._scoring.discard((due.run_id, due.name))
            self._scores_at = -SWEEP_SECONDS  # look again at once: more may be due
            self._wake.set()

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

    def _claim_into(self, pool: ThreadPoolExecutor) -> bool:
        if self._alone:
            return False
        now = time.monotonic()
        free = self.concurrency - len(self._active)
        skip = [ref for ref, (until, _) in self._agent_backoff.items() if until > now]
        try:
            with self.store.writing():
                if now - self._swept_at >= SWEEP_SECONDS:
                    # A child whose process died between its end and its delivery strands
                    # no parent: any worker delivers it here.
                    self._swept_at = now
                    self.store.deliver_ended()
                claims = self._claim_some(skip)
        except self.store.outages as exc:
            corrupt = self.store.damaged(exc)
            if corrupt is not None:
                raise corrupt from None  # out of serve(): a damaged file is no outage
            self._db_wait = self._db_backoff.next()
            self._log(
                logging.WARNING,
                f"database error, retrying in {self._db_wait:.1f}s: {first_line(exc)}",
            )
            return False
        self._db_backoff.reset()
        self._db_wait = 0.0
        self._free_since = None
        self._found_none_at = None if claims else time.monotonic()
        self._backed_up = len(claims) >= min(free, CLAIMS_PER_TRANSACTION)
        for claim in claims:
            self._start(claim, pool)
        return bool(claims)

    def _start(self, claim: Claim, pool: ThreadPoolExecutor) -> None:
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
        pool.submit(self._execute_and_tell, claim, slot)

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
            releases=Releases(self.release, dict(self._agent_releases), only=self.drain),
        )

    def _drained(self) -> bool:
        """For a worker that drains: whether no run of its release is left queued, parked or
        running (a run waiting for a person is not waited for: it is logged)."""
        try:
            found = [info for info in self.runner.releases() if info.release == self.release]
        except self.store.outages as exc:
            corrupt = self.store.damaged(exc)
            if corrupt is not None:
                raise corrupt from None
            self._db_wait = self._db_backoff.next()
            return False
        if any(info.running or info.queued or info.parked for info in found):
            return False
        waiting = sum(info.waiting for info in found)
        if waiting:
            self._log(
                logging.INFO,
                f"release {self.release} drained but for {_counted(waiting, 'run')} waiting "
                "for a person or a child run: drain again once they are answered",
            )
        return True

    # -- one run --------------------------------------------------------------------------

    def _execute(self, claim: Claim, relay: Relay) -> Claim | None:
        """Run `claim` to its stop or park; the claim it handed its slot to, if any (none
        once the worker is stopping)."""
        relay.next = None
        self._execute_claim(claim, None if self.stopping.is_set() else relay)
        return relay.next

    def _execute_claim(self, claim: Claim, relay: Relay | None) -> None:
        run = claim.run
        try:
            agent = self._agent(run.agent, run.id)
        except AgentLoadError as exc:
            self._release(claim, f"the worker could not load the agent: {exc}")
            self._log(logging.WARNING, f"run {run.id} released: {exc}", run.id)
            return
        self._log(
            logging.INFO,
            f"run {run.id} claimed (epoch {claim.epoch}, resumes {run.resumes})",
            run.id,
        )
        if not self._may_run_on(claim, agent):
            return
        try:
            result = self.runner.execute(claim, agent, pause=self.stopping, relay=relay)
        except RunPaused:
            self._release(claim, None)
            self._log(logging.INFO, f"run {run.id} released for another worker", run.id)
            return
        except RunWaiting:
            # Parked for its sub-agents' calls, its slot handed to the first child.
            waits = [] if relay is None else relay.waits
            self._log(logging.INFO, f"run {run.id} {_waiting_words(run.id, waits)}", run.id)
            return
        except RunParked as parked:
            # Queued again in the reservation's transaction: nothing to give back.
            if self.once:
                self._parked[run.id] = claim.epoch
            self._log(logging.INFO, f"run {run.id} parked: {parked}", run.id)
            return
        except LeaseLost as exc:
            self._log(logging.WARNING, f"run {run.id} abandoned: {exc}", run.id)
            return
        except RunnerError as exc:
            # The lease expires and another claim resumes the run from its journal.
            self._log(logging.WARNING, f"run {run.id} interrupted: {first_line(exc)}", run.id)
            return
        except self.store.outages as exc:
            # The lease expires and another claim resumes the run from its journal.
            self._log(logging.WARNING, f"run {run.id} interrupted: {first_line(exc)}", run.id)
            return
        except Exception as exc:
            self._log(
                logging.ERROR, f"run {run.id} interrupted by {type(exc).__name__}: {exc}", run.id
            )
            return
        if result.status is RunStatus.WAITING:
            waits = result.waits or ([result.waiting] if result.waiting else [])
            self._log(logging.INFO, f"run {run.id} {_waiting_words(run.id, waits)}", run.id)
            return
        self.finished += 1
        if agent.scorers:
            self._scores_at = -SWEEP_SECONDS  # its scorers are due: look at the next pass
        self._log(
            logging.INFO,
            f"run {run.id} finished: {result.stop_reason} after {_counted(result.steps, 'step')}"
            + _why(result.error),
            run.id,
        )

    def _may_run_on(self, claim: Claim, agent: Agent) -> bool:
        """Whether this worker runs the claimed run on, by its queue's policy for runs of
        another release: a pinned or parked one found to be another release's once its
        agent loaded is given back; under `check`, a run of another release is replayed
        against this worker's code first, and parked if it differs."""
        run = claim.run
        mine = self.release if self.release is not None else agent.release
        if not held_back(run.release, mine):
            return True
        try:
            # Read here, not at the claim: only a run of another release needs it.
            policy = self.store.queue_policy(run.queue)
        except self.store.outages as exc:
            self._log(logging.WARNING, f"run {run.id} not checked: {first_line(exc)}", run.id)
            return False  # the lease expires, and the next claimer decides again
        if run.parked_reason is not None or policy is OlderReleases.PIN:
            self._release(claim, None)
            self._log(
                logging.INFO, f"run {run.id} left to a worker of release {run.release}", run.id
            )
            return False
        if policy is not OlderReleases.CHECK:
            return True
        try:
            report = self._checked(claim, agent)
            if report.agrees:
                self._log(
                    logging.INFO,
                    f"run {run.id} of release {run.release} checked against release {mine}: "
                    f"agrees over {_counted(report.steps, 'step')}, running it on",
                    run.id,
                )
                return True
            with self.store.writing():
                parked = self.runner.park_diverged(claim, report, mine)
        except self.store.outages as exc:
            # The lease expires and the next claimer checks the run again.
            self._log(logging.WARNING, f"run {run.id} not checked: {first_line(exc)}", run.id)
            return False
        if parked:
            self._log(
                logging.WARNING,
                f"run {run.id} parked (check_failed): {diverged(report, mine)}",
                run.id,
            )
        return False

    def _checked(self, claim: Claim, agent: Agent) -> Replay:
        """The check's replay; one that raises (not the database: an outage is raised) is a
        check failed, said so: a run its release's code cannot even replay is not run on,
        and is not left to fail every claimer's check in turn."""
        try:
            return self.runner.check_claimed(claim, agent)
        except self.store.outages:
            raise
        except Exception as exc:
            # Imported here: a worker that never checks a release has no use for replay
            # (nor for the model adapters it imports), about 13 ms of its start-up.
            from runner.service.replay import Replay

            run = claim.run
            now = f"cannot replay it: {type(exc).__name__}: {first_line(exc)}"
            return Replay(run.id, 0, run.stop_reason, False, None, "was recorded", now)

    def _agent(self, ref: str | None, run_id: str) -> Agent:
        if ref is None:
            raise AgentLoadError(f"run {run_id} has no agent reference a worker can import")
        agent = self._agents.get(ref)
        if agent is None:
            try:
                agent = load_agent(ref)
            except AgentLoadError:
                fresh = Backoff(FIRST_BACKOFF, MAX_BACKOFF)
                _, backoff = self._agent_backoff.get(ref, (0.0, fresh))
                self._agent_backoff[ref] = (time.monotonic() + backoff.next(), backoff)
                raise
            self._agent_backoff.pop(ref, None)
            self._agents[ref] = agent
            self._agent_releases[ref] = agent.release
        return agent

    def _release(self, claim: Claim, error: str | None) -> None:
        try:
            with self.store.writing():
                self.store.release_run(claim.run.id, claim.epoch, error)
        except self.store.outages as exc:
            self._log(
                logging.WARNING,
                f"run {claim.run.id} left to lease expiry: {first_line(exc)}",
                claim.run.id,
            )

    # -- signals --------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """First SIGTERM/SIGINT: stop gracefully. Second: exit at once (leases expire)."""

        # Python may run this handler again inside itself when a second signal lands
        # mid-handler; next() on a counter is one C call, so exactly one call sees 0.
        signals_seen = itertools.count()

        def handle(signum: int, _frame: FrameType | None) -> None:
            if next(signals_seen) > 0:
                os._exit(128 + signum)
            self.stopping.set()
            self._wake.set()
            self._log(
                logging.INFO,
                f"worker {self.name}: {signal.Signals(signum).name}, stopping gracefully",
            )

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)


def _why(error: str | None) -> str:
    """`: <the error's first line>` for a run that stopped with one (a model_error)."""
    said = (error or "").strip()
    return f": {said.splitlines()[0]}" if said else ""


def start_worker(make: Callable[[], Worker], *, wait: bool) -> Worker | None:
    """Make a worker; with `wait`, keep trying while the database cannot be reached.

    A worker started before its database (a machine booting, a failover) waits for it
    instead of exiting. A database that refuses it for good (DatabaseRefused: no such role
    or database, a bad password) and a schema at the wrong revision are not waited for:
    they are errors. SIGTERM or SIGINT while it waits: None, a stop like any other.
    """
    backoff = Backoff(DB_FIRST_BACKOFF, DB_MAX_BACKOFF, jitter=True)
    stop = threading.Event()
    with _signals_set(stop) if wait else contextlib.nullcontext():
        while True:
            try:
                made = make()
            except DatabaseRefused:
                raise
            except DatabaseUnavailable as exc:
                if not wait:
                    raise
                delay = backoff.next()
                log.warning(f"database unavailable, retrying in {delay:.1f}s: {exc}")
                if stop.wait(delay):
                    log.info("stopped while waiting for the database")
                    return None
                continue
            if stop.is_set():  # the signal came while it connected: serve() stops at once
                made.stopping.set()
            return made


@contextlib.contextmanager
def _signals_set(stop: threading.Event) -> Iterator[None]:
    """SIGTERM and SIGINT set `stop` while the worker waits for its database (a signal
    can be handled only on the main thread: elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    for signum in handlers:
        signal.signal(signum, lambda _signum, _frame: stop.set())
    try:
        yield
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


def _counted(count: int, word: str) -> str:
    """`1 run`, `2 runs`."""
    return f"{count} {word}" + ("" if count == 1 else "s")


def _waiting_words(run_id: str, waits: Sequence[Wait]) -> str:
    """What a run released while it waits is waiting for: a person's answer, or the end of
    the child runs its sub-agent calls started (which workers run: no person is needed)."""
    people = [wait for wait in waits if wait.asks is not Asks.CHILD]
    children = [child_run_id(run_id, wait.call) for wait in waits if wait.asks is Asks.CHILD]
    what = [f"for {wait.asks} of {wait.question} (call {wait.call})" for wait in people]
    until = ["a person answers"] if people else []
    if children:
        one = len(children) == 1
        what.append(f"for its child run{'' if one else 's'} {', '.join(children)}")
        until.append("it ends" if one else "they end")
    return f"waits {' and '.join(what)}: released until {' and '.join(until)}"
