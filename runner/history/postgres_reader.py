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
4. Before it runs, it is planned (EXPLAIN, which runs nothing) and the planner's own tree
   is read (`debug_print_plan`, a LOG message to the client; see plan_tree.py): every
   function it names by oid, directly, through an operator or as an aggregate's step,
   must be one that cannot write, signal, sleep, lock or emit WAL. That is an allow-list
   by property: a function declared IMMUTABLE or STABLE (PostgreSQL's word that it
   changes nothing), less the few stable ones that assign a transaction id, plus a few
   harmless volatile ones of pg_catalog (random, clock_timestamp). pg_logical_emit_message,
   pg_advisory_lock, pg_sleep, pg_notify, nextval, lo_*, set_config, dblink and every
   other volatile function are refused before anything runs, whatever the role's grants
   (PUBLIC may execute most of them, and no grant can take that from one role). No SQL
   text is read back: a quoted alias or a literal cannot hide a call. The server's log
   keeps that LOG message unless the connecting role may set log_min_messages (a
   superuser: runner sets it for the transaction).
5. The rows come through a server-side cursor, a batch at a time: memory stays near a
   batch whatever the result's size, a value over MAX_VALUE_BYTES stops the query on the
   server (before it is sent), and the result stops at MAX_RESULT_BYTES. Each fetch runs
   with what is left of the timeout, and reading the plan's tree stops at it too, so the
   timeout bounds the whole command, the client's own work included.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from runner.errors import DatabaseUnavailable, QueryFailed
from runner.history import plan_tree
from runner.history.reader import (
    MAX_VALUE_BYTES,
    Bounds,
    QueryResult,
    failed,
    first_line,
    one_statement,
    read_only,
    streamed,
    timed_out,
    value_too_large,
)
from runner.sql.backend import pooled
from runner.sql.database import open_engine
from runner.sql.urls import redact_url

# As created by migration 0004.
READER_ROLE = "runner_reader"
READER_FUNCTION = "runner_read(text)"

_VOID = 2278  # pg_type oid of `void`, which a column definition list cannot name

# SQLSTATEs
_READ_ONLY_TRANSACTION = "25006"
_INSUFFICIENT_PRIVILEGE = "42501"
_QUERY_CANCELED = "57014"
_INVALID_TEXT = "22P02"

# Volatile functions a reader may call: they read a clock or a random source, nothing else.
_VOLATILE_ALLOWED = frozenset(
    {"random", "random_normal", "clock_timestamp", "timeofday", "gen_random_uuid"}
)
# Stable functions that write all the same: each assigns a transaction id (WAL).
_STABLE_DENIED = frozenset({"txid_current", "pg_current_xact_id"})
# The functions a plan calls, with those its operators and its aggregates' steps call,
# that a reader may not: volatile (less the harmless ones of pg_catalog), or denied.
_REFUSED = """
WITH direct(oid) AS (
    SELECT unnest(CAST(%(functions)s AS oid[]))
    UNION SELECT o.oprcode FROM pg_operator o WHERE o.oid = ANY(CAST(%(operators)s AS oid[]))
), called(oid) AS (
    SELECT oid FROM direct
    UNION SELECT unnest(ARRAY[
        a.aggtransfn::oid, a.aggfinalfn::oid, a.aggcombinefn::oid, a.aggserialfn::oid,
        a.aggdeserialfn::oid, a.aggmtransfn::oid, a.aggminvtransfn::oid, a.aggmfinalfn::oid
    ]) FROM pg_aggregate a JOIN direct d ON a.aggfnoid = d.oid
)
SELECT DISTINCT p.proname FROM called c JOIN pg_proc p ON p.oid = c.oid
WHERE (p.provolatile = 'v' AND NOT (
           p.pronamespace = 'pg_catalog'::regnamespace AND p.proname = ANY(%(allowed)s)))
   OR (p.pronamespace = 'pg_catalog'::regnamespace AND p.proname = ANY(%(denied)s))
ORDER BY 1
"""
_TOO_LARGE = "bytes: runner_sql_value_too_large"
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
    cursor: Any = None
    try:
        connection: Any = raw.driver_connection
        connection.rollback()
        if not pooled(engine):  # behind a pooler the session is not ours to set
            connection.autocommit = True
            connection.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
            connection.autocommit = False
        connection.read_only = True  # BEGIN READ ONLY
        bounds = Bounds(timeout)
        _become_reader(connection, timeout)
        names, types = _describe(connection, sql)
        _check_functions(connection, sql, bounds)
        query, argument = _through_reader(sql, types)
        cursor = connection.cursor(name="runner_sql")
        _run(cursor, query, argument, bounds)
        yield QueryResult(names, streamed(lambda: _batch(connection, cursor, bounds)))
    finally:
        # A query stopped mid-fetch leaves the transaction failed or a fetch cancelled:
        # the connection is dropped, not reset (nothing of it is kept or committed).
        with suppress(Exception):
            connection.close()
        if cursor is not None:
            with suppress(Exception):
                cursor.close()  # on a closed connection: marks it closed, sends nothing
        with suppress(Exception):
            raw.invalidate()
        engine.dispose()


def _become_reader(connection: Any, timeout: float | None) -> None:
    import psycopg

    milliseconds = 0 if not timeout else max(1, round(timeout * 1000))
    connection.execute(f"SET LOCAL statement_timeout = {milliseconds}")
    user = connection.info.user
    if connection.info.parameter_status("is_superuser") == "on":
        # The plan tree that _check_functions reads comes as a LOG message, which the
        # server's log keeps too; a role that may (not the reader) keeps it out.
        connection.execute("SET LOCAL log_min_messages = fatal")
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


def _check_functions(connection: Any, sql: str, bounds: Bounds) -> None:
    """Refuse a statement whose plan calls a function outside the reader's allow-list."""
    import psycopg

    dumps: list[str] = []

    def heard(diagnostic: Any) -> None:
        # The planner's tree comes as a LOG message "plan:", the tree in its detail.
        if diagnostic.severity_nonlocalized == "LOG" and diagnostic.message_primary == "plan:":
            dumps.append(diagnostic.message_detail or "")

    connection.add_notice_handler(heard)
    try:
        connection.execute("SET LOCAL client_min_messages = log")
        connection.execute("SET LOCAL debug_pretty_print = off")
        connection.execute("SET LOCAL debug_print_plan = on")
        connection.execute("EXPLAIN " + sql.rstrip().rstrip(";"))  # plans, runs nothing
        connection.execute("SET LOCAL debug_print_plan = off")
        connection.execute("SET LOCAL client_min_messages = notice")
    except psycopg.Error as exc:
        raise _refusal(exc.sqlstate or "", str(exc), bounds.timeout) from None
    finally:
        connection.remove_notice_handler(heard)
    if not dumps:
        raise read_only("the server did not show the statement's plan, which runner sql checks")
    found = plan_tree.Called()
    try:
        for dump in dumps:  # a function folded at planning time plans its own statements
            one = plan_tree.called(plan_tree.parse(dump, bounds.remaining), bounds.remaining)
            found.functions |= one.functions
            found.operators |= one.operators
    except ValueError:
        raise read_only(
            "the statement's plan could not be read, and runner sql checks it"
        ) from None
    try:
        refused = connection.execute(
            _REFUSED,
            {
                "functions": sorted(found.functions),
                "operators": sorted(found.operators),
                "allowed": sorted(_VOLATILE_ALLOWED),
                "denied": sorted(_STABLE_DENIED),
            },
        ).fetchall()
    except psycopg.Error as exc:
        raise _refusal(exc.sqlstate or "", str(exc), bounds.timeout) from None
    if refused:
        listed = ", ".join(f"{name}()" for (name,) in refused)
        raise read_only(f"it may call no function that can write, signal, sleep or lock: {listed}")


def _through_reader(sql: str, types: list[tuple[str, bool]]) -> tuple[str, str]:
    """The query that runs `sql` inside the reader's function, and the text it is given.

    A value over MAX_VALUE_BYTES stops the query on the server, before it is sent: the
    WHERE clause fails a cast that names the size (a CASE branch that depends on the row,
    so the planner cannot fold it away)."""
    columns = ", ".join(
        f'"c{i}" {"text" if void else spelled}' for i, (spelled, void) in enumerate(types)
    )
    sizes = ", ".join(_size_of(f'q."c{i}"', spelled) for i, (spelled, _) in enumerate(types))
    largest = f"GREATEST({sizes}, 0)"
    capped = (
        f" WHERE CASE WHEN {largest} > {MAX_VALUE_BYTES} THEN "
        f"CAST(CAST({largest} AS text) || ' {_TOO_LARGE}' AS int) > 0 ELSE true END"
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
    return f"SELECT * FROM runner_read(%s) AS q({columns}){capped}", sql


def _size_of(column: str, spelled: str) -> str:
    # octet_length reads a stored value's full size without decompressing it; what has no
    # octet_length is measured as it is held (pg_column_size).
    if spelled in ("text", "bytea", '"char"', "name") or spelled.startswith("character"):
        return f"octet_length({column})"
    if spelled == "json":
        return f"octet_length(CAST({column} AS text))"
    return f"pg_column_size({column})"


def _run(cursor: Any, query: str, sql: str, bounds: Bounds) -> None:
    import psycopg

    try:
        cursor.execute(query, [sql])
    except psycopg.Error as exc:
        raise _refusal(exc.sqlstate or "", str(exc), bounds.timeout) from None


def _batch(connection: Any, cursor: Any, bounds: Bounds) -> Sequence[Any]:
    import psycopg

    left = bounds.remaining()
    try:
        if left is not None:  # each FETCH is a statement: it gets what is left, no more
            connection.execute(f"SET LOCAL statement_timeout = {max(1, round(left * 1000))}")
        batch = list(cursor.fetchmany(bounds.rows))
    except psycopg.Error as exc:
        raise _refusal(exc.sqlstate or "", str(exc), bounds.timeout) from None
    return bounds.took(batch)


def _refusal(sqlstate: str, message: str, timeout: float | None) -> QueryFailed:
    detail = message.strip().splitlines()[0] if message.strip() else "error"
    if sqlstate == _QUERY_CANCELED and timeout:
        return timed_out(timeout)
    if sqlstate == _INVALID_TEXT and _TOO_LARGE in detail:
        size = re.search(r'"(\d+) ' + _TOO_LARGE, detail)
        return value_too_large(int(size.group(1)) if size else None)
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
