"""`runner sql` on PostgreSQL: the statement runs as the reader role, whoever connects.

A READ ONLY transaction alone kept no superuser from `COPY ... TO PROGRAM`,
`pg_read_file`, dblink or `pg_terminate_backend`. So, inside a READ ONLY transaction with
a `statement_timeout`:

1. `SET LOCAL ROLE runner_reader` (migration 0004): SELECT on the documented tables and
   views, nothing else. A superuser may always take it; anyone else needs
   `GRANT runner_reader TO them`.
2. The statement is described (parsed, never run) to learn its columns: the server's
   parser accepts exactly one statement.
3. It runs inside `runner_read(query)`, a SECURITY DEFINER function owned by the role.
   SET LOCAL ROLE alone is not enough: a superuser's session may call
   `set_config('role', 'none', true)` in the middle of a query and be superuser again for
   the rest of it; inside a security-definer function PostgreSQL refuses that (and
   `session_authorization`).
4. The rows come through a server-side cursor, a batch at a time: memory stays flat
   whatever the result's size. (The function gathers its rows on the server first,
   spilling past `work_mem` to a temporary file, all within the timeout.)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from runner.errors import DatabaseUnavailable, QueryFailed
from runner.history.reader import (
    FETCH,
    QueryResult,
    failed,
    first_line,
    one_statement,
    read_only,
    streamed,
    timed_out,
)
from runner.store.database import open_engine
from runner.store.urls import redact_url

# As created by migration 0004.
READER_ROLE = "runner_reader"
READER_FUNCTION = "runner_read(text)"

_VOID = 2278  # pg_type oid of `void`, which a column definition list cannot name

# SQLSTATEs
_READ_ONLY_TRANSACTION = "25006"
_INSUFFICIENT_PRIVILEGE = "42501"
_QUERY_CANCELED = "57014"
_UNDEFINED_ROLE = "22023"  # SET ROLE of a role that does not exist: invalid_parameter_value

# One look at the role and the function before any query of the user's runs: the role must
# not have gained privileges a reader must not have (a member of another role, superuser,
# replication), and the function must be runner's own.
_CHECK = f"""
SELECT r.rolsuper OR r.rolreplication OR r.rolbypassrls OR r.rolcreaterole OR r.rolcreatedb
           OR EXISTS (SELECT FROM pg_auth_members m WHERE m.member = r.oid) AS overprivileged,
       f.oid IS NOT NULL AS has_function,
       COALESCE(f.prosecdef AND f.proowner = r.oid, false) AS function_is_ours
FROM pg_roles r
LEFT JOIN pg_proc f ON f.oid = to_regprocedure('{READER_FUNCTION}')
WHERE r.rolname = current_user
"""


@contextmanager
def read(url: str, sql: str, timeout: float | None) -> Iterator[QueryResult]:
    """Run one statement on PostgreSQL as the reader role, read-only, within `timeout`."""
    engine = open_engine(url, pool=False)
    if engine.dialect.driver != "psycopg":
        engine.dispose()
        raise DatabaseUnavailable("runner sql reads PostgreSQL through psycopg 3 only")
    try:
        raw = engine.raw_connection()
    except Exception as exc:
        engine.dispose()
        raise DatabaseUnavailable(
            f"cannot connect to {redact_url(url)}: {first_line(getattr(exc, 'orig', exc))}"
        ) from None
    try:
        connection: Any = raw.driver_connection
        connection.rollback()
        connection.autocommit = True
        connection.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
        connection.autocommit = False
        connection.read_only = True
        _become_reader(connection, timeout)
        names, types = _describe(connection, sql)
        query, argument = _through_reader(sql, types)
        with connection.cursor(name="runner_sql") as cursor:
            _run(cursor, query, argument, timeout)
            yield QueryResult(names, streamed(lambda: _batch(cursor, timeout)))
    finally:
        raw.close()  # rolled back and closed: the pool keeps no connection
        engine.dispose()


def _become_reader(connection: Any, timeout: float | None) -> None:
    import psycopg

    milliseconds = 0 if not timeout else max(1, round(timeout * 1000))
    connection.execute(f"SET LOCAL statement_timeout = {milliseconds}")
    user = connection.info.user
    try:
        connection.execute(f"SET LOCAL ROLE {READER_ROLE}")
    except psycopg.Error as exc:
        if exc.sqlstate == _UNDEFINED_ROLE:
            raise QueryFailed(
                f"refused: runner sql reads as the role {READER_ROLE}, which this server "
                "lacks: run `runner db upgrade` as a role that may create roles"
            ) from None
        raise QueryFailed(
            f"refused: runner sql reads as the role {READER_ROLE}, which {user} may not "
            f"take: ask an administrator to GRANT {READER_ROLE} TO {user}"
        ) from None
    # The first query of the transaction: it takes the snapshot, after which not even
    # set_config('transaction_read_only', 'off') could make the transaction writable.
    overprivileged, has_function, ours = connection.execute(_CHECK).fetchone()
    if overprivileged:
        raise QueryFailed(
            f"refused: the role {READER_ROLE} has more privileges than reading (it is a "
            "member of another role, or a superuser, or may replicate, create roles or "
            f"databases): an administrator must take them back before runner sql uses it"
        )
    if not has_function:
        raise QueryFailed(
            f"this database has no {READER_FUNCTION} function, which runner sql needs: "
            "run `runner db upgrade` (with the same --db) first"
        )
    if not ours:
        raise QueryFailed(
            f"refused: {READER_FUNCTION} must be a SECURITY DEFINER function owned by "
            f"{READER_ROLE}, as migration 0004 creates it"
        )


def _describe(connection: Any, sql: str) -> tuple[list[str], list[tuple[str, bool]]]:
    """The statement's column names, and each column's type (and whether it is void).

    The statement is only parsed and described here, through libpq (the unnamed prepared
    statement): nothing of it runs outside the reader's function.
    """
    import psycopg
    from psycopg.pq import DiagnosticField, ExecStatus

    encoding = connection.info.encoding
    pgconn = connection.pgconn
    described = pgconn.prepare(b"", sql.encode(encoding))
    if described.status == ExecStatus.COMMAND_OK:
        described = pgconn.describe_prepared(b"")
    if described.status != ExecStatus.COMMAND_OK:
        sqlstate = (described.error_field(DiagnosticField.SQLSTATE) or b"").decode()
        message = (described.error_message or b"").decode(encoding, "replace")
        raise _refusal(sqlstate, message, None)
    count = described.nfields
    if count == 0:
        raise read_only("it runs statements that return rows; this one returns none")
    names = [(described.fname(i) or b"").decode(encoding) for i in range(count)]
    oids = [described.ftype(i) for i in range(count)]
    modifiers = [described.fmod(i) for i in range(count)]
    try:
        spelled = connection.execute(
            "SELECT format_type(t, m) FROM unnest(%s::oid[], %s::int4[]) WITH ORDINALITY"
            " AS c(t, m, i) ORDER BY i",
            [oids, modifiers],
        ).fetchall()
    except psycopg.Error as exc:
        raise _refusal(exc.sqlstate or "", str(exc), None) from None
    return names, [(row[0], oid == _VOID) for row, oid in zip(spelled, oids, strict=True)]


def _through_reader(sql: str, types: list[tuple[str, bool]]) -> tuple[str, str]:
    """The query that runs `sql` inside the reader's function, and the text it is given."""
    columns = ", ".join(
        f'"c{i}" {"text" if void else spelled}' for i, (spelled, void) in enumerate(types)
    )
    if any(void for _, void in types):
        # A column definition list cannot name `void` (SELECT pg_sleep(1)): the statement
        # runs as a subquery whose void columns read as NULL text. Its volatile calls are
        # still made: PostgreSQL never drops a volatile output column of a subquery.
        aliases = ", ".join(f'"c{i}"' for i in range(len(types)))
        picks = ", ".join(
            "CAST(NULL AS text)" if void else f'q."c{i}"' for i, (_, void) in enumerate(types)
        )
        sql = f"SELECT {picks} FROM (\n{sql.rstrip().rstrip(';')}\n) AS q({aliases})"
    return f"SELECT * FROM runner_read(%s) AS q({columns})", sql


def _run(cursor: Any, query: str, sql: str, timeout: float | None) -> None:
    import psycopg

    try:
        cursor.execute(query, [sql])
    except psycopg.Error as exc:
        raise _refusal(exc.sqlstate or "", str(exc), timeout) from None


def _batch(cursor: Any, timeout: float | None) -> list[Any]:
    import psycopg

    try:
        return list(cursor.fetchmany(FETCH))
    except psycopg.Error as exc:
        raise _refusal(exc.sqlstate or "", str(exc), timeout) from None


def _refusal(sqlstate: str, message: str, timeout: float | None) -> QueryFailed:
    detail = message.strip().splitlines()[0] if message.strip() else "error"
    if sqlstate == _QUERY_CANCELED and timeout:
        return timed_out(timeout)
    if sqlstate == _READ_ONLY_TRANSACTION:
        return read_only(detail)
    if sqlstate == _INSUFFICIENT_PRIVILEGE:
        return QueryFailed(
            f"refused: runner sql reads as {READER_ROLE}, which may only read runner's "
            f"tables and views ({detail})"
        )
    if "multiple commands" in detail:  # PostgreSQL's words for a second statement
        return one_statement()
    return failed(RuntimeError(detail))
