"""The journal's write path taken apart: this process's CPU per one-entry write, piece by piece.

    .venv/bin/python benchmarks/write_parts.py [--postgresql] [--writes 3000] [--repeats 5]

On a scratch SQLite file with `synchronous=normal` (a commit waits for no disk, so what is
left is CPU), or with `--postgresql` a scratch PostgreSQL database. Each repetition claims
a run of its own and times, in this process's CPU, each of:

- `Append.of`: the write built: the row's values, converted, and the fence's (no database);
- the statement alone: the fenced INSERT ... RETURNING of prebuilt writes on a driver
  cursor of the writer's connection, sent as runner sends it (SQLite: BEGIN IMMEDIATE, the
  statement, COMMIT; PostgreSQL: the statement alone in autocommit), its rows read: what
  the driver and the database cost, no runner Python;
- `Writer.commit`: a prebuilt write through the runner's writer (the file's turn, the
  group commit, the driver's `Write`): the statement alone plus the writer's Python;
- `SqlJournal.append`: an entry through the journal (its lock, its checks, `Append.of`,
  `Writer.commit`, its observer).

The differences are what each layer's Python costs a write. Median (min-max) of the
repetitions, in microseconds of CPU per write.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import common
import fakes

from runner import Runner
from runner.core.actions import ActionKind
from runner.core.counters import Counters
from runner.core.ids import new_run_id
from runner.core.journal import Entry, EntryKind
from runner.sql import fencing, leases
from runner.sql import runs as store
from runner.sql.store import SqlStore
from runner.store.rules import Claim

PARTS = ("Append.of", "statement alone", "Writer.commit", "SqlJournal.append")


def action(seq: int) -> Entry:
    """A tool call's action entry, as the benchmark model's (fakes.model) would be."""
    return Entry(
        EntryKind.ACTION,
        seq,
        Counters(steps=seq),
        action_type=ActionKind.TOOL,
        tool="echo",
        args={"i": seq},
        call_id=f"call-{seq}",
    )


def claimed(runner: Runner) -> Claim:
    run_id = new_run_id()
    store.create_run(
        runner.engine, run_id=run_id, agent=None, agent_name=None, release=None, task="parts",
        budgets={},
    )  # fmt: skip
    return leases.claim_run(
        runner.engine, run_id, owner="bench:1:1", lease_seconds=runner.lease_seconds,
        max_resumes=1,
    )  # fmt: skip


def cpu_per(writes: int, write: Callable[[int], Any]) -> float:
    started = time.process_time()
    for seq in range(writes):
        write(seq)
    return (time.process_time() - started) / writes * 1e6


def prebuilt(runner: Runner, claim: Claim, writes: int) -> list[fencing.Append]:
    return [built(runner, claim, seq) for seq in range(writes)]


def built(runner: Runner, claim: Claim, seq: int) -> fencing.Append:
    dialect = runner.engine.dialect
    return fencing.Append.of(dialect, claim.run.id, claim.epoch, seq, (action(seq),), None, 600)


def sql_store(runner: Runner) -> SqlStore:
    """The runner's store: a database's, on the URLs this benchmark takes."""
    found = runner.store
    assert isinstance(found, SqlStore)
    return found


def statement_alone(runner: Runner, writes: int) -> float:
    """As runner sends it: SQLite, BEGIN IMMEDIATE, the statement, COMMIT; PostgreSQL, the
    statement alone in autocommit, its own transaction (runner.sql.driver)."""
    appends = prebuilt(runner, claimed(runner), writes)
    sqlite = runner.engine.dialect.name == "sqlite"
    with sql_store(runner).writer.turn() as connection:
        dbapi = connection.connection.dbapi_connection
        assert dbapi is not None
        cursor = dbapi.cursor()
        if not sqlite:
            dbapi.autocommit = True

        def write(seq: int) -> None:
            sql, parameters = appends[seq].inserts[0]
            if sqlite:
                cursor.execute("BEGIN IMMEDIATE")
            cursor.execute(sql, parameters)
            cursor.fetchall()
            if sqlite:
                dbapi.commit()

        try:
            return cpu_per(writes, write)
        finally:
            cursor.close()
            if not sqlite:
                dbapi.autocommit = False


def measure(url: str, writes: int, repeats: int) -> dict[str, dict[str, float]]:
    runner = Runner(url, lease_seconds=600)
    samples: dict[str, list[float]] = {part: [] for part in PARTS}
    try:
        runner.run(fakes.make_agent(), fakes.task(20))  # warm up: caches, pool, kept connection
        for _ in range(repeats):
            samples["Append.of"].append(building(runner, writes))
            samples["statement alone"].append(statement_alone(runner, writes))
            samples["Writer.commit"].append(committing(runner, writes))
            samples["SqlJournal.append"].append(appending(runner, writes))
    finally:
        runner.close()
    return {part: common.spread(values) for part, values in samples.items()}


def building(runner: Runner, writes: int) -> float:
    claim = claimed(runner)
    return cpu_per(writes, lambda seq: built(runner, claim, seq))


def committing(runner: Runner, writes: int) -> float:
    appends = prebuilt(runner, claimed(runner), writes)
    writer = sql_store(runner).writer
    return cpu_per(writes, lambda seq: writer.commit(appends[seq]))


def appending(runner: Runner, writes: int) -> float:
    entries = [action(seq) for seq in range(writes)]
    with runner.store.open_journal(claimed(runner), lease_seconds=600) as journal:
        return cpu_per(writes, lambda seq: journal.append(entries[seq]))


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--postgresql", action="store_true", help="a scratch PostgreSQL database")
    p.add_argument("--writes", type=int, default=3000, help="writes per repetition (default 3000)")
    p.add_argument("--repeats", type=int, default=5, help="repetitions (default 5)")
    options = p.parse_args()
    if options.postgresql:
        with common.scratch_postgres(options.postgres) as url:
            parts = measure(url, options.writes, options.repeats)
        url = "postgresql (scratch)"
    else:
        with common.scratch_folder(options.dir) as folder:
            url = common.sqlite_url(folder, "parts", "?synchronous=normal")
            parts = measure(url, options.writes, options.repeats)
    rows = [[part, common.fmt_spread(parts[part], 1)] for part in PARTS]
    common.print_table(
        f"CPU us per one-entry write ({url}), median (min-max) of {options.repeats}",
        ["part", "CPU us/write"],
        rows,
    )
    common.write_json(options.json, "write_parts", options, {"url": url, "parts": parts})


if __name__ == "__main__":
    main()
