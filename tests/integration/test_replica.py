"""History on a streaming replica (`--read-db`): `runner sql`, `stats`, `export`, the page
and the API's reads of runs go to a real replica the suite starts (tests/servers.py), and
say how far behind it is. The primary given as `--db` is one no server answers where only
reads are asked: they never touch it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from sqlalchemy.engine import make_url
from starlette.testclient import TestClient

from runner import Runner
from runner.cli import main
from runner.history import History, replica_lag
from runner.sql.database import open_read_only
from runner.ui import make_app
from tests.conditions import wait_until
from tests.conftest import fresh_database

from .agents import SOLVER_REF

pytestmark = pytest.mark.postgres

# A primary no server answers: a read that reached it would fail.
NOWHERE = "postgresql+psycopg://postgres@127.0.0.1:1/nowhere"


@dataclass(frozen=True)
class Replicated:
    primary: str
    replica: str


def _connect(url: str) -> psycopg.Connection[tuple[object, ...]]:
    parsed = make_url(url)
    return psycopg.connect(
        host=parsed.host, port=parsed.port, user=parsed.username, dbname=parsed.database,
        autocommit=True,
    )  # fmt: skip


def caught_up(primary: str, replica: str) -> None:
    """Wait until the replica has replayed everything the primary has written so far."""
    with _connect(primary) as connection:
        (lsn,) = connection.execute("SELECT pg_current_wal_lsn()::text").fetchone() or ("",)
    with _connect(replica) as connection:
        wait_until(
            lambda: (
                connection.execute(
                    "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)
                ).fetchone()
                == (True,)
            ),
            timeout=30,
            what="the replica to replay the primary's writes",
        )


@pytest.fixture
def replicated(
    request: pytest.FixtureRequest, replica: str, postgres_database: str, tmp_path: Path
) -> Iterator[Replicated]:
    for _ in fresh_database(request, "postgres", tmp_path):
        pass
    with Runner(postgres_database) as runner:
        for i in range(3):
            runner.run(SOLVER_REF, "2+3?", id=f"r{i}")
    caught_up(postgres_database, replica)
    yield Replicated(postgres_database, replica)


@contextmanager
def replay_paused(replica: str) -> Iterator[None]:
    with _connect(replica) as connection:
        connection.execute("SELECT pg_wal_replay_pause()")
        try:
            yield
        finally:
            connection.execute("SELECT pg_wal_replay_resume()")


def invoke(*args: str) -> tuple[int, str, str]:
    done = CliRunner().invoke(main, list(args))
    return done.exit_code, done.stdout, done.stderr


def test_the_lag_is_none_on_a_primary_and_measured_on_a_replica(replicated: Replicated) -> None:
    primary, replica = open_read_only(replicated.primary), open_read_only(replicated.replica)
    try:
        assert replica_lag(primary) is None
        lag = replica_lag(replica)
        assert lag is not None and 0 <= lag < 60  # caught up: nothing left to replay
    finally:
        primary.dispose()
        replica.dispose()


def test_sql_stats_and_export_read_the_replica_never_the_primary(replicated: Replicated) -> None:
    code, out, err = invoke(
        "sql", "SELECT count(*) AS n FROM runs", "--json", "--db", NOWHERE,
        "--read-db", replicated.replica,
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out) == [{"n": 3}]
    code, out, err = invoke("stats", "--db", NOWHERE, "--read-db", replicated.replica)
    assert code == 0, err
    assert "r1" in out and "read from a replica" in out
    code, out, err = invoke("stats", "--json", "--db", NOWHERE, "--read-db", replicated.replica)
    assert code == 0, err
    shown = json.loads(out)
    assert shown["groups"][0]["runs"] == 3 and shown["replica_lag_seconds"] >= 0
    code, out, err = invoke("export", "--db", NOWHERE, "--read-db", replicated.replica)
    assert code == 0, err
    assert len(out.splitlines()) == 3
    assert "exported 3 runs" in err and "read from a replica" in err


def test_a_paused_replica_shows_its_lag_and_not_the_newest_run(replicated: Replicated) -> None:
    with replay_paused(replicated.replica):
        with Runner(replicated.primary) as runner:
            runner.run(SOLVER_REF, "2+3?", id="late")
        with History(replicated.primary, read_url=replicated.replica) as history:
            wait_until(lambda: (history.replica_lag() or 0) > 0, timeout=30)
            assert history.stats()[0].runs == 3  # the replica has not replayed `late`
    caught_up(replicated.primary, replicated.replica)
    with History(replicated.primary, read_url=replicated.replica) as history:
        assert history.stats()[0].runs == 4


def test_the_page_and_the_api_read_the_replica_and_say_its_lag(
    replicated: Replicated, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUNNER_READ_DATABASE_URL", replicated.replica)
    app = make_app(replicated.primary)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        page = client.get("/")
        assert page.status_code == 200
        assert "read from a replica" in page.text and "r2" in page.text
        with replay_paused(replicated.replica):
            with Runner(replicated.primary) as runner:
                runner.run(SOLVER_REF, "2+3?", id="late")
            listed = client.get("/api/runs")
            assert listed.status_code == 200
            assert float(listed.headers["Runner-Replica-Lag"]) >= 0
            assert "late" not in {run["id"] for run in listed.json()["runs"]}
        got = client.get("/api/runs/r0")
        assert got.status_code == 200 and "Runner-Replica-Lag" in got.headers
