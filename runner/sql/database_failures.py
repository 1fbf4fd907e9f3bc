"""Which failures of a database write are worth trying again, and which never will be."""

from __future__ import annotations

import re

from sqlalchemy.exc import (
    DataError,
    DBAPIError,
    DisconnectionError,
    InterfaceError,
    OperationalError,
    StatementError,
)

from runner.errors import DatabaseRefused, DatabaseUnavailable

# A server that answered and refused this role, password or database: no wait changes that.
# libpq gives a connection it could not open no SQLSTATE (psycopg's `sqlstate` is None),
# only the server's words, so these are matched in English; a server speaking another
# language (lc_messages) is not recognised, and a worker waits for it as for one away.
_REFUSED_FOR_GOOD = re.compile(
    r'role "[^"]*" does not exist'
    r'|database "[^"]*" does not exist'
    r"|password authentication failed"
    r"|no pg_hba\.conf entry"
)


def transient(exc: BaseException) -> bool:
    """A lost connection, a server going away, a lock timeout: the same write may succeed."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(exc, OperationalError | InterfaceError | DisconnectionError)


def refused(exc: BaseException) -> bool:
    """The value itself cannot be stored (out of range, bad text, unencodable): no retry helps."""
    if isinstance(exc, DataError):
        return True
    if isinstance(exc, StatementError) and not isinstance(exc, DBAPIError):
        return True  # raised while binding the values, before the database saw them
    return isinstance(exc, OverflowError | UnicodeError | RecursionError)


def refused_for_good(exc: BaseException) -> bool:
    """The server refused this connection for good (no such role or database, a bad
    password, no pg_hba.conf entry), not for now (away, starting up, out of connections)."""
    return _REFUSED_FOR_GOOD.search(str(exc)) is not None


def unavailable(message: str, exc: BaseException) -> DatabaseUnavailable:
    """The error for a database that could not be opened: DatabaseRefused when no wait helps."""
    return (DatabaseRefused if refused_for_good(exc) else DatabaseUnavailable)(message)
