"""Whether a run is really running: `stalled` is a state derived when read, never stored.

A run whose status is `running` is stalled when nobody can still be executing it: its lease
expired (on the database's clock, the one every worker compares), or its holder is a
process on this host, PID namespace and boot that no longer exists (runner.store.owner). A
stalled run waits for a worker or `runner resume` to take it over from its journal.

The `run_summary` view derives the same state from the lease alone: SQL cannot see whether
a process is alive.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from runner.core.counters import Counters
from runner.core.status import STALLED, RunStatus
from runner.store.owner import is_dead
from runner.store.rows import RunRow, lease_is_live


def is_stalled(run: RunRow, now: datetime) -> bool:
    """A running run that no live holder executes any more."""
    return run.status is RunStatus.RUNNING and not run.lease_is_live(now)


def state_of(
    status: str, lease_owner: str | None, lease_expires_at: datetime | None, now: datetime
) -> str:
    """A run's state at `now` from its status and lease alone (a line of a page that reads
    no whole row): its status, or `stalled` as `is_stalled` judges it."""
    if status == RunStatus.RUNNING and not lease_is_live(lease_owner, lease_expires_at, now):
        return STALLED
    return str(status)


def stall_reason(run: RunRow, now: datetime) -> str | None:
    """Why the run is stalled, in a few words; None when it is not."""
    if not is_stalled(run, now):
        return None
    if run.lease_owner is None or run.lease_expires_at is None:
        return "nobody holds its lease"
    if run.lease_expires_at <= now:
        return "its lease expired"
    if is_dead(run.lease_owner):
        return "its holder's process is gone"
    return None  # unreachable: a live, unexpired lease is not stalled


def observed(run: RunRow, now: datetime, last: Counters | None) -> RunRow:
    """The run as it stands at `now`: its state, and for an unfinished run the counters of
    its journal's last entry (`last`: its row holds the final counters only)."""
    state = STALLED if is_stalled(run, now) else str(run.status)
    if run.status is RunStatus.FINISHED or last is None:
        return replace(run, state=state)
    return replace(run, state=state, steps=last.steps, tokens=last.tokens, cost=last.cost)
