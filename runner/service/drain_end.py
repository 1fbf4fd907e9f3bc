"""When a worker that drains is done: `runner worker --once` (nothing runnable is left, and
no run it parked for a limit will come back) and `--drain` (no run of its release is left).

A drain with nothing to claim does not simply end: runs it parked for a limit come back, and
a claim can pass over a run that is runnable still (held for a moment by another
transaction). The serving loop (runner.service.worker) asks here before it ends or idles.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from datetime import datetime, timedelta

from runner.core.limits import COUNTED_SECONDS
from runner.core.status import RunStatus
from runner.service.database_wait import DatabaseWait, raise_if_damaged
from runner.service.runner import Runner
from runner.service.worker_log import WorkerLog, counted


class DrainEnd:
    """What a drain waits for before it ends, for a worker of `queues` (None: all)."""

    def __init__(
        self,
        runner: Runner,
        queues: Sequence[str] | None,
        release: str | None,
        *,
        poll: float,
        database: DatabaseWait,
        wake: threading.Event,
        say: WorkerLog,
    ) -> None:
        self.runner = runner
        self.store = runner.store
        self.queues = queues
        self.release = release
        self.poll = poll
        self.database = database
        self.wake = wake
        self.say = say
        # The runs this worker parked for a limit, each with the epoch of the claim that
        # parked it: a drain (`once`) finishes them before it exits.
        self.parked: dict[str, int] = {}
        # Whether a drain that claimed nothing, and saw a due run free, has claimed once
        # more since (see passed_over).
        self.claimed_again = False

    def park(self, run_id: str, epoch: int) -> None:
        """This worker's claim at `epoch` parked the run for a limit."""
        self.parked[run_id] = epoch

    def parked_for(self) -> float | None:
        """For a drain with nothing runnable now: None if it is over, else the seconds
        until the first run parked by a limit that it waits for comes back. It waits for
        the runs it parked itself, whenever they come back, and for any other run of its
        queues parked by a limit that comes back within the limit's window (a minute): only
        runs not started and not runnable within that window are left. A run claimed again
        since this worker parked it is no longer its own (again if it parks again)."""
        try:
            now = self.runner.now()
            wakes: list[datetime] = []
            if self.parked:
                rows = self.store.existing_runs(list(self.parked))
                for run_id, epoch in list(self.parked.items()):
                    row = rows.get(run_id)
                    if (
                        row is None
                        or row.status is not RunStatus.QUEUED
                        or row.lease_epoch != epoch
                    ):
                        del self.parked[run_id]
                    else:
                        wakes.append(row.not_before or now)
            other = self.store.first_parked(self.queues, now + timedelta(seconds=COUNTED_SECONDS))
        except self.store.outages as exc:
            raise_if_damaged(self.store, exc)
            return self.database.failed()
        if other is not None:
            wakes.append(other)
        if not wakes:
            return None
        return max(0.0, (min(wakes) - now).total_seconds())

    def passed_over(self) -> bool:
        """For a drain that claimed nothing: whether to claim again rather than end. A
        claim passes over a run another transaction holds for a moment (a follower's mark,
        another claimer: SKIP LOCKED on PostgreSQL); the drain waits a poll (or a wake-up)
        while one is held. A due run seen free may have been held at the claim and freed
        since, or be left by a rule of the claim's own (a full queue, another release, an
        agent that will not load): one more claim tells which."""
        try:
            due = self.store.due_queued(self.queues, self.runner.now())
        except self.store.outages as exc:
            raise_if_damaged(self.store, exc)
            # Not known: look again once the database answers.
            self.wake.wait(self.database.failed())
            return True
        if due.held:
            self.say(logging.DEBUG, "a runnable run is held by another transaction: looking again")
            self.claimed_again = False
            self.wake.wait(self.database.seconds or self.poll)
            return True
        if due.free and not self.claimed_again:
            self.claimed_again = True
            return True
        return False

    def drained(self) -> bool:
        """For a worker that drains: whether no run of its release is left queued, parked or
        running (a run waiting for a person is not waited for: it is logged)."""
        try:
            found = [info for info in self.runner.releases() if info.release == self.release]
        except self.store.outages as exc:
            raise_if_damaged(self.store, exc)
            self.database.failed()
            return False
        if any(info.running or info.queued or info.parked for info in found):
            return False
        waiting = sum(info.waiting for info in found)
        if waiting:
            self.say(
                logging.INFO,
                f"release {self.release} drained but for {counted(waiting, 'run')} waiting "
                "for a person or a child run: drain again once they are answered",
            )
        return True
