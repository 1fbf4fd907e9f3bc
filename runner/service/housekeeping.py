"""The house a worker keeps between claims: the schedules' ticks that are due, retention,
the blobs no row names, and cancelled runs whose worker died.

Each is a short transaction of its own, done at most so often, whichever worker comes
first: the schedules' ticks (runner.sql.schedules: a worker wakes up for the next tick, and
looks every SCHEDULES_LOOK seconds at most for schedules added elsewhere; a tick's run id
makes a second run of it impossible), once a minute a few batches of the finished runs its
queues' retention rules expire (runner.sql.retention), now and then a sweep of offloaded
blobs (runner.store.blob_sweep), and about once a second the cancels whose lease lapsed. The
serving loop (runner.service.worker) calls `keep()` at each pass and sleeps no longer than
`ticks_due_in()`.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from runner.core.clock import Clock, utc_now
from runner.errors import RunnerError, first_line
from runner.service.database_wait import DatabaseWait, database_backoff, raise_if_damaged
from runner.service.runner import Runner
from runner.service.worker_log import WorkerLog
from runner.store.blob_sweep import BLOB_GRACE_SECONDS
from runner.store.rules import BATCH_SIZE, BATCHES_PER_PASS

# How often a worker looks for children's ends still owed to their parents (see deliver_ended),
# for cancelled runs whose lease lapsed (see Housekeeping._finish_cancels) and for scores due.
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


class Housekeeping:
    """A worker's house, kept on its `runner`'s store between claims."""

    def __init__(
        self,
        runner: Runner,
        *,
        schedule_clock: Clock,
        poll: float,
        database: DatabaseWait,
        say: WorkerLog,
    ) -> None:
        self.runner = runner
        self.store = runner.store
        self.schedule_clock = schedule_clock
        self.poll = poll
        self.database = database
        self.say = say
        # When this worker looks for due ticks next: at the next tick, or SCHEDULES_LOOK
        # seconds from now (a schedule added or resumed meanwhile by another process),
        # whichever comes first.
        self._look_for_ticks_at = float("-inf")
        # After a database error stopped a look for due ticks, when the next look comes
        # (monotonic time, None: no error): the database's return is awaited on the real
        # clock, whatever the schedules' clock says (a test's may stand still meanwhile).
        self._retry_ticks_at: float | None = None
        self._ticks_backoff = database_backoff()
        # When this worker applies the queues' retention rules next (monotonic time).
        self._prune_at = time.monotonic()
        # The first sweep of blobs a minute after start (a worker started for a moment, as
        # tests do, sweeps nothing), then every BLOB_SWEEP_EVERY.
        self._sweep_at = time.monotonic() + RETENTION_EVERY
        self._cancels_at = -SWEEP_SECONDS  # when lapsed cancels were last sought

    def keep(self) -> None:
        """Whatever is due: the ticks, retention (and the blobs), the lapsed cancels."""
        self._fire_ticks()
        self._prune()
        self._finish_cancels()

    def ticks_due_in(self) -> float:
        """Seconds until this worker looks for due ticks again (0 or less: now)."""
        if self._retry_ticks_at is not None:
            return self._retry_ticks_at - time.monotonic()
        return self._look_for_ticks_at - self.schedule_clock.time()

    def _fire_ticks(self) -> None:
        # Two cheap reads at each tick (and every SCHEDULES_LOOK seconds at most, for
        # schedules added elsewhere): the schedules due, each fired in a short transaction
        # of its own (the run id derived from the tick makes a second run of it impossible,
        # whichever worker fires it), then the next tick, which is the next wake-up.
        if self.ticks_due_in() > 0:
            return
        now = self.schedule_clock.time()
        self._retry_ticks_at = None
        self._look_for_ticks_at = now + (self.database.seconds or SCHEDULES_LOOK)
        try:
            with self.store.writing():
                fired = self.store.fire_schedules(utc_now(self.schedule_clock))
            upcoming = self.store.next_tick()
        except self.store.outages as exc:
            raise_if_damaged(self.store, exc)
            # Again once the database answers (about a second at most), not at the next
            # look SCHEDULES_LOOK seconds on: by then the tick due may be late.
            wait = self._ticks_backoff.next()
            self._retry_ticks_at = time.monotonic() + wait
            self.say(
                logging.WARNING,
                f"schedules not fired, retrying in {wait:.1f}s: {first_line(exc)}",
            )
            return
        self._ticks_backoff.reset()
        for tick in fired:
            if tick.run_id is not None:
                self.say(
                    logging.INFO,
                    f"schedule {tick.schedule}: tick {tick.tick:%Y-%m-%dT%H:%MZ} started run "
                    f"{tick.run_id}",
                    tick.run_id,
                )
            else:
                self.say(
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
            raise_if_damaged(self.store, exc)
            self.say(logging.WARNING, f"retention not applied, retrying: {first_line(exc)}")
            return
        if expired.runs:
            per_queue = ", ".join(f"{n} of {queue}" for queue, n in sorted(expired.queues.items()))
            self.say(logging.INFO, f"retention deleted {expired.runs} finished runs ({per_queue})")
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
            self.say(logging.WARNING, f"blobs not swept, retrying later: {first_line(exc)}")
            return
        if swept.blobs:
            self.say(
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
            raise_if_damaged(self.store, exc)
            self.say(logging.WARNING, f"cancels not applied, retrying: {first_line(exc)}")
            return
        for run in finished:
            self.say(
                logging.INFO,
                f"run {run.id} finished: cancelled (its worker was gone, its lease lapsed)",
                run.id,
            )
