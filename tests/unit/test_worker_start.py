"""A worker started before its database waits for it; one told not to wait fails at once."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from runner.errors import DatabaseRefused, DatabaseUnavailable, SchemaOutOfDate
from runner.service import database_wait, worker_process
from runner.sql.database_failures import unavailable


def flaky(failures: int, error: Exception) -> Any:
    calls = {"n": 0}

    def make() -> Any:
        calls["n"] += 1
        if calls["n"] <= failures:
            raise error
        return "a worker"

    return make, calls


def test_waits_while_the_database_is_unavailable(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(database_wait, "DB_FIRST_BACKOFF", 0.01)
    make, calls = flaky(3, DatabaseUnavailable("cannot open x"))
    with caplog.at_level(logging.INFO, logger="runner.worker"):
        assert worker_process.start_worker(make, wait=True) == "a worker"
    assert calls["n"] == 4
    lines = [r.getMessage() for r in caplog.records if r.name == "runner.worker"]
    assert len(lines) == 3 and all("database unavailable" in line for line in lines)
    assert {r.levelname for r in caplog.records} == {"WARNING"}


def test_without_wait_the_first_failure_is_final() -> None:
    make, calls = flaky(1, DatabaseUnavailable("cannot open x"))
    with pytest.raises(DatabaseUnavailable):
        worker_process.start_worker(make, wait=False)
    assert calls["n"] == 1


def test_a_schema_at_the_wrong_revision_is_not_waited_for() -> None:
    make, calls = flaky(1, SchemaOutOfDate("run runner db upgrade"))
    with pytest.raises(SchemaOutOfDate):
        worker_process.start_worker(make, wait=True)
    assert calls["n"] == 1


def test_a_database_that_refuses_for_good_is_not_waited_for() -> None:
    make, calls = flaky(1, DatabaseRefused('FATAL:  role "x" does not exist'))
    with pytest.raises(DatabaseRefused):
        worker_process.start_worker(make, wait=True)
    assert calls["n"] == 1


@pytest.mark.parametrize(
    ("said", "for_good"),
    [
        ('failed: FATAL:  role "x" does not exist', True),
        ('failed: FATAL:  database "runs" does not exist', True),
        ('failed: FATAL:  password authentication failed for user "x"', True),
        ('failed: FATAL:  no pg_hba.conf entry for host "10.0.0.1", user "x"', True),
        ("failed: Connection refused\n\tIs the server running on that host?", False),
        ('failed: FATAL:  database "runs" is not currently accepting connections', False),
        ("failed: FATAL:  sorry, too many clients already", False),
        ("failed: FATAL:  the database system is starting up", False),
    ],
)
def test_what_the_server_said_tells_for_good_from_for_now(said: str, for_good: bool) -> None:
    error = unavailable(f"cannot open x: connection {said}", OperationalError(said, None, None))
    assert isinstance(error, DatabaseUnavailable)
    assert isinstance(error, DatabaseRefused) is for_good
