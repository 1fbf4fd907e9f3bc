"""What a round trip to PostgreSQL costs here, and what psycopg's pipeline mode saves of it
(issue 39: a sub-agent and a limited call make more round trips than a plain call).

    .venv/bin/python benchmarks/round_trips.py [--statements 1 2 4] [--writes 400]
        [--repeats 7] [--fsync] [--json out.json]

Writes of N one-row UPDATEs (a scratch table, on psycopg directly, as runner's journal
writes run on the driver's cursor), three ways taking turns going first:

- `autocommit`: one statement alone, its own transaction (a fenced journal insert is);
- `transaction`: BEGIN, the N statements, COMMIT, each a round trip (psycopg's implicit
  BEGIN; runner's multi-statement writes: a park, a child's hold, a write that reserves a
  limited call);
- `pipeline`: the same in psycopg's pipeline mode, BEGIN and COMMIT sent as statements on a
  connection in autocommit so that they go with the others: one round trip (the Sync as
  the pipeline ends) for the whole write, every answer read at the end.

Reported: wall and this process's CPU per write, median of the repetitions (min-max), and
the load average. `synchronous_commit` is off unless `--fsync`: a commit's flush of the WAL
costs the same whichever way the statements came, and here it is larger and far noisier
(0.5 to 3 ms) than all the rest.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import common
import psycopg
from sqlalchemy.engine import make_url

# A table of the benchmark's own (a temporary one is not WAL-logged: no commit would flush).
TABLE = f"round_trips_{os.getpid()}"
UPDATE = f"UPDATE {TABLE} SET x = x + 1 WHERE id = %(id)s"


def connect(url: str, fsync: bool) -> psycopg.Connection[Any]:
    parsed = make_url(url)
    connection = psycopg.connect(
        host=parsed.host,
        port=parsed.port,
        user=parsed.username,
        password=parsed.password,
        dbname=parsed.database,
    )
    connection.execute(f"CREATE TABLE {TABLE} (id int PRIMARY KEY, x int)")
    connection.execute(f"INSERT INTO {TABLE} VALUES (1, 0), (2, 0)")
    if not fsync:
        connection.execute("SET synchronous_commit = off")
    connection.commit()
    return connection


def ways(connection: psycopg.Connection[Any], statements: int) -> dict[str, Callable[[], None]]:
    cursor = connection.cursor()

    def autocommit() -> None:
        connection.autocommit = True
        cursor.execute(UPDATE, {"id": 1})
        connection.autocommit = False

    def transaction() -> None:
        for n in range(statements):
            cursor.execute(UPDATE, {"id": 1 + n % 2})
        connection.commit()

    def pipeline() -> None:
        connection.autocommit = True
        with connection.pipeline():
            cursors = [connection.cursor() for _ in range(statements + 2)]
            cursors[0].execute("BEGIN")
            for n in range(statements):
                cursors[n + 1].execute(UPDATE, {"id": 1 + n % 2})
            cursors[-1].execute("COMMIT")
        connection.autocommit = False

    found = {f"transaction, {statements}": transaction, f"pipeline, {statements}": pipeline}
    if statements == 1:
        found = {"autocommit, 1": autocommit, **found}
    return found


def measure(url: str, counts: list[int], writes: int, repeats: int, fsync: bool) -> dict[str, Any]:
    connection = connect(url, fsync)
    try:
        every: dict[str, Callable[[], None]] = {}
        for statements in counts:
            every.update(ways(connection, statements))
        for write in every.values():  # warm up: psycopg prepares a statement on its 5th use
            for _ in range(50):
                write()
        names = list(every)
        samples: dict[str, dict[str, list[float]]] = {n: {"wall": [], "cpu": []} for n in names}
        for repeat in range(repeats):
            turn = repeat % len(names)
            for name in names[turn:] + names[:turn]:
                wall, cpu = time.perf_counter(), time.process_time()
                for _ in range(writes):
                    every[name]()
                samples[name]["wall"].append((time.perf_counter() - wall) / writes * 1e6)
                samples[name]["cpu"].append((time.process_time() - cpu) / writes * 1e6)
    finally:
        connection.rollback()
        connection.autocommit = True
        connection.execute(f"DROP TABLE IF EXISTS {TABLE}")
        connection.close()
    return {
        name: {measure: common.spread(values) for measure, values in found.items()}
        for name, found in samples.items()
    }


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--statements", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--writes", type=int, default=400, help="writes a repetition")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--fsync", action="store_true", help="keep synchronous_commit on")
    options = p.parse_args()
    url = common.postgres_url_or_none(options)
    if url is None:
        raise SystemExit("round_trips.py measures PostgreSQL: none answers")
    found = measure(url, options.statements, options.writes, options.repeats, options.fsync)
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    common.print_table(
        f"A write of N statements to PostgreSQL: us a write, median (min-max) of "
        f"{options.repeats} x {options.writes} (load average {load})",
        ["way", "wall", "cpu"],
        [
            (name, common.fmt_spread(m["wall"]), common.fmt_spread(m["cpu"]))
            for name, m in found.items()
        ],
    )
    common.write_json(options.json, "round_trips", options, found)


if __name__ == "__main__":
    main()
