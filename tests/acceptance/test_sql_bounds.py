"""`runner sql` bounded for real: no function that writes, signals, sleeps or locks
(PostgreSQL, by allow-list), a timeout over the whole command (fetching included), and a
cap on a value and on a result, on both databases."""

from __future__ import annotations

import time

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from runner.cli import main
from runner.errors import QueryFailed
from runner.history import read_only_query
from runner.history.reader import MAX_RESULT_BYTES, MAX_VALUE_BYTES
from runner.sql.database import open_engine


def sql(url: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["sql", *args, "--db", url], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def refused(url: str, query: str, *args: str) -> str:
    code, out, err = sql(url, query, *args)
    assert (code, out) == (1, ""), (query, out, err)
    (line,) = err.strip().splitlines()
    return line


# Each would write (WAL, a sequence, a large object), signal, sleep, take a lock another
# session waits on (the migration's advisory lock), or change a setting.
FORBIDDEN = [
    "SELECT pg_logical_emit_message(false, 'x', repeat('y', 1000)) FROM generate_series(1, 5)",
    "SELECT pg_advisory_lock(1)",
    "SELECT pg_try_advisory_xact_lock(1)",
    "SELECT * FROM pg_sleep(0)",
    "SELECT x FROM (SELECT pg_sleep_for('0 second') AS x) AS s",
    "SELECT txid_current()",
    "SELECT pg_current_xact_id()",
    "SELECT pg_notify('runner', 'x')",
    "SELECT lo_create(0)",
    "SELECT set_config('work_mem', '1GB', true)",
    "SELECT pg_cancel_backend(pg_backend_pid())",
    'SELECT id FROM runs WHERE pg_catalog."pg_advisory_lock"(2) IS NOT NULL',
]


@pytest.mark.postgres
@pytest.mark.parametrize("query", FORBIDDEN)
def test_postgres_refuses_every_function_off_the_allow_list(
    postgres_database: str, query: str
) -> None:
    line = refused(postgres_database, query)
    assert line.startswith("Error: refused: runner sql is read-only"), line
    engine = open_engine(postgres_database)
    # No advisory lock is left held in this database (other databases on the server are
    # other tests' and their migrations' locks, in parallel).
    with engine.connect() as connection:
        held = connection.execute(
            text(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = "
                "(SELECT oid FROM pg_database WHERE datname = current_database())"
            )
        )
        assert held.scalar_one() == 0
    engine.dispose()


@pytest.mark.postgres
def test_postgres_allows_what_only_reads(postgres_database: str) -> None:
    code, out, err = sql(
        postgres_database,
        "SELECT 'pg_sleep(1)' AS said, random() < 2 AS r, now() IS NOT NULL AS n, "
        "clock_timestamp() IS NOT NULL AS c, upper('a') AS u, count(*) AS runs FROM runs",
        "--csv",
    )
    assert code == 0, err
    assert out.splitlines()[1].startswith("pg_sleep(1),true,true,true,A,")


def test_a_value_over_the_cap_stops_the_query(db_url: str) -> None:
    big = MAX_VALUE_BYTES + 1
    query = (
        # Not a constant the planner folds: its plan would carry the 16 MiB (the plan's
        # reading of such a constant is tests/unit/test_plan_tree.py's).
        f"SELECT repeat('y', n) AS a FROM (SELECT {big} AS n OFFSET 0) AS s"
        if db_url.startswith("postgresql")
        else "SELECT randomblob(9e8) AS a, randomblob(9e8) AS b"
    )
    line = refused(db_url, query, "--timeout", "0")
    assert "larger than runner sql gives, 16 MiB" in line, line
    code, out, _ = sql(db_url, "SELECT length(substr(upper('abc'), 1, 2)) AS n", "--csv")
    assert (code, out) == (0, "n\n2\n")


def test_a_doubling_recursive_query_stops_at_the_cap(db_url: str) -> None:
    doubling = (
        "WITH RECURSIVE r(x) AS (SELECT CAST('a' AS text) UNION ALL SELECT x || x FROM r) "
        "SELECT length(x) FROM r"
    )
    line = refused(db_url, doubling, "--timeout", "0")
    # SQLite stops at runner's cap; PostgreSQL's server at its own 1 GB, before any is sent.
    assert "larger than runner sql gives" in line or "memory alloc" in line, line


def test_a_result_over_the_cap_stops_the_query(db_url: str) -> None:
    rows = MAX_RESULT_BYTES // 1_000_000 + 2
    if db_url.startswith("postgresql"):
        query = f"SELECT repeat('z', 1000000) FROM generate_series(1, {rows})"
    else:
        query = (
            f"WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < {rows}) "
            "SELECT printf('%.*c', 1000000, 'z') FROM r"
        )
    line = refused(db_url, query, "--timeout", "0")
    assert "its result is larger than runner sql gives, 256 MiB" in line, line


def test_the_timeout_bounds_fetching_too(db_url: str) -> None:
    """Rows taken slowly after a quick first batch: the deadline counts the whole time."""
    query = _many_rows(db_url)
    with read_only_query(db_url, query, timeout=1.0) as result:
        first = next(result.rows)
        assert first == (1,)
        started = time.monotonic()
        while time.monotonic() - started < 1.0:  # the condition: the deadline has passed
            time.sleep(0.05)
        with pytest.raises(QueryFailed, match="ran longer than its timeout"):
            for _ in result.rows:
                pass


def _many_rows(db_url: str) -> str:
    if db_url.startswith("postgresql"):
        return "SELECT 1 AS n FROM generate_series(1, 100000)"
    return (
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 100000) "
        "SELECT 1 FROM r"
    )
