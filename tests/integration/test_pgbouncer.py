"""Every feature through PgBouncer in transaction pooling mode, its server given as the
direct URL (RUNNER_DIRECT_DATABASE_URL) for what needs a session of its own (LISTEN).

Each test here is an existing test of the feature, run again with the pooled URL: runs,
resumes and cancels, takeovers and fencing, provider limits, tree budgets and sub-agents,
follows and wake-ups, `runner sql`. Transactions here may run on any of the pooler's
server sessions, so a prepared statement or a session setting would break them (psycopg
prepares a statement on its fifth run; PgBouncer 1.18 refuses a startup's `options`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from runner import Runner
from runner.cli import main
from runner.defaults import DIRECT_URL_VARIABLE
from runner.sql.backend import pooled
from runner.sql.database import open_engine
from runner.sql.wakeup import Wakeup
from tests.conftest import fresh_database
from tests.servers import Pooled

from . import (
    test_durable_runs,
    test_follows,
    test_leases,
    test_limits,
    test_sub_agents,
    test_tree_budget,
)
from .agents import shop

pytestmark = pytest.mark.postgres


@pytest.fixture
def pooled_url(
    request: pytest.FixtureRequest,
    pgbouncer: Pooled,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[str]:
    """The session's database emptied, through PgBouncer, its server the direct URL."""
    for _ in fresh_database(request, "postgres", tmp_path):
        pass
    monkeypatch.setenv(DIRECT_URL_VARIABLE, pgbouncer.direct)
    yield pgbouncer.url


def test_the_engine_knows_it_is_pooled(pooled_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = open_engine(pooled_url)
    try:
        assert pooled(engine)
        with engine.connect() as connection:
            # Many runs of one statement: none is prepared (psycopg would at the fifth).
            for _ in range(8):
                connection.execute(text("SELECT count(*) FROM runs")).scalar_one()
    finally:
        engine.dispose()
    monkeypatch.delenv(DIRECT_URL_VARIABLE)
    refused = Runner.__new__(Runner)
    with pytest.raises(Exception, match="unsupported startup parameter: options"):
        refused.__init__(pooled_url)  # type: ignore[misc]


# Runs, resumes and cancels; takeovers and fencing; provider limits; tree budgets and
# sub-agents; follows woken by the direct listener.
CASES = [
    test_durable_runs.test_the_transcript_details_survive_the_database,
    test_durable_runs.test_run_resumes_an_unfinished_run_with_that_id,
    test_durable_runs.test_cancel_from_another_runner_stops_the_run_before_its_next_step,
    test_leases.test_steal_takes_over_and_the_old_holder_is_fenced,
    test_leases.test_a_worker_takes_a_dead_local_workers_run_at_once,
    test_limits.test_two_workers_racing_for_the_last_tokens,
    test_limits.test_a_run_waiting_for_a_slot_is_woken_by_a_call_s_end_not_by_the_clock,
    test_tree_budget.test_a_call_that_would_start_after_a_siblings_crossing_is_not_made,
    test_sub_agents.test_the_roots_spend_is_the_sum_of_the_trees,
    test_follows.test_an_async_follower_is_woken_by_the_watcher,
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.__name__.removeprefix("test_"))
def test_through_pgbouncer(case: Callable[[str], None], pooled_url: str) -> None:
    case(pooled_url)


def test_workers_are_woken_by_notify_through_the_pooler(pooled_url: str) -> None:
    woken = threading.Event()
    with Runner(pooled_url) as runner, Wakeup(runner.engine, woken) as wakeup:
        assert wakeup.listening.wait(30)
        with runner.engine.connect() as connection:
            # The LISTEN is on the server itself, not on one of the pooler's sessions.
            where = connection.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN runner_wake%'"
                    " AND datname = current_database() AND application_name = ''"
                    " AND client_port IS NOT NULL"
                )
            ).scalar_one()
        assert where >= 1
        woken.clear()
        runner.submit(shop, "refund", id="bg")  # its NOTIFY goes through the pooler
        assert woken.wait(30)


def test_runner_sql_list_and_show_read_through_the_pooler(pooled_url: str) -> None:
    with Runner(pooled_url) as runner:
        runner.submit(shop, "refund", id="one")
    for args in (["list"], ["show", "one"]):  # libpq's unnamed statements (runner.sql.libpq)
        done = CliRunner().invoke(main, [*args, "--db", pooled_url])
        assert done.exit_code == 0 and "one" in done.output, done.output
    for _ in range(3):
        done = CliRunner().invoke(
            main, ["sql", "SELECT count(*) AS n FROM runs", "--db", pooled_url]
        )
        assert done.exit_code == 0, done.output
        assert "1" in done.output
    # The pooler's server sessions still take writes. (A session setting runner sql made
    # would be left only on a session the pooler gave another client between its SET and
    # its BEGIN, which a test cannot arrange: `runner sql` sets none behind a pooler.)
    engine = open_engine(pooled_url)
    try:
        for i in range(25):
            with engine.begin() as connection:
                connection.execute(text("UPDATE runs SET priority = :p"), {"p": i})
    finally:
        engine.dispose()
