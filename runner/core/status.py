"""Where a run stands: one enum the core, the store and every face share."""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """A run's status, as stored in `runs.status`. Compares equal to its plain string."""

    QUEUED = "queued"  # waiting for a worker: new, or released by a worker that shut down
    RUNNING = "running"  # a worker holds (or held, until its lease expires) the run
    # A call needs a person's answer (an approval, or ask_human's reply), or a sub-agent's
    # child run to end: the run holds no lease, worker or connection until the answer (the
    # child's end, delivered) queues it again.
    WAITING = "waiting"
    FINISHED = "finished"  # stopped; stop_reason says why. Runs again only if revived.


# Derived when a run is read, never stored: a running run that no live holder executes any
# more (its lease expired, or its holder's process is gone). See runner.liveness.
STALLED = "stalled"
# What a run's `state` may be: its stored status, or stalled.
STATES = (*(status.value for status in RunStatus), STALLED)
