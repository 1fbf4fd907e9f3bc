"""A limit's minute read by the second (PostgreSQL, revision 0026: runner.sql.limits.
minute_charged) charges exactly what the minute's calls read one by one charge: calls settled
on either side of the minute's first whole second and of its start, settled late, settled
again, not settled, of another limit; and the sweep deletes the sums past their minutes as
it deletes the calls."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, text, update

from runner import Runner
from runner.core.limits import COUNTED_SECONDS, WINDOW_SECONDS
from runner.sql import limits as sql_limits
from runner.sql.schema import limit_reservations, limit_seconds

pytestmark = pytest.mark.postgres

_AT = datetime(2026, 12, 7, 6, 0, 0, 400_000, tzinfo=UTC)


@pytest.fixture
def runner(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Runner]:
    from tests.conftest import fresh_database

    url = next(fresh_database(request, "postgres", tmp_path))
    with Runner(url) as opened:
        yield opened


def _totals(runner: Runner, name: str, at: datetime, by_second: bool) -> tuple[int, ...]:
    statement = sql_limits.totals(True, by_second)
    with runner.engine.connect() as connection:
        row = connection.execute(statement, sql_limits.totals_bound(name, at)).one()
    return tuple(int(value) for value in row)


def test_the_minute_by_the_second_charges_what_its_calls_charge(runner: Runner) -> None:
    runner.set_limit("m", tokens_per_minute=10**9, requests_per_minute=10**6)
    runner.set_limit("other", tokens_per_minute=10**9, requests_per_minute=10**6)
    since = _AT - timedelta(seconds=COUNTED_SECONDS)
    edge = sql_limits.minute_edge(since)
    picked = random.Random(39)
    # Around every boundary the sums meet: the minute's start, its first whole second, the
    # whole seconds after it, and long before (the sweep has not yet deleted those).
    moments = [since, edge, edge - timedelta(microseconds=1), _AT, since - timedelta(seconds=50)]
    moments += [since + timedelta(microseconds=1), since - timedelta(microseconds=1)]
    moments += [since + timedelta(seconds=picked.uniform(0, 70)) for _ in range(120)]
    rows = []
    for i, moment in enumerate(moments * 2):
        settled = i % 5 != 0
        rows.append(
            {"id": f"c{i}", "limit_name": "other" if i % 7 == 0 else "m", "run_id": f"r{i}",
             "lease_epoch": 1, "tokens": picked.randint(0, 500), "settled": settled,
             "reserved_at": moment - timedelta(seconds=2),
             "settled_at": moment if settled else None, "counted_from": moment}
        )  # fmt: skip
    with runner.engine.begin() as connection:
        connection.execute(limit_reservations.insert(), rows)
        # Settled late (its minute moves to its settle), and a settled call corrected.
        connection.execute(
            update(limit_reservations)
            .where(limit_reservations.c.id.in_(["c0", "c5", "c10"]))
            .values(settled=True, tokens=77, settled_at=edge, counted_from=edge)
        )
        connection.execute(
            update(limit_reservations).where(limit_reservations.c.id == "c1").values(tokens=3)
        )
    for name in ("m", "other"):
        for at in (_AT, _AT + timedelta(milliseconds=600), _AT + timedelta(seconds=30)):
            by_rows = _totals(runner, name, at, by_second=False)
            assert by_rows[0] > 0 and by_rows[1] > 0
            assert _totals(runner, name, at, by_second=True) == by_rows, (name, at)


def test_the_sweep_deletes_the_sums_past_their_minutes(runner: Runner) -> None:
    runner.set_limit("m", tokens_per_minute=10**9, requests_per_minute=10**6)
    old = _AT - timedelta(seconds=2 * WINDOW_SECONDS + 5)
    with runner.engine.begin() as connection:
        for row_id, moment in (("old", old), ("new", _AT)):
            connection.execute(
                limit_reservations.insert().values(
                    id=row_id, limit_name="m", run_id="r", lease_epoch=1, tokens=5,
                    settled=True, reserved_at=moment, settled_at=moment, counted_from=moment,
                )
            )  # fmt: skip
        sql_limits.sweep(connection, "m", _AT)
        kept = connection.execute(select(limit_seconds.c.second)).scalars().all()
    assert kept == [_AT.replace(microsecond=0)]


def test_a_settle_into_a_new_second_waits_for_no_lock_of_the_limits_row(runner: Runner) -> None:
    # A settle under a concurrency holds its limit's row FOR UPDATE; another worker's settle
    # of the same limit meanwhile must not wait for that row (a foreign key's check would),
    # or the two would deadlock on a second each inserts.
    runner.set_limit("m", tokens_per_minute=10**9, requests_per_minute=10**6, concurrency=5)
    with runner.engine.begin() as connection:
        connection.execute(
            limit_reservations.insert().values(
                id="flying", limit_name="m", run_id="r", lease_epoch=1, tokens=5,
                settled=False, reserved_at=_AT, counted_from=_AT + timedelta(seconds=10),
            )
        )  # fmt: skip
    with runner.engine.connect() as holder, runner.engine.connect() as settler:
        holder.execute(text("SELECT name FROM limits WHERE name = 'm' FOR UPDATE"))
        settler.execute(text("SET lock_timeout = '5s'"))
        settler.execute(
            update(limit_reservations)
            .where(limit_reservations.c.id == "flying")
            .values(settled=True, tokens=9, settled_at=_AT, counted_from=_AT)
        )
        settler.commit()
        holder.rollback()
    assert _totals(runner, "m", _AT, by_second=True)[:2] == (9, 1)
