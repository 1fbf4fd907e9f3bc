"""PostgreSQL's client library, libpq, through ctypes: a connection for `runner list` and
`show` that loads no psycopg.

Importing psycopg costs about 110 ms of CPU (its errors module, asyncio, its adapters),
six times the interpreter's own start-up, against about 6 ms to load libpq and connect
here. These commands run a few plain SELECTs on one connection, so this module keeps only
what they need of DB-API: `cursor().execute` with psycopg's `%(name)s` binds (sent as
`$n` parameters in text), `description`, `fetchmany`, and values decoded by their type as
psycopg decodes them (integers, floats, numerics, booleans, text, `json`, timestamps).

`connect` gives None (and the caller takes psycopg's path) where libpq cannot be loaded,
or the server's DateStyle is not ISO (then its timestamps are not read here). The library
is the system's (`libpq.so.5`) or the one psycopg's binary wheel carries.
"""

from __future__ import annotations

import ctypes
import json
import re
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

# PQstatus's CONNECTION_OK; PQresultStatus's PGRES_COMMAND_OK and PGRES_TUPLES_OK.
_CONNECTION_OK = 0
_COMMAND_OK = 1
_TUPLES_OK = 2
# PQresultErrorField's PG_DIAG_SQLSTATE ('C') and PG_DIAG_MESSAGE_PRIMARY ('M'): the
# message alone, as psycopg words an error (not libpq's "ERROR:  ..." with its LINE and HINT).
_SQLSTATE = ord("C")
_PRIMARY = ord("M")
_BIND = re.compile(r"%\((\w+)\)s|%%")


class Error(Exception):
    """A libpq error: the server's message, and its SQLSTATE where it gave one."""

    def __init__(self, message: str, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


# Named as DB-API's classes, so that SQLAlchemy's DBAPIError.instance wraps each as the
# class an engine's connection would raise (runner.sql.reads `database_error`).
class DatabaseError(Error):
    pass


class OperationalError(DatabaseError):
    pass


class ProgrammingError(DatabaseError):
    pass


def _error(message: bytes | None, sqlstate: bytes | None) -> Error:
    text = (message or b"").decode("utf-8", "replace").strip() or "libpq failed"
    state = sqlstate.decode() if sqlstate else None
    if state is None or state[:2] in ("08", "53", "57", "58"):
        return OperationalError(text, state)
    if state[:2] == "42":
        return ProgrammingError(text, state)
    return DatabaseError(text, state)


_LIBRARY: Any = None


def _library() -> Any:
    """libpq, loaded once, its functions typed; None where it cannot be found."""
    global _LIBRARY
    if _LIBRARY is None:
        _LIBRARY = _load() or False
    return _LIBRARY or None


def _candidates() -> list[str]:
    found = ["libpq.so.5", "libpq.5.dylib"]
    from importlib.util import find_spec

    try:  # psycopg's binary wheel keeps its own copy beside its package
        spec = find_spec("psycopg_binary")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        folder = Path(spec.origin).parent.parent / "psycopg_binary.libs"
        found += sorted(str(path) for path in folder.glob("libpq*.so*"))
    return found


def _load() -> Any:
    for name in _candidates():
        try:
            library = ctypes.CDLL(name)
        except OSError:
            continue
        return _typed(library)
    return None


def _typed(library: Any) -> Any:
    pointer, text, number = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
    texts = ctypes.POINTER(ctypes.c_char_p)
    signatures: dict[str, tuple[list[Any], Any]] = {
        "PQconnectdbParams": ([texts, texts, number], pointer),
        "PQstatus": ([pointer], number),
        "PQerrorMessage": ([pointer], text),
        "PQparameterStatus": ([pointer, text], text),
        "PQfinish": ([pointer], None),
        "PQexecParams": (
            [pointer, text, number, pointer, texts, pointer, pointer, number],
            pointer,
        ),
        "PQresultStatus": ([pointer], number),
        "PQresultErrorMessage": ([pointer], text),
        "PQresultErrorField": ([pointer, number], text),
        "PQntuples": ([pointer], number),
        "PQnfields": ([pointer], number),
        "PQfname": ([pointer, number], text),
        "PQftype": ([pointer, number], ctypes.c_uint),
        "PQgetisnull": ([pointer, number, number], number),
        "PQgetvalue": ([pointer, number, number], ctypes.c_void_p),
        "PQgetlength": ([pointer, number, number], number),
        "PQclear": ([pointer], None),
    }
    for name, (arguments, result) in signatures.items():
        function = getattr(library, name)
        function.argtypes, function.restype = arguments, result
    return library


def connect(arguments: Mapping[str, Any]) -> Connection | None:
    """A connection with libpq's keywords `arguments` (host, port, dbname, user, password,
    and a URL's own query parameters); None where this module cannot serve (see above).
    Raises OperationalError when the server refuses or cannot be reached."""
    library = _library()
    if library is None:
        return None
    settings = {**{k: str(v) for k, v in arguments.items()}, "client_encoding": "UTF8"}
    keywords = (ctypes.c_char_p * (len(settings) + 1))(*[k.encode() for k in settings], None)
    values = (ctypes.c_char_p * (len(settings) + 1))(*[v.encode() for v in settings.values()], None)
    handle = library.PQconnectdbParams(keywords, values, 0)
    if not handle:
        raise OperationalError("libpq could not allocate a connection")
    if library.PQstatus(handle) != _CONNECTION_OK:
        message = library.PQerrorMessage(handle)
        library.PQfinish(handle)
        raise _error(message, None)
    style = library.PQparameterStatus(handle, b"DateStyle") or b""
    if not style.startswith(b"ISO"):
        library.PQfinish(handle)
        return None
    return Connection(library, handle)


class Connection:
    """One libpq connection, every statement its own transaction (as psycopg's autocommit)."""

    def __init__(self, library: Any, handle: int) -> None:
        self.library = library
        self.handle: int | None = handle

    def cursor(self) -> Cursor:
        return Cursor(self)

    def close(self) -> None:
        if self.handle is not None:
            self.library.PQfinish(self.handle)
            self.handle = None


class Cursor:
    """The rows of one statement, fetched whole when it runs (these reads are small)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.description: list[tuple[str]] | None = None
        self._rows: list[tuple[Any, ...]] = []
        self._at = 0

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        names: list[str] = []

        def number(found: re.Match[str]) -> str:
            if found.group(1) is None:
                return "%"
            names.append(found.group(1))
            return f"${len(names)}"

        statement = _BIND.sub(number, sql)
        given = params or {}
        encoded = [_encoded(given[name]) for name in names]
        values = (ctypes.c_char_p * max(1, len(encoded)))(*encoded)
        library, handle = self.connection.library, self.connection.handle
        if handle is None:
            raise OperationalError("the connection is closed")
        result = library.PQexecParams(
            handle, statement.encode(), len(encoded), None, values, None, None, 0
        )
        if not result:
            raise _error(library.PQerrorMessage(handle), None)
        try:
            status = library.PQresultStatus(result)
            if status not in (_COMMAND_OK, _TUPLES_OK):
                raise _error(
                    library.PQresultErrorField(result, _PRIMARY)
                    or library.PQresultErrorMessage(result),
                    library.PQresultErrorField(result, _SQLSTATE),
                )
            self._read(library, result)
        finally:
            library.PQclear(result)

    def _read(self, library: Any, result: int) -> None:
        fields = library.PQnfields(result)
        self.description = [(library.PQfname(result, i).decode(),) for i in range(fields)]
        decoders = [_DECODERS.get(library.PQftype(result, i), _text) for i in range(fields)]
        rows: list[tuple[Any, ...]] = []
        for row in range(library.PQntuples(result)):
            values: list[Any] = []
            for i in range(fields):
                if library.PQgetisnull(result, row, i):
                    values.append(None)
                    continue
                length = library.PQgetlength(result, row, i)
                raw = ctypes.string_at(library.PQgetvalue(result, row, i), length)
                values.append(decoders[i](raw.decode()))
            rows.append(tuple(values))
        self._rows, self._at = rows, 0

    def fetchmany(self, size: int) -> Sequence[tuple[Any, ...]]:
        chunk = self._rows[self._at : self._at + size]
        self._at += len(chunk)
        return chunk

    def fetchall(self) -> Sequence[tuple[Any, ...]]:
        return self.fetchmany(len(self._rows))

    def close(self) -> None:
        self._rows = []


def _encoded(value: Any) -> bytes | None:
    """A bind in PostgreSQL's text input format (the server infers its type)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, datetime | date):
        return value.isoformat().encode()
    if isinstance(value, dict | list):
        return json.dumps(value).encode()
    return str(value).encode()


def _text(value: str) -> Any:
    return value


def _boolean(value: str) -> bool:
    return value == "t"


def _timestamp(value: str) -> datetime:
    # ISO DateStyle (checked on connect): "2026-12-06 13:50:01.123456+00"
    return datetime.fromisoformat(value)


def _date(value: str) -> date:
    return date.fromisoformat(value)


# By type OID, as psycopg's text loaders decode them; any other type stays text.
_DECODERS: dict[int, Any] = {
    16: _boolean,
    20: int,
    21: int,
    23: int,
    26: int,
    700: float,
    701: float,
    1700: Decimal,
    114: json.loads,
    3802: json.loads,
    1082: _date,
    1114: _timestamp,
    1184: _timestamp,
}
