"""Lease renewals: the heartbeat extends every lease a runner holds in one statement, and
learns from the ids it gets back which runs another worker took over (or have ended), and
which were asked to cancel (so a cancel reaches a run whose model call is in flight)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from sqlalchemy import Engine, select, tuple_, update

from runner.core.clock import SYSTEM, Clock, utc_now
from runner.core.status import RunStatus
from runner.sql.schema import runs

# How many leases one heartbeat statement renews (two bound values each: far below the
# drivers' limits), so a worker of a thousand runs renews them all in one.
LEASES_PER_STATEMENT = 2000


def renew_leases(
    engine: Engine, held: Mapping[str, int], lease_seconds: float, clock: Clock = SYSTEM
) -> dict[str, bool]:
    """The heartbeat: extend every lease in `held` (run id -> epoch) in one statement, one
    transaction; the ids renewed, each with whether a cancel was asked for. A run missing
    from them was taken over (or has ended)."""
    at = utc_now(clock)
    pairs = list(held.items())
    renewed: dict[str, bool] = {}
    with engine.begin() as connection:
        for start in range(0, len(pairs), LEASES_PER_STATEMENT):
            chunk = pairs[start : start + LEASES_PER_STATEMENT]
            # Only a running run: a beat that fires between the final commit and the
            # journal's close keeps the epoch, and must not give a finished run a lease.
            # The rows are locked in id order first, as PostgreSQL's shared journal write
            # locks its runs (backend.fenced_insert_runs): two statements that lock several
            # runs in one order cannot deadlock each other.
            ordered = (
                select(runs.c.id)
                .where(
                    tuple_(runs.c.id, runs.c.lease_epoch).in_(chunk),
                    runs.c.status == RunStatus.RUNNING,
                )
                .order_by(runs.c.id)
                .with_for_update()
            )
            result = connection.execute(
                update(runs)
                .where(
                    runs.c.id.in_(ordered),
                    tuple_(runs.c.id, runs.c.lease_epoch).in_(chunk),
                    runs.c.status == RunStatus.RUNNING,
                )
                .values(lease_expires_at=at + timedelta(seconds=lease_seconds), last_seen_at=at)
                .returning(runs.c.id, runs.c.cancel_requested)
            )
            renewed.update((run_id, bool(cancel)) for run_id, cancel in result)
    return renewed
