"""On SQLite, reading the history never waits for the write lock a worker holds."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from runner import Agent, Runner
from runner.sql import runs as store


def answer(transcript: list[dict[str, object]]) -> dict[str, object]:
    return {"type": "final", "content": "done"}


def test_reads_do_not_wait_for_a_writer(tmp_path: Path) -> None:
    path = tmp_path / "runner.db"
    with Runner(f"sqlite:///{path}") as runner:
        done = runner.run(Agent(answer), "t", id="read-me")
        writer = sqlite3.connect(path, isolation_level=None)
        writer.execute("BEGIN IMMEDIATE")  # a worker in the middle of a journal write
        try:
            started = time.monotonic()
            assert store.find_run(runner.engine, "read").id == "read-me"
            assert [row.id for row in store.list_runs(runner.engine)] == ["read-me"]
            assert runner.get("read-me").transcript == done.transcript
            # Blocked readers would wait for the 30 s busy timeout.
            assert time.monotonic() - started < 5
        finally:
            writer.execute("ROLLBACK")
            writer.close()
