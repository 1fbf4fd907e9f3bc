"""`runner sql` on PostgreSQL reads as `runner_reader` only while that role can do no more
than read: a role that belongs to another role (and so holds its privileges) is refused.

The role is shared by every database of the server, so the membership is granted inside
the reading transaction itself and rolled back with it: no other session ever sees it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

from runner.errors import QueryFailed
from runner.history import postgres_reader

pytestmark = pytest.mark.postgres


@pytest.fixture
def connection(postgres_database: str) -> Iterator[psycopg.Connection[Any]]:
    url = make_url(postgres_database).set(drivername="postgresql")
    with psycopg.connect(url.render_as_string(hide_password=False)) as opened:
        yield opened
        opened.rollback()


def test_the_reader_role_as_migrated_may_read(connection: psycopg.Connection[Any]) -> None:
    postgres_reader._become_reader(connection, None)
    assert connection.execute("SELECT current_user").fetchone() == ("runner_reader",)


@pytest.mark.parametrize("other", ["pg_monitor", "pg_read_all_data", "pg_signal_backend"])
def test_a_reader_role_that_belongs_to_another_role_is_refused(
    connection: psycopg.Connection[Any], other: str
) -> None:
    connection.execute(f"GRANT {other} TO runner_reader")  # this transaction's alone
    with pytest.raises(QueryFailed, match="member of another role"):
        postgres_reader._become_reader(connection, None)
