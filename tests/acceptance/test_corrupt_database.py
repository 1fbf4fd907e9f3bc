"""A damaged SQLite file is an error that stops, not an outage to wait out: `runner worker`
used to retry for ever ("database unavailable, retrying ...") on a file that no retry can
mend. Every command says in one line that the file is damaged, and exits 1."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest

from runner.errors import DatabaseCorrupt
from runner.service.worker import Worker
from runner.sql.database import open_engine, upgrade

from .harness import cli, described, one_line_error

PAGE = 4096


def _database(folder: Path) -> Path:
    path = folder / "runner.db"
    engine = open_engine(f"sqlite:///{path}")
    upgrade(engine)
    engine.dispose()  # checkpoints the WAL into the file and removes it
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return path


def _garble(path: Path, *, keep_header: bool) -> None:
    """Write random bytes over the file: all of it, or all but its first page (the header)."""
    size = path.stat().st_size
    start = PAGE if keep_header else 0
    with open(path, "r+b") as file:
        file.seek(start)
        file.write(os.urandom(size - start))


DAMAGE = {"garbage": False, "pages": True}


COMMANDS = [
    ["worker"],
    ["worker", "--once"],
    ["list"],
    ["show", "x"],
    ["sql", "SELECT count(*) FROM runs"],
    ["db", "upgrade"],
    ["stats"],
]


@pytest.mark.parametrize("damage", DAMAGE)
@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a))
def test_every_command_stops_on_a_damaged_file(
    damage: str, args: list[str], tmp_path: Path
) -> None:
    path = _database(tmp_path)
    _garble(path, keep_header=DAMAGE[damage])
    # A worker that took this for an outage would retry until the harness's timeout.
    done = cli(*args, "--db", f"sqlite:///{path}", db_url=None, ledger=tmp_path)
    assert done.returncode == 1, described(done)
    line = one_line_error(done.stderr)
    assert "is damaged or is not a SQLite database" in line, line
    assert "restore it from a backup" in line


def test_a_worker_stops_when_the_file_is_damaged_while_it_serves(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _database(tmp_path)
    caplog.set_level(logging.INFO, logger="runner.worker")
    worker = Worker(f"sqlite:///{path}", poll=0.01)
    failure: list[BaseException] = []

    def log() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "runner.worker"]

    def serve() -> None:
        try:
            worker.serve()
        except BaseException as exc:
            failure.append(exc)

    # Damage the file under the serving worker: its next claim reads garbage.
    worker.runner.engine.dispose()
    _garble(path, keep_header=True)
    serving = threading.Thread(target=serve)
    serving.start()
    serving.join(20)
    if serving.is_alive():
        worker.stopping.set()
        serving.join(20)
        pytest.fail("the worker kept serving a damaged file:\n" + "\n".join(log()))
    assert len(failure) == 1 and isinstance(failure[0], DatabaseCorrupt), (failure, log())
    assert "restore it from a backup" in str(failure[0])
    assert not any("retrying" in line for line in log()), log()
