"""What a URL does not say about a broken network, runner's PostgreSQL connections do: a
connect gives up, a silent peer is noticed, and a writer's session left idle inside a
transaction (its worker cut off mid-write) is ended by the server after one lease, so it
holds no run row that another worker must take over. tests/acceptance/test_multihost.py
partitions a real worker; this checks the settings every connection carries."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from runner.sql.database import open_engine
from runner.sql.store import SqlStore

pytestmark = pytest.mark.postgres


def settings(engine: object) -> dict[str, str]:
    with engine.connect() as connection:  # type: ignore[attr-defined]
        raw = connection.connection.dbapi_connection
        params = raw.info.get_parameters()
        idle = connection.execute(text("SHOW idle_in_transaction_session_timeout")).scalar_one()
        return {**params, "idle_in_transaction_session_timeout": idle}


def test_a_stores_sessions_end_when_left_idle_in_a_transaction_for_a_lease(
    postgres_database: str,
) -> None:
    store = SqlStore(postgres_database, lease_seconds=7)
    try:
        found = settings(store.engine)
    finally:
        store.close()
    assert found["idle_in_transaction_session_timeout"] == "7s"
    for name, value in {
        "connect_timeout": "10",
        "keepalives": "1",
        "keepalives_idle": "15",
        "tcp_user_timeout": "15000",
    }.items():
        assert found[name] == value, (name, found)


def test_a_urls_own_settings_win_and_readers_are_not_cut_short(postgres_database: str) -> None:
    engine = open_engine(f"{postgres_database}?connect_timeout=3&tcp_user_timeout=0")
    try:
        found = settings(engine)
    finally:
        engine.dispose()
    assert (found["connect_timeout"], found["tcp_user_timeout"]) == ("3", "0")
    # Not a store's writer: an export streaming to a slow reader keeps its transaction.
    assert found["idle_in_transaction_session_timeout"] == "0"
