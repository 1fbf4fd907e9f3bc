"""A worker whose database refuses it for good (no such role, no such database, no such
folder) exits at once with one line, as `runner list` does; one whose database is away
waits for it, and a SIGTERM during that wait is a stop like any other: exit 0."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from tests.conftest import POSTGRES_URL

from .harness import RUNNER, TIMEOUT
from .test_workers import WorkerProcess, wait_for


def worker_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNER_")}
    return {**env, "PYTHONUNBUFFERED": "1"}


def worker_at(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(RUNNER), "worker", "--db", url],
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


@pytest.mark.postgres
@pytest.mark.parametrize("refused", ["role", "database"])
def test_a_server_that_refuses_the_worker_for_good_is_an_error_at_once(
    refused: str, postgres_database: str
) -> None:
    url = make_url(POSTGRES_URL)
    url = (
        url.set(username="no_such_role_22")
        if refused == "role"
        else url.set(database="no_such_database_22")
    )
    done = worker_at(url.render_as_string(hide_password=False))
    assert done.returncode == 1, done.stderr
    (said,) = done.stderr.splitlines()
    assert said.startswith("Error: cannot open ") and f'{refused} "no_such_' in said
    assert said.endswith("does not exist"), said
    assert "retrying" not in done.stderr


def test_a_sqlite_file_in_no_folder_is_an_error_at_once(tmp_path: Path) -> None:
    done = worker_at(f"sqlite:///{tmp_path / 'missing' / 'runner.db'}")
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        f"Error: no such folder for the SQLite file: {tmp_path / 'missing'}"
    ]


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port nobody listens on: bound (so no one else takes it) but not listening, so a
    connection to it is refused at once, as a server that is down refuses it."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


def test_sigterm_while_waiting_for_the_database_exits_0(closed_port: int, tmp_path: Path) -> None:
    url = f"postgresql+psycopg://postgres@127.0.0.1:{closed_port}/test"
    worker = WorkerProcess(["--db", url], worker_env(), tmp_path / "worker.log")
    try:
        wait_for(lambda: "retrying in" in worker.log() or not worker.alive(), 60, worker.log)
        assert worker.alive(), worker.log()  # a server that is away is waited for
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0, worker.log()
        assert "stopped while waiting for the database" in worker.log()
        assert "Traceback" not in worker.log()
    finally:
        worker.close()
