"""Which failures of a database write are worth trying again, and which never will be."""

from __future__ import annotations

from sqlalchemy.exc import (
    DataError,
    DBAPIError,
    DisconnectionError,
    InterfaceError,
    OperationalError,
    StatementError,
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
