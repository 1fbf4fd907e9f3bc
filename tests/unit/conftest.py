"""Fixtures of the unit tests.

The unit layer has no database and no subprocess (`make unit` runs in seconds on any
machine): a test that opens one or starts one fails here, and belongs in tests/integration
or tests/acceptance.
"""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import sqlite3.dbapi2
import subprocess
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest


class OutOfLayer(AssertionError):
    """A unit test reached for a database or a subprocess."""


def _refuses(what: str) -> Callable[..., Any]:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise OutOfLayer(
            f"a unit test {what}: tests/unit has no database and no subprocess "
            "(move the test to tests/integration or tests/acceptance)"
        )

    return refused


# Every way the library and the tests open a database goes through a driver's connect, and
# every way of starting a process through Popen or a fork: refusing those refuses them all.
_PSYCOPG = importlib.util.find_spec("psycopg") is not None


@pytest.fixture(autouse=True)
def no_database_nor_subprocess(monkeypatch: pytest.MonkeyPatch) -> None:
    # SQLAlchemy connects through sqlite3.dbapi2, the standard library's own callers
    # through sqlite3: two names of one function.
    for module in (sqlite3, sqlite3.dbapi2):
        monkeypatch.setattr(module, "connect", _refuses("opened a SQLite database"))
    if _PSYCOPG:
        import psycopg

        monkeypatch.setattr(psycopg, "connect", _refuses("connected to PostgreSQL"))
    monkeypatch.setattr(subprocess, "Popen", _refuses("started a subprocess"))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _refuses("forked a process"))


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set when the test ends, so that calls the runner abandoned finish promptly."""
    event = threading.Event()
    yield event
    event.set()
