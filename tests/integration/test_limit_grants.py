"""A worker's grants of a busy limit (runner.sql.grants), on SQLite and PostgreSQL: calls
handed out from memory without a commit, settled in one batch, and never more calls in any
minute than the limit, a worker SIGKILLed while holding a grant included.

The grant sizes are made small here (a limit of 20 requests a minute gets grants of 4), so
that a test can fill a minute in a few dozen calls.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, func, select

from runner import Runner
from runner.core.clock import ManualClock
from runner.core.limits import WINDOW_SECONDS
from runner.errors import RunParked
from runner.sql import grants
from runner.sql import limits as sql_limits
from runner.sql.schema import limit_reservations
from runner.store.rules import aware
from tests.conditions import wait_until
from tests.conftest import fresh_database

from .agents import SOLVER_REF

HOLDER = Path(__file__).with_name("grant_holder.py")
LEASE = 30.0
PER_MINUTE = 20  # with the sizes below, a grant holds 4 calls


@pytest.fixture(autouse=True)
def small_grants(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grants, "GRANT_FROM_REQUESTS", 20)
    monkeypatch.setattr(grants, "GRANT_SHARE", 5)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_database(request, request.param, tmp_path)


def limits_of(runner: Runner, run_id: str) -> Any:
    claim = runner.store.claim_run(run_id, lease_seconds=LEASE, max_resumes=1_000, steal=True)
    return runner.store.run_limits(run_id, claim.epoch)


def test_a_grant_hands_out_calls_without_a_commit_and_settles_them_in_one(url: str) -> None:
    clock = ManualClock(time.time())
    with Runner(url, clock=clock, lease_seconds=LEASE) as runner:
        runner.set_limit("m", requests_per_minute=PER_MINUTE, tokens_per_minute=10_000)
        limits = limits_of(runner, runner.submit(SOLVER_REF, "a"))
        commits = 0

        def counted(_connection: Any) -> None:
            nonlocal commits
            commits += 1

        first = limits.reserve("m", 100)
        assert first.id is not None
        [info] = runner.limits()
        assert (info.requests, info.tokens) == (4, 10_000 // 5)  # the grant counts whole
        event.listen(runner.engine, "commit", counted)
        try:
            rest = [limits.reserve("m", 100) for _ in range(2)]
            for reservation, used in zip([first, *rest], (50, 60, 70), strict=True):
                limits.settle(reservation, used)
            assert commits == 0
            clock.advance(grants.GRANT_SECONDS)  # the grant closes at its next use
            assert limits.reserve("m", 100).id is not None  # from a new grant
            assert commits == 2  # the old one's calls and rows written; the new one taken
        finally:
            event.remove(runner.engine, "commit", counted)
        # The first grant: its three calls at their usage, its fourth row returned; the new
        # grant, whole.
        [info] = runner.limits()
        assert (info.requests, info.tokens) == (3 + 4, 50 + 60 + 70 + 10_000 // 5)


def test_a_limit_with_someone_in_line_or_a_concurrency_gives_no_grant(url: str) -> None:
    clock = ManualClock(time.time())
    with Runner(url, clock=clock, lease_seconds=LEASE) as runner:
        runner.set_limit("m", requests_per_minute=PER_MINUTE, concurrency=5)
        first, waiter, other = (runner.submit(SOLVER_REF, t) for t in ("a", "b", "c"))
        limits_of(runner, first).reserve("m", 10)
        assert runner.limits()[0].requests == 1  # one call, one row: no grant
        runner.set_limit("m", requests_per_minute=PER_MINUTE)
        runner.set_limit("n", requests_per_minute=1)
        limits_of(runner, other).reserve("n", 10)
        with pytest.raises(RunParked):
            limits_of(runner, waiter).reserve("n", 10)
        runner.set_limit("n", requests_per_minute=PER_MINUTE)
        limits_of(runner, other).reserve("n", 10)  # the waiter is in line: a call alone
        assert [i.requests for i in runner.limits()] == [1, 2]


def test_a_worker_killed_holding_a_grant_never_lets_a_minute_pass_the_limit(
    url: str, tmp_path: Path
) -> None:
    """The provider's count in every sliding minute stays within the limit: the killed
    worker's calls (sent from its grant, two of three settled in its memory only) and every
    call the fleet makes after, through grants and alone, over three minutes."""
    sent_file = tmp_path / "sent"
    with Runner(url, lease_seconds=LEASE) as runner:
        runner.set_limit("m", requests_per_minute=PER_MINUTE)
        held, survivor = runner.submit(SOLVER_REF, "held"), runner.submit(SOLVER_REF, "next")
    holder = subprocess.Popen([sys.executable, str(HOLDER), url, held, str(sent_file)])
    try:
        wait_until(
            lambda: sent_file.exists() and "holding" in sent_file.read_text(),
            what="the holder's three calls",
        )
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    sent = [float(line) for line in sent_file.read_text().split() if line != "holding"]
    assert len(sent) == 3
    clock = ManualClock(time.time())
    with Runner(url, clock=clock, lease_seconds=LEASE) as runner:
        assert runner.limits()[0].requests == 4  # the dead worker's grant counts whole
        end = clock.time() + 180
        limits = limits_of(runner, survivor)
        while clock.time() < end:
            try:
                reservation = limits.reserve("m", 10)
            except RunParked as parked:  # claimed again at its wake-up, as a worker would
                clock.advance(max(parked.until - clock.time(), 0.05))
                limits = limits_of(runner, survivor)
                continue
            sent.append(clock.time())  # sent and answered at once
            limits.settle(reservation, 10)
    sent.sort()
    busiest = max(sum(1 for t in sent if end_ - 60 < t <= end_) for end_ in sent)
    assert busiest <= PER_MINUTE
    assert len(sent) >= 3 * PER_MINUTE - 4  # the fleet still used the limit


def test_a_grant_no_call_comes_back_to_is_closed_and_returns_its_rows(url: str) -> None:
    with Runner(url, lease_seconds=LEASE) as runner:
        runner.set_limit("m", requests_per_minute=PER_MINUTE)
        limits = limits_of(runner, runner.submit(SOLVER_REF, "a"))
        limits.settle(limits.reserve("m", 10), 7)
        assert runner.limits()[0].requests == 4
        wait_until(
            lambda: (runner.limits()[0].requests, runner.limits()[0].tokens) == (1, 7),
            what="the grant closed at its time, its one call written, its rows returned",
        )


def test_a_grant_s_call_settled_after_the_sweep_took_its_rows_is_charged(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A grant is written when its last call settles: a call that ran for minutes finds the
    grant's rows swept (no lease holds them), and its usage, and its siblings', still count
    from that write; the rows never handed out stay returned."""
    monkeypatch.setattr(sql_limits, "SWEEP_SECONDS", 0.0)
    clock = ManualClock(time.time())
    with Runner(url, clock=clock, lease_seconds=LEASE) as runner:
        runner.set_limit("m", requests_per_minute=PER_MINUTE, tokens_per_minute=10_000)
        limits = limits_of(runner, runner.submit(SOLVER_REF, "a"))
        quick, slow = limits.reserve("m", 100), limits.reserve("m", 100)  # from one grant
        limits.settle(quick, 50)  # noted in memory until the grant's last call settles
        clock.advance(200)
        # A call too large for a grant is reserved alone, and sweeps the grant's rows away.
        limits_of(runner, runner.submit(SOLVER_REF, "b")).reserve("m", 600)
        assert runner.limits()[0].requests == 1
        limits.settle(slow, 900)
        [info] = runner.limits()
        assert (info.requests, info.tokens) == (3, 600 + 50 + 900)


def test_a_limit_served_only_by_grants_keeps_only_the_rows_its_minutes_need(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Taking a grant sweeps as a call reserved alone does: over five minutes of calls from
    grants only, no call reserved alone, the rows past two minutes go, and the counts are
    those of the minute."""
    monkeypatch.setattr(grants, "GRANT_SWEEP_SECONDS", 0.0)  # every grant may sweep
    clock = ManualClock(time.time())
    with Runner(url, clock=clock, lease_seconds=LEASE) as runner:
        runner.set_limit("m", requests_per_minute=10 * PER_MINUTE)  # grants of 40 calls
        limits = limits_of(runner, runner.submit(SOLVER_REF, "a"))
        for tick in range(30):  # every 10 s: the last grant written, a new one taken
            if tick:
                clock.advance(10)
            limits.settle(limits.reserve("m", 100), 50)
        with runner.engine.connect() as connection:
            count, oldest = connection.execute(
                select(func.count(), func.min(limit_reservations.c.counted_from))
            ).one()
        # The calls settled in the two minutes up to now (one a grant, each written when
        # the next grant was taken), and the open grant's 40 rows.
        assert count == 13 + 40
        assert aware(oldest) >= datetime.fromtimestamp(clock.time(), UTC) - timedelta(
            seconds=2 * WINDOW_SECONDS
        )
        [info] = runner.limits()
        assert (info.requests, info.tokens) == (7 + 40, 7 * 50 + 40 * 100)


def test_grants_sweep_a_limit_at_most_once_every_grant_sweep_seconds(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep is no statement of every grant: this process sweeps a limit it takes grants
    of once, then not again for GRANT_SWEEP_SECONDS (on the machine's clock)."""
    monkeypatch.setattr(sql_limits, "_SWEPT", {})  # no sweep of an earlier test counts
    monkeypatch.setattr(grants, "GRANT_SWEEP_SECONDS", 3_600.0)
    clock = ManualClock(time.time())
    sweeps = 0

    def counted(_c: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        nonlocal sweeps
        if statement.lstrip().upper().startswith("DELETE FROM LIMIT_RESERVATIONS"):
            sweeps += "counted_from <" in statement  # not a grant's rows returned by id

    with Runner(url, clock=clock, lease_seconds=LEASE) as runner:
        runner.set_limit("m", requests_per_minute=10 * PER_MINUTE)
        limits = limits_of(runner, runner.submit(SOLVER_REF, "a"))
        event.listen(runner.engine, "before_cursor_execute", counted)
        try:
            for _ in range(10):
                limits.settle(limits.reserve("m", 100), 50)
                clock.advance(60)
        finally:
            event.remove(runner.engine, "before_cursor_execute", counted)
        assert sweeps == 1
        [info] = runner.limits()
        assert info.requests == 1 + 40  # the last grant's call, and the open one's rows
