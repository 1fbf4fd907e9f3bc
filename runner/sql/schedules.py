"""Schedules: runs started on a cron schedule, exactly one run per tick.

A schedule is a row of `schedules`. Its `next_tick_at` is the first tick not yet handled; a
worker that finds it due (`fire_due`, at each look of its loop) handles it in one
transaction with the schedule's row locked (FOR UPDATE SKIP LOCKED on PostgreSQL; BEGIN
IMMEDIATE on SQLite): it inserts the tick's run, or records why the tick was skipped, and
moves `next_tick_at` past now. The run's id derives from the schedule and the tick
(`NAME-YYYYMMDDTHHMM`, the tick in UTC), so the primary key of `runs` makes a second run
of one tick impossible, whatever the number of workers, hosts or crashes.

Ticks come from `cronsim` (a cron parser kept by the Healthchecks.io author), read in the
schedule's time zone, with Debian cron's rules for the hours a DST change skips or repeats.
Time is a parameter: every function here takes `now` (the database's clock in a worker, a
simulated one in tests).

What a due tick comes to (late, `catch_up`, `overlap`) is decided by the rules both stores
keep, runner.store.cron's `handle_due`; this module reads and writes the rows around it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from runner.core.status import RunStatus
from runner.errors import ScheduleNotFound
from runner.sql.backend import backend_for
from runner.sql.payloads import payloads_of
from runner.sql.runs import reading
from runner.sql.schema import runs, schedules
from runner.store.cron import after_tick, handle_due, next_tick, tick_run
from runner.store.rows import Fired as Fired  # re-exported
from runner.store.rows import ScheduleRow as ScheduleRow  # re-exported
from runner.store.rows import seal_task

# Most schedules one look fires (each in its own short transaction); the rest at the next.
FIRES_PER_LOOK = 20


# -- checks and ticks -------------------------------------------------------------------------


# -- the schedules as stored ----------------------------------------------------------------


def add_schedule(engine: Engine, row: Mapping[str, Any]) -> bool:
    """Insert a schedule; False, nothing written, if the name is taken."""
    try:
        with engine.begin() as connection:
            connection.execute(insert(schedules).values(**seal_task(row, payloads_of(connection))))
    except IntegrityError:
        return False
    return True


def list_schedules(engine: Engine) -> list[ScheduleRow]:
    with reading(engine) as connection:
        found = connection.execute(select(schedules).order_by(schedules.c.name))
        return [ScheduleRow.of(row) for row in found]


def get_schedule(engine: Engine, name: str) -> ScheduleRow:
    with reading(engine) as connection:
        row = connection.execute(select(schedules).where(schedules.c.name == name)).first()
    if row is None:
        raise ScheduleNotFound(f"no schedule named {name!r} (runner schedule list)")
    return ScheduleRow.of(row)


def set_paused(engine: Engine, name: str, paused: bool, now: datetime) -> ScheduleRow:
    """Pause or resume a schedule. Resumed, it fires from the first tick after now: the
    ticks of its pause are not caught up."""
    with engine.begin() as connection:
        row = connection.execute(
            select(schedules).where(schedules.c.name == name).with_for_update()
        ).first()
        if row is None:
            raise ScheduleNotFound(f"no schedule named {name!r} (runner schedule list)")
        schedule = ScheduleRow.of(row)
        values: dict[str, Any] = {"paused": paused, "updated_at": now}
        if schedule.paused and not paused:
            values["next_tick_at"] = next_tick(schedule.cron, schedule.timezone, now)
        connection.execute(update(schedules).where(schedules.c.name == name).values(**values))
    return get_schedule(engine, name)


def remove_schedule(engine: Engine, name: str) -> None:
    """Delete a schedule; its runs stay (and finish)."""
    with engine.begin() as connection:
        gone = connection.execute(delete(schedules).where(schedules.c.name == name)).rowcount
    if not gone:
        raise ScheduleNotFound(f"no schedule named {name!r} (runner schedule list)")


# -- firing ---------------------------------------------------------------------------------


def next_due(engine: Engine) -> datetime | None:
    """When the next tick of any schedule not paused comes (None: no schedule)."""
    with reading(engine) as connection:
        found: datetime | None = connection.execute(
            select(func.min(schedules.c.next_tick_at)).where(schedules.c.paused.is_(False))
        ).scalar()
    return found


def fire_due(engine: Engine, now: datetime, recorded_at: datetime | None = None) -> list[Fired]:
    """Handle every tick due at `now`: a run started or a skip recorded per schedule due.
    `recorded_at` (default `now`) is when the runs were created, on the store's clock (the
    ticks may be fired on another: a test's, or `runner schedule fire --at`).

    One cheap read finds the schedules due (by `ix_schedules_due`); each is then handled in
    a transaction of its own, its row locked and read again there: a schedule another
    worker is handling, or has just handled, is passed over.
    """
    with reading(engine) as connection:
        names = list(
            connection.execute(
                select(schedules.c.name)
                .where(schedules.c.paused.is_(False), schedules.c.next_tick_at <= now)
                .order_by(schedules.c.next_tick_at)
                .limit(FIRES_PER_LOOK)
            ).scalars()
        )
    fired: list[Fired] = []
    for name in names:
        done = _fire(engine, name, now, recorded_at or now)
        if done is not None:
            fired.append(done)
    return fired


def _fire(engine: Engine, name: str, now: datetime, recorded_at: datetime) -> Fired | None:
    with engine.begin() as connection:
        row = connection.execute(
            select(schedules)
            .where(
                schedules.c.name == name,
                schedules.c.paused.is_(False),
                schedules.c.next_tick_at <= now,
            )
            .with_for_update(skip_locked=True)
        ).first()
        if row is None:
            return None  # another worker holds it, or handled it first
        schedule = ScheduleRow.of(row)
        handled = handle_due(
            schedule,
            now,
            still_going=lambda run_id: _still_going(connection, run_id),
            exists=lambda run_id: _exists(connection, run_id),
        )
        if handled.run_id is not None:
            connection.execute(
                insert(runs).values(
                    **seal_task(
                        tick_run(schedule, handled.run_id, recorded_at), payloads_of(connection)
                    )
                )
            )
            # Delivered at commit: idle workers claim the run at once (PostgreSQL's NOTIFY).
            backend_for(connection.dialect.name).wake_workers(connection)
        connection.execute(
            update(schedules)
            .where(schedules.c.name == name)
            .values(**after_tick(schedule, handled, recorded_at))
        )
        return Fired(name, handled.tick, handled.run_id, handled.skipped)


def _still_going(connection: Connection, run_id: str) -> bool:
    status = connection.execute(select(runs.c.status).where(runs.c.id == run_id)).scalar()
    return status is not None and status != RunStatus.FINISHED


def _exists(connection: Connection, run_id: str) -> bool:
    return connection.execute(select(runs.c.id).where(runs.c.id == run_id)).first() is not None
