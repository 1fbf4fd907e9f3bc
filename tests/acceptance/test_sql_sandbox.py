"""`runner sql` is read-only for everybody, the PostgreSQL superuser included: each attack of
the issue is refused in one line with exit code 1 and has no effect; a query stops at its
timeout; results stream; on SQLite an authorizer refuses ATTACH, VACUUM and every write.

The test server's URL is the superuser's (as the README's is), so every PostgreSQL attack
here runs with the most privileges a connection can have.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import make_url

from runner.cli import main
from runner.sql.database import downgrade, open_engine, upgrade
from runner.sql.schema import runs

RUNNER = Path(sys.executable).parent / "runner"


def sql(url: str, *args: str) -> tuple[int, str, str]:
    """`runner sql ARGS --db URL` in this process: exit code, stdout, stderr."""
    result = CliRunner().invoke(main, ["sql", *args, "--db", url], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def refused(url: str, query: str, *args: str) -> str:
    """Run `query`, check it was refused in one line with exit 1; that line."""
    code, out, err = sql(url, query, *args)
    assert code == 1, (query, out, err)
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    assert "Traceback" not in err
    return lines[0]


def _psycopg(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _run_count(url: str) -> int:
    engine = open_engine(url)
    try:
        with engine.connect() as connection:
            return int(connection.execute(select(func.count()).select_from(runs)).scalar_one())
    finally:
        engine.dispose()


@pytest.fixture
def pg(postgres_database: str) -> str:
    """The session's PostgreSQL database, emptied, with one run in it."""
    engine = open_engine(postgres_database)
    with engine.begin() as connection:
        connection.execute(text("TRUNCATE runs, entries CASCADE"))
        connection.execute(
            text(
                "INSERT INTO runs (id, task, budgets, status, output_format, wrapped_up, steps,"
                " tokens, cost, resumes, stalled_resumes, progress_seq, cancel_requested,"
                " lease_epoch, created_at, updated_at) VALUES ('kept', 't', '{}', 'queued',"
                " 'text', false, 0, 0, 0, 0, 0, 0, false, 0, now(), now())"
            )
        )
    engine.dispose()
    return postgres_database


def _server_file(name: str) -> Path:
    # The server runs on this machine (127.0.0.1): a file it would write shows up here.
    return Path("/tmp") / f"runner-test-{name}-{uuid.uuid4().hex[:10]}"


# -- PostgreSQL: the attacks of the issue, as the superuser ---------------------------------


@pytest.mark.postgres
def test_copy_to_program_runs_nothing(pg: str) -> None:
    witness = _server_file("program")
    line = refused(pg, f"COPY (SELECT 1) TO PROGRAM 'touch {witness}'")
    assert "refused" in line
    assert not witness.exists()


@pytest.mark.postgres
def test_copy_to_a_server_file_writes_nothing(pg: str) -> None:
    witness = _server_file("copy")
    refused(pg, f"COPY runs TO '{witness}'")
    refused(pg, f"COPY (SELECT * FROM runs) TO '{witness}'")
    assert not witness.exists()


@pytest.mark.postgres
@pytest.mark.parametrize(
    "query",
    [
        "SELECT pg_read_file('/etc/hostname')",
        "SELECT pg_ls_dir('.')",
        "SELECT * FROM pg_ls_dir('/')",
        "SELECT rolpassword FROM pg_authid",
        "SELECT * FROM alembic_version",  # not a documented table
        "SELECT lo_import('/etc/hostname')",
    ],
)
def test_server_files_and_secrets_are_out_of_reach(pg: str, query: str) -> None:
    assert "refused" in refused(pg, query)


@pytest.fixture
def other_connection(pg: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """Another client of the server, as a worker would be."""
    with psycopg.connect(_psycopg(pg), autocommit=True) as connection:
        yield connection


def _alive(connection: psycopg.Connection[tuple[object, ...]]) -> bool:
    try:
        connection.execute("SELECT 1")
    except psycopg.OperationalError:
        return False
    return True


@pytest.mark.postgres
@pytest.mark.parametrize(
    "template",
    [
        "SELECT pg_terminate_backend({pid})",
        "SELECT pg_cancel_backend({pid})",
        # A superuser's session may take its role back mid-query, unless it runs where
        # PostgreSQL forbids that (inside a security-definer function).
        "SELECT set_config('role', 'none', true), pg_terminate_backend({pid})",
        "SELECT set_config('session_authorization', 'postgres', true), pg_terminate_backend({pid})",
        "DO $$BEGIN PERFORM pg_terminate_backend({pid}); END$$",
        "RESET ROLE",
        "SET ROLE postgres",
    ],
)
def test_another_connection_cannot_be_terminated(
    pg: str, other_connection: psycopg.Connection[tuple[object, ...]], template: str
) -> None:
    refused(pg, template.format(pid=other_connection.info.backend_pid))
    assert _alive(other_connection)


@pytest.mark.postgres
def test_no_replication_slot_is_created(pg: str) -> None:
    slot = f"runner_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(pg, isolation_level="AUTOCOMMIT")
    try:
        refused(pg, f"SELECT pg_create_physical_replication_slot('{slot}', true)")
        refused(pg, f"SELECT * FROM pg_create_logical_replication_slot('{slot}', 'test_decoding')")
        escape = "SELECT set_config('role', 'none', true), "
        refused(pg, f"{escape}pg_create_physical_replication_slot('{slot}')")
        with admin.connect() as connection:
            found = connection.execute(
                text("SELECT count(*) FROM pg_replication_slots WHERE slot_name = :s"), {"s": slot}
            ).scalar_one()
        assert found == 0
    finally:
        # A slot left behind would keep WAL on the server for ever: drop it if one was made.
        with admin.connect() as connection:
            connection.execute(
                text(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                    "WHERE slot_name = :s"
                ),
                {"s": slot},
            )
        admin.dispose()


@pytest.mark.postgres
def test_dblink_cannot_delete_a_run(pg: str) -> None:
    admin = create_engine(pg, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            available = connection.execute(
                text("SELECT count(*) FROM pg_available_extensions WHERE name = 'dblink'")
            ).scalar_one()
            if not available:
                pytest.skip("the dblink extension is not installed on this server")
            connection.execute(text("CREATE EXTENSION IF NOT EXISTS dblink"))
        target = make_url(pg)
        where = (
            f"host={target.host} port={target.port or 5432} dbname={target.database} "
            f"user={target.username}"
        )
        for query in (
            f"SELECT dblink_exec('{where}', 'DELETE FROM runs')",
            f"SELECT set_config('role', 'none', true), dblink_exec('{where}', 'DELETE FROM runs')",
        ):
            refused(pg, query)
            assert _run_count(pg) == 1
    finally:
        with admin.connect() as connection:
            connection.execute(text("DROP EXTENSION IF EXISTS dblink"))
        admin.dispose()


@pytest.mark.postgres
def test_reading_the_documented_tables_and_views_still_works(pg: str) -> None:
    for name in ("runs", "entries", "run_summary", "tool_calls"):
        code, out, err = sql(pg, f"SELECT count(*) AS n FROM {name}", "--json")
        assert code == 0, err
    code, out, err = sql(pg, "SELECT id, current_user AS reader FROM runs", "--csv")
    assert (code, out) == (0, "id,reader\nkept,runner_reader\n"), err


@pytest.mark.postgres
def test_the_statement_runs_in_a_read_only_transaction(pg: str) -> None:
    """Issue 29: the reader role and the rollback stop writes even in a writable
    transaction, so only the setting itself shows that the transaction is READ ONLY."""
    code, out, err = sql(pg, "SELECT current_setting('transaction_read_only') AS ro", "--csv")
    assert (code, out) == (0, "ro\non\n"), err


# -- PostgreSQL: who may read ---------------------------------------------------------------


@pytest.fixture
def ordinary_user(pg: str) -> Iterator[tuple[str, str]]:
    """A login role with no privileges of its own (the server trusts local connections)."""
    name = f"runner_test_user_{uuid.uuid4().hex[:8]}"
    admin = create_engine(pg, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f"CREATE ROLE {name} LOGIN"))
    try:
        yield name, make_url(pg).set(username=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f"DROP ROLE IF EXISTS {name}"))
        admin.dispose()


@pytest.mark.postgres
def test_an_ordinary_user_needs_the_reader_role(pg: str, ordinary_user: tuple[str, str]) -> None:
    name, url = ordinary_user
    line = refused(url, "SELECT count(*) FROM runs")
    assert f"GRANT runner_reader TO {name}" in line
    admin = create_engine(pg, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f"GRANT runner_reader TO {name}"))
        code, out, err = sql(url, "SELECT count(*) AS n FROM runs", "--csv")
        assert (code, out) == (0, "n\n1\n"), err
        refused(url, "SELECT * FROM alembic_version")
    finally:
        with admin.connect() as connection:
            connection.execute(text(f"REVOKE runner_reader FROM {name}"))
        admin.dispose()


@pytest.mark.postgres
def test_a_database_without_the_reader_function_says_to_upgrade(empty_postgres: str) -> None:
    engine = open_engine(empty_postgres)
    try:
        upgrade(engine)
        downgrade(engine, "0003")
    finally:
        engine.dispose()
    assert "runner db upgrade" in refused(empty_postgres, "SELECT 1")


@pytest.fixture
def empty_postgres(postgres_database: str) -> Iterator[str]:
    admin = create_engine(postgres_database, isolation_level="AUTOCOMMIT")
    name = f"runner_sandbox_{uuid.uuid4().hex[:10]}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(postgres_database).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


# -- timeouts -------------------------------------------------------------------------------


def _sql_process(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNER_")}
    return subprocess.run(
        [str(RUNNER), "sql", *args, "--db", url],
        capture_output=True,
        text=True,
        timeout=60,  # a query that never stops fails the test here instead of hanging it
        env=env,
    )


def _stopped_by_the_timeout(
    done: subprocess.CompletedProcess[str], *, printed: bool = False
) -> None:
    """Stopped in one line; with nothing printed unless rows came before the timeout."""
    assert done.returncode == 1, done.stderr
    assert printed or done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert line == "Error: query stopped: it ran longer than its timeout, 0.5 s (--timeout)"


@pytest.mark.postgres
def test_a_sleeping_query_is_refused_before_it_runs(pg: str) -> None:
    code, out, err = sql(pg, "SELECT pg_sleep(10)", "--timeout", "0")
    assert (code, out) == (1, "") and "pg_sleep()" in err, err


ENDLESS = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"


def test_an_endless_recursive_query_stops_at_the_timeout(db_url: str) -> None:
    for args in ((), ("--json",)):  # laid out whole, and streamed
        _stopped_by_the_timeout(_sql_process(db_url, ENDLESS, *args, "--timeout", "0.5"))


def test_endless_rows_stop_at_the_timeout(db_url: str) -> None:
    # Streamed: on SQLite the rows found before the timeout are printed; PostgreSQL's
    # function gathers them first, and prints none.
    endless_rows = ENDLESS.replace("count(*) FROM r", "n FROM r WHERE n % 100000 = 0")
    done = _sql_process(db_url, endless_rows, "--csv", "--timeout", "0.5")
    _stopped_by_the_timeout(done, printed=True)


def test_the_timeout_has_a_default_and_can_be_turned_off(db_url: str) -> None:
    shown = " ".join(CliRunner().invoke(main, ["sql", "--help"]).output.split())
    assert "--timeout SECONDS" in shown and "[default: 30.0; x>=0]" in shown
    code, out, err = sql(db_url, "SELECT 1 AS one", "--timeout", "0", "--csv")
    assert (code, out) == (0, "one\n1\n"), err
    bad = CliRunner().invoke(main, ["sql", "SELECT 1", "--timeout", "-1"])
    assert bad.exit_code == 2


# -- streaming ------------------------------------------------------------------------------

ROWS_QUERY = {
    "sqlite": (
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < {n}) "
        "SELECT n, hex(zeroblob(500)) AS pad FROM r"
    ),
    "postgresql": "SELECT n, repeat('0', 1000) AS pad FROM generate_series(1, {n}) AS n",
}


def _peak_memory_mb(url: str, rows: int, output: str) -> float:
    """The peak resident memory of a `runner sql` process printing `rows` rows of 1 KB."""
    query = ROWS_QUERY[make_url(url).get_backend_name()].format(n=rows)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNER_")}
    with open(os.devnull, "w") as sink:
        process = subprocess.Popen(
            [str(RUNNER), "sql", query, output, "--db", url],
            stdout=sink,
            stderr=subprocess.PIPE,
            env=env,
        )
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        assert process.stderr is not None
        errors = process.stderr.read().decode()
        process.stderr.close()
    assert process.returncode == 0, errors
    return usage.ru_maxrss / 1024  # kilobytes on Linux


@pytest.mark.parametrize("output", ["--csv", "--json"])
def test_memory_does_not_grow_with_the_result(db_url: str, output: str) -> None:
    # 5 MB of rows, then 50 MB: a buffered result (PostgreSQL's client cursor held all of it)
    # costs at least 45 MB more for the second.
    small = _peak_memory_mb(db_url, 5_000, output)
    large = _peak_memory_mb(db_url, 50_000, output)
    assert large - small < 20, (small, large)


# -- SQLite: the authorizer -----------------------------------------------------------------


@pytest.fixture
def lite(tmp_path: Path) -> str:
    """A migrated SQLite file (the authorizer is SQLite's alone)."""
    url = f"sqlite:///{tmp_path / 'runner.db'}"
    engine = open_engine(url)
    upgrade(engine)
    engine.dispose()
    return url


def test_attach_and_vacuum_into_create_no_file(lite: str, tmp_path: Path) -> None:
    for query, path in [
        ("ATTACH '{path}' AS other", tmp_path / "attached.db"),
        ("VACUUM INTO '{path}'", tmp_path / "copy.db"),
    ]:
        line = refused(lite, query.format(path=path))
        assert line.startswith("Error: refused: runner sql is read-only"), line
        assert not path.exists()
    refused(lite, "VACUUM")


@pytest.mark.parametrize(
    "query",
    [
        "CREATE TEMP TABLE scratch (x)",  # a read-only file still took temporary tables
        "CREATE TEMP VIEW v AS SELECT 1",
        "INSERT INTO runs (id) VALUES ('x')",
        "UPDATE runs SET task = ''",
        "DELETE FROM entries",
        "DROP VIEW run_summary",
        "PRAGMA user_version = 7",
        "PRAGMA journal_mode = DELETE",
        "SELECT load_extension('/tmp/nothing')",
        "BEGIN",
        "SAVEPOINT keep",
        "ANALYZE",
        "DETACH main",
        # SQLite asks to write the schema table when a table-valued PRAGMA function is
        # used: PRAGMA table_info(entries) reads the same columns.
        "SELECT name FROM pragma_table_info('entries')",
    ],
)
def test_every_write_is_refused(lite: str, query: str) -> None:
    line = refused(lite, query)
    assert line.startswith("Error: refused: runner sql is read-only"), line


@pytest.mark.parametrize(
    "query",
    [
        "PRAGMA table_info(runs)",
        "PRAGMA user_version",
        "SELECT json_extract('{\"a\": 1}', '$.a') AS a",
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) "
        "SELECT n FROM r",
        "SELECT count(*) AS n FROM run_summary",
    ],
)
def test_reads_are_allowed(lite: str, query: str) -> None:
    code, out, err = sql(lite, query)
    assert code == 0, err
    assert out.strip() and "(0 rows)" not in out
