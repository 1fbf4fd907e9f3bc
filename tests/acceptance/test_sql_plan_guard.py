"""`runner sql` on PostgreSQL reads the planner's tree, not SQL text: a quoted alias cannot
hide a call, a call through an operator is seen, and a huge constant costs the client no
more than its length (issue 40, point 10)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from runner.cli import main
from runner.sql.database import open_engine

RUNNER = Path(sys.executable).parent / "runner"


def refused(url: str, query: str, *args: str) -> str:
    result = CliRunner().invoke(main, ["sql", query, *args, "--db", url], catch_exceptions=False)
    assert (result.exit_code, result.stdout) == (1, ""), (query, result.stdout, result.stderr)
    (line,) = result.stderr.strip().splitlines()
    return line


# A table alias holding an apostrophe once opened a "literal" in the plan's text that ran
# past the call after it: each of these ran, where the same call without the alias was
# refused. One row, so that the filter and the output are evaluated.
ALIASED = [
    """SELECT "it's".id FROM runs AS "it's" WHERE "it's".id <> pg_sleep(0.2)::text""",
    """SELECT "it's".id FROM runs AS "it's" WHERE "it's".id <> pg_advisory_lock(40)::text""",
    """SELECT "it's".id FROM runs AS "it's" """
    """WHERE "it's".id <> pg_logical_emit_message(false, 'p40', 'x')::text""",
]


@pytest.fixture
def one_run(postgres_database: str) -> str:
    """The session's PostgreSQL database with one run in `runs`."""
    engine = open_engine(postgres_database)
    with engine.begin() as connection:
        connection.execute(text("TRUNCATE runs, entries CASCADE"))
        connection.execute(
            text(
                "INSERT INTO runs (id, task, budgets, status, output_format, wrapped_up, steps,"
                " tokens, cost, resumes, stalled_resumes, progress_seq, cancel_requested,"
                " lease_epoch, created_at, updated_at) VALUES ('a', 't', '{}', 'queued',"
                " 'text', false, 0, 0, 0, 0, 0, 0, false, 0, now(), now())"
            )
        )
    engine.dispose()
    return postgres_database


@pytest.mark.postgres
@pytest.mark.parametrize("query", ALIASED)
def test_a_quoted_alias_hides_no_call(one_run: str, query: str) -> None:
    line = refused(one_run, query)
    assert line.startswith("Error: refused: runner sql is read-only"), line
    assert "pg_" in line


@pytest.fixture
def volatile_operator(postgres_database: str) -> Iterator[str]:
    """An operator whose function takes an advisory lock: a query shows only `1 <op> 2`."""
    name = f"p40_lock_{uuid.uuid4().hex[:8]}"
    engine = open_engine(postgres_database)
    with engine.begin() as connection:
        connection.execute(
            text(
                f"CREATE FUNCTION {name}(int, int) RETURNS boolean LANGUAGE plpgsql VOLATILE "
                "AS 'BEGIN PERFORM pg_advisory_lock(41); RETURN true; END'"
            )
        )
        connection.execute(
            text(f"CREATE OPERATOR ###~ (LEFTARG = int, RIGHTARG = int, FUNCTION = {name})")
        )
    try:
        yield name
    finally:
        with engine.begin() as connection:
            connection.execute(text(f"DROP FUNCTION {name}(int, int) CASCADE"))
        engine.dispose()


@pytest.mark.postgres
def test_a_volatile_function_behind_an_operator_is_refused(
    postgres_database: str, volatile_operator: str
) -> None:
    line = refused(postgres_database, "SELECT 1 ###~ 2 AS locked")
    assert line.startswith("Error: refused: runner sql is read-only"), line
    assert f"{volatile_operator}()" in line


@pytest.mark.postgres
def test_a_long_folded_constant_costs_the_client_little(one_run: str) -> None:
    """40,000 letters folded into the plan, behind the alias trick: the old text scan took
    about a second of the client's CPU per 100 letters squared (minutes here); reading the
    tree is linear, and the command ends, answered, within its --timeout of 3 s."""
    query = """SELECT "it's".id FROM runs AS "it's" WHERE "it's".id <> repeat('b', 40000)"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNER_")}
    before = _children_cpu_seconds()
    child = subprocess.Popen(
        [str(RUNNER), "sql", query, "--timeout", "3", "--csv", "--db", one_run],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        out, err = child.communicate(timeout=600)  # a hang fails here, not the suite
    finally:
        child.kill()
    assert (child.returncode, out) == (0, "id\na\n"), err
    used = _children_cpu_seconds() - before
    # Start-up (imports, a connection) is about a second of CPU; the old scan took 30+.
    assert used < 15, f"the client used {used:.1f} s of CPU"


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # of the children waited for
    return usage.ru_utime + usage.ru_stime
