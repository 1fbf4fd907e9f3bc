"""runner.sql.libpq: `runner list` and `show` read PostgreSQL through libpq itself, and get
back the values psycopg would give (the plain reads decode them the same either way)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

from runner.sql import libpq, plain_connection
from runner.sql.reads import Reader

pytestmark = pytest.mark.postgres

# One value of every type the reads decode, with a NULL, a bind of each kind and a `%`.
TYPES = (
    "SELECT 1::int2 AS a, 2::int4 AS b, 3000000000::int8 AS c, 1.5::float4 AS d, "
    "2.25::float8 AS e, 2.50::numeric AS f, true AS g, false AS h, 'é x'::text AS i, "
    "'v'::varchar(3) AS j, json_build_object('k', 1, 'l', 'm') AS k, "
    "'[1, 2]'::jsonb AS l, TIMESTAMPTZ '2026-12-06 13:50:01.5+02' AS m, "
    "TIMESTAMP '2026-12-06 13:50:01' AS n, DATE '2026-12-06' AS o, NULL::text AS p, "
    "7 % 4 AS q, :word AS r, :number::int AS s, :when::timestamptz AS t"
)


def _arguments(url: str) -> dict[str, Any]:
    parsed = make_url(url)
    found = {
        "host": parsed.host, "port": parsed.port, "dbname": parsed.database,
        "user": parsed.username, "password": parsed.password,
    }  # fmt: skip
    return {key: value for key, value in found.items() if value is not None}


def test_values_come_back_as_psycopg_gives_them(postgres_database: str) -> None:
    arguments = _arguments(postgres_database)
    plain = libpq.connect(arguments)
    assert plain is not None, "libpq could not be loaded"
    other = psycopg.connect(**arguments, autocommit=True)
    from datetime import UTC, datetime

    binds = {"word": "it's", "number": 42, "when": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)}
    try:
        ours, theirs = Reader(plain).rows(TYPES, binds), Reader(other).rows(TYPES, binds)
    finally:
        plain.close()
        other.close()
    assert ours == theirs
    assert [type(v) for v in ours[0].values()] == [type(v) for v in theirs[0].values()]


def test_a_server_error_keeps_its_class_and_sqlstate(postgres_database: str) -> None:
    plain = libpq.connect(_arguments(postgres_database))
    assert plain is not None
    reader = Reader(plain)
    try:
        with pytest.raises(reader.errors) as caught:
            reader.rows("SELECT * FROM no_such_table")
    finally:
        plain.close()
    assert isinstance(caught.value, libpq.ProgrammingError)
    assert caught.value.sqlstate == "42P01"
    assert str(caught.value) == 'relation "no_such_table" does not exist'


def test_a_refused_connection_is_an_operational_error() -> None:
    with pytest.raises(libpq.OperationalError):
        libpq.connect({"host": "127.0.0.1", "port": 1, "dbname": "x", "connect_timeout": 2})


def test_without_libpq_or_iso_dates_the_reads_take_psycopg(
    postgres_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = postgres_database
    german = libpq.connect({**_arguments(url), "options": "-c DateStyle=German"})
    assert german is None  # its timestamps are not ISO: not read here
    reader = plain_connection.open_reader(url)
    assert reader is not None and isinstance(reader.connection, libpq.Connection)
    reader.close()
    monkeypatch.setattr(libpq, "_LIBRARY", False)  # as if no libpq could be loaded
    reader = plain_connection.open_reader(url)
    assert reader is not None and isinstance(reader.connection, psycopg.Connection)
    reader.close()
