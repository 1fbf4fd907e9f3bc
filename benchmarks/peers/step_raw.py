"""The raw-driver floor on the peers' workload: the agent loop, and after each step's writes
a COMMIT through the plain driver. No runner, no SQLAlchemy.

    python step_raw.py MODE DB TARGET N RUNS

MODE: `plain` (no persistence: the loop alone), `one` (one INSERT of the step's two
messages, one commit a step), `two` (the action INSERTed and committed before the tool,
the observation after: two commits a step, as a durable runner must), `two_ac`
(PostgreSQL: as `two`, each INSERT alone in autocommit, one round trip a commit).
DB: `sqlite` (TARGET a file: WAL, synchronous=FULL, BEGIN IMMEDIATE, runner's settings),
`postgresql` (TARGET a libpq URL: psycopg 3, BEGIN, INSERT, COMMIT), or `none`.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import uuid
from collections.abc import Callable
from typing import Any

from workload import (
    Clock,
    Message,
    emit,
    fake_model,
    fake_tool,
    measure,
    remove_sqlite,
    tool_message,
)

DDL = "CREATE TABLE {table}(run_id TEXT, seq INTEGER, payload TEXT, PRIMARY KEY(run_id, seq))"
Write = Callable[[int, str], None]


def loop(n: int, write: Write | None, commits_per_step: int) -> list[Message]:
    transcript: list[Message] = []
    seq = 0
    for i in range(n):
        msg = fake_model(transcript, i)
        call = msg["tool_calls"][0]
        if write is not None and commits_per_step == 2:
            write(seq, json.dumps(msg))
            seq += 1
        tmsg = tool_message(call, fake_tool(call))
        transcript += (msg, tmsg)
        if write is not None and commits_per_step == 2:
            write(seq, json.dumps(tmsg))
            seq += 1
        elif write is not None and commits_per_step == 1:
            write(seq, json.dumps([msg, tmsg]))
            seq += 1
    return transcript


def sqlite_writer(path: str) -> tuple[Callable[[str], Write], dict[str, Any]]:
    remove_sqlite(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA busy_timeout=5000")
    conn.execute(DDL.format(table="steps"))
    info = {
        "journal_mode": conn.execute("PRAGMA journal_mode").fetchone()[0],
        "synchronous": conn.execute("PRAGMA synchronous").fetchone()[0],
    }

    def writer(run_id: str) -> Write:
        def write(seq: int, payload: str) -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO steps VALUES (?,?,?)", (run_id, seq, payload))
            conn.execute("COMMIT")

        return write

    return writer, info


def postgres_writer(mode: str, dsn: str) -> tuple[Callable[[str], Write], dict[str, Any]]:
    import psycopg

    table = f"steps_{mode}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"DROP TABLE IF EXISTS {table}")
        admin.execute(DDL.format(table=table))
    conn = psycopg.connect(dsn, autocommit=(mode == "two_ac"))
    cur = conn.cursor()
    sql = f"INSERT INTO {table} VALUES (%s,%s,%s)"
    row = conn.execute("SHOW synchronous_commit").fetchone()
    info = {"synchronous_commit": row[0] if row else None, "autocommit": conn.autocommit}
    if not conn.autocommit:
        conn.commit()

    def writer(run_id: str) -> Write:
        if conn.autocommit:

            def write(seq: int, payload: str) -> None:
                cur.execute(sql, (run_id, seq, payload))

        else:

            def write(seq: int, payload: str) -> None:
                cur.execute(sql, (run_id, seq, payload))
                conn.commit()

        return write

    return writer, info


def no_writer(run_id: str) -> Write | None:
    """The plain loop's: nothing written."""
    return None


def main() -> None:
    mode, db, target = sys.argv[1:4]
    n, runs = int(sys.argv[4]), int(sys.argv[5])
    commits_per_step = {"plain": 0, "one": 1, "two": 2, "two_ac": 2}[mode]
    info: dict[str, Any] = {}
    writer: Callable[[str], Write | None]
    if mode == "plain":
        writer = no_writer
    elif db == "sqlite":
        writer, info = sqlite_writer(target)
    else:
        writer, info = postgres_writer(mode, target)

    def one_run() -> tuple[float, float]:
        write = writer(uuid.uuid4().hex)
        clock = Clock()
        loop(n, write, commits_per_step)
        return clock.since()

    emit({"db": db, "n": n, "runs": runs, "info": info, **measure(one_run, n, runs)})


if __name__ == "__main__":
    main()
