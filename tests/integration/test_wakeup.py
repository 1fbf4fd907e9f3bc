"""Waking idle workers: on PostgreSQL a listener hears every run submitted or answered (and
nothing a rolled-back transaction or a foreground run did), and listens again after losing
its connection; on SQLite there is nothing to listen to, and no thread is started."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from sqlalchemy import text

from runner import Runner
from runner.sql.database import open_engine
from runner.sql.wakeup import Wakeup

from .agents import shop

HEARD = 10.0  # seconds a notification may take to arrive: far more than it needs
QUIET = 0.5  # seconds of silence that show nothing was announced


@pytest.fixture
def pg_url(postgres_database: str) -> str:
    engine = open_engine(postgres_database)
    with engine.begin() as connection:
        connection.execute(text("TRUNCATE runs, entries CASCADE"))
    engine.dispose()
    return postgres_database


@pytest.mark.postgres
def test_a_listener_hears_submits_and_answers_not_foreground_runs(pg_url: str) -> None:
    woken = threading.Event()
    with Runner(pg_url) as runner, Wakeup(runner.engine, woken) as wakeup:
        assert wakeup.listening.wait(HEARD)
        woken.clear()
        runner.run(shop, "refund", id="fg")  # this process runs it: nobody is woken
        assert not woken.wait(QUIET)
        runner.approve("fg")  # an answer queues it for any worker: announced
        assert woken.wait(HEARD)
        woken.clear()
        runner.submit(shop, "refund", id="bg")
        assert woken.wait(HEARD)
        woken.clear()
        runner.submit(shop, "refund", id="bg")  # the id exists: nothing new, nothing said
        assert not woken.wait(QUIET)


@pytest.mark.postgres
def test_a_listener_that_loses_its_connection_listens_again(pg_url: str) -> None:
    woken = threading.Event()
    with Runner(pg_url) as runner, Wakeup(runner.engine, woken) as wakeup:
        assert wakeup.listening.wait(HEARD)
        with runner.engine.begin() as connection:
            killed = connection.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    # This database only: another test process's listener is not this one.
                    "WHERE query LIKE 'LISTEN runner_wake%' AND pid <> pg_backend_pid() "
                    "AND datname = current_database()"
                )
            ).all()
        assert len(killed) == 1
        give_up = threading.Event()
        for _ in range(int(HEARD / 0.05)):
            if wakeup.connections == 2 and wakeup.listening.is_set():
                break
            give_up.wait(0.05)
        assert wakeup.connections == 2
        woken.clear()
        runner.submit(shop, "refund", id="after")
        assert woken.wait(HEARD)


def test_sqlite_has_nothing_to_listen_to(tmp_path: Path) -> None:
    woken = threading.Event()
    with Runner(f"sqlite:///{tmp_path / 'w.db'}") as runner:
        wakeup = Wakeup(runner.engine, woken)
        assert wakeup.start() is False
        assert wakeup._thread is None
        wakeup.close()
