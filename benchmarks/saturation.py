"""Saturation: a fleet of runs with an instant model and tool, as fast as the database takes
their entries, against the database's own ceiling measured in the same run.

    .venv/bin/python benchmarks/saturation.py [--processes 1,2] [--sqlite-concurrency 100]
        [--postgres-concurrency 40] [--runs-per-slot 3] [--steps 4] [--repeats 3]
        [--compare] [--json out.json]

For each database and worker count N: N `runner.Worker` processes (what `runner worker
--once --concurrency C` runs), started together behind a barrier, drain N * C *
runs-per-slot queued runs of `--steps` steps (the zero-cost model of benchmarks/fakes.py:
each tool step writes an action and an observation, so a 4-step run writes 8 entries with
its task). Reported: journal entries per second over the window from the first claim to the
last finish (the runs' own timestamps: no process start-up in it), the worker processes' CPU
time (all their threads) per entry, and that rate over the ceiling:

- SQLite: a raw commit loop on the same file, the plain `sqlite3` driver with the engine's
  settings (WAL, `synchronous=FULL`), one row of the entries table's columns per commit
  (BEGIN IMMEDIATE, INSERT, COMMIT) for `--seconds`: what one commit per write can reach, a
  file taking one writer at a time. Above 1 only by sharing commits (group commit).
- PostgreSQL: `pgbench` with as many clients as the workers have runs in flight (N * C,
  at most `--max-clients`), each transaction one INSERT of one row: the server's commit
  rate at that client count (it groups commits across connections itself).

The two take turns, ceiling first, `--repeats` times; the tables give the median (min-max)
of the rates and of the ratio taken per repetition. With `--compare`, each SQLite
repetition drains the same queue once more with every journal write a commit of its own
(group commit off in those worker processes: the code before it), for the side-by-side
ratio.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import common
import fakes
import raw_floor
import workers
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from runner import Runner
from runner.sql.schema import entries, runs

PGBENCH_SCRIPT = (
    "INSERT INTO saturation_ceiling (client, body) VALUES (:client_id, repeat('x', 200));\n"
)


def serve_one_commit_per_write(url: str, concurrency: int, barrier: Any, out: Any) -> None:
    """A worker process as `workers.serve`, its journal writes each a commit of their own
    (SQLite's group commit turned off: the code before it, for the side-by-side figure)."""
    from runner.sql import writer

    keep = writer.Writer.__init__

    def without_group(self: writer.Writer, *args: Any, **kwargs: Any) -> None:
        keep(self, *args, **kwargs)
        self.group = None

    writer.Writer.__init__ = without_group  # type: ignore[method-assign]
    workers.serve(url, concurrency, barrier, out)


def drain(
    runner: Runner,
    processes: int,
    concurrency: int,
    runs_per_slot: int,
    steps: int,
    serve: Any = workers.serve,
) -> Any:
    """Queue the runs, let `processes` workers drain them: entries/s and CPU per entry."""
    count = processes * concurrency * runs_per_slot
    ids = runner.submit_many(fakes.make_agent(), [fakes.task(steps)] * count, wake=False).ids
    _, _, reports = workers.together(serve, processes, runner.url, concurrency)
    with runner.engine.connect() as connection:
        first, last, finished = connection.execute(
            select(func.min(runs.c.leased_at), func.max(runs.c.finished_at), func.count()).where(
                runs.c.id.in_(ids), runs.c.stop_reason == "final"
            )
        ).one()
        written = connection.execute(
            select(func.count()).select_from(entries).where(entries.c.run_id.in_(ids))
        ).scalar_one()
    if finished != count:
        raise SystemExit(f"only {finished} of {count} runs finished with an answer")
    seconds = (last - first).total_seconds()
    cpu = sum(r["cpu_seconds"] for r in reports)
    return {
        "runs": count,
        "entries": written,
        "seconds": seconds,
        "entries_per_second": written / seconds,
        "worker_cpu_us_per_entry": cpu / written * 1e6,
    }


def sqlite_ceiling(runner: Runner, seconds: float) -> float:
    """Raw one-commit-per-write loop on the runner's own file: commits per second."""
    table = common.create_floor(runner.engine)
    warm = runner.run(fakes.make_agent(), fakes.task(2))
    assert warm.run_id is not None
    row = common.entry_rows(runner.engine, warm.run_id)[1]
    made = 0
    with raw_floor.committer(runner.engine, table) as commit:
        deadline = time.perf_counter() + seconds
        started = time.perf_counter()
        run_id = f"ceiling{time.time_ns()}"[: len(row["run_id"])]
        while time.perf_counter() < deadline:
            (values,) = raw_floor.driver_rows(
                runner.engine, table, [{**row, "run_id": run_id, "seq": made}]
            )
            commit(values)
            made += 1
        elapsed = time.perf_counter() - started
    table.drop(runner.engine)
    return made / elapsed


def pgbench_ceiling(url: str, clients: int, seconds: float) -> float:
    """pgbench's rate of one-row INSERT transactions with `clients` clients."""
    pgbench = shutil.which("pgbench")
    if pgbench is None:
        raise SystemExit("pgbench is not installed (it comes with PostgreSQL)")
    parsed = make_url(url)
    with Runner(url) as runner, runner.engine.begin() as connection:
        connection.exec_driver_sql(
            "CREATE TABLE IF NOT EXISTS saturation_ceiling "
            "(id bigserial PRIMARY KEY, client int, body text)"
        )
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
        script.write(PGBENCH_SCRIPT)
    try:
        command = [
            pgbench, "-n", "-f", script.name, "-c", str(clients), "-j", str(min(clients, 4)),
            "-T", str(max(1, round(seconds))),
            "-h", parsed.host or "127.0.0.1", "-p", str(parsed.port or 5432),
            "-U", parsed.username or "postgres", parsed.database or "postgres",
        ]  # fmt: skip
        env = {**os.environ}
        if parsed.password:
            env["PGPASSWORD"] = str(parsed.password)
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    finally:
        Path(script.name).unlink()
    if done.returncode != 0:
        raise SystemExit(f"pgbench failed:\n{done.stderr}")
    for line in done.stdout.splitlines():
        if line.startswith("tps = "):
            return float(line.split()[2])
    raise SystemExit(f"pgbench printed no tps:\n{done.stdout}")


def measure(
    name: str, url: str, options: Any, concurrency: int, ceiling: Any
) -> list[dict[str, Any]]:
    results = []
    runner = Runner(url, lease_seconds=600)
    try:
        for n in [int(p) for p in options.processes.split(",")]:
            samples = []
            for _ in range(options.repeats):
                top = ceiling(runner, n * concurrency)
                fleet = drain(runner, n, concurrency, options.runs_per_slot, options.steps)
                sample = {**fleet, "ceiling": top}
                if name == "sqlite" and options.compare:
                    alone = drain(
                        runner, n, concurrency, options.runs_per_slot, options.steps,
                        serve_one_commit_per_write,
                    )  # fmt: skip
                    sample["one_commit_per_write"] = alone
                samples.append(sample)
            rates = [s["entries_per_second"] for s in samples]
            results.append(
                {
                    "database": name,
                    "processes": n,
                    "concurrency": concurrency,
                    "ceiling_clients": min(n * concurrency, options.max_clients)
                    if name == "postgresql"
                    else 1,
                    "entries_per_second": common.spread(rates),
                    "ceiling_per_second": common.spread([s["ceiling"] for s in samples]),
                    "ratio": common.spread(
                        [s["entries_per_second"] / s["ceiling"] for s in samples]
                    ),
                    "worker_cpu_us_per_entry": common.spread(
                        [s["worker_cpu_us_per_entry"] for s in samples]
                    ),
                    "one_commit_per_write_entries_per_second": common.spread(
                        [s["one_commit_per_write"]["entries_per_second"] for s in samples]
                    )
                    if name == "sqlite" and options.compare
                    else None,
                    "group_over_one_commit_per_write": common.spread(
                        [
                            s["entries_per_second"]
                            / s["one_commit_per_write"]["entries_per_second"]
                            for s in samples
                        ]
                    )
                    if name == "sqlite" and options.compare
                    else None,
                    "samples": samples,
                }
            )
    finally:
        runner.close()
    return results


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--processes", default="1,2", help="worker process counts (default 1,2)")
    p.add_argument("--sqlite-concurrency", type=int, default=100, help="runs at once per worker")
    p.add_argument("--postgres-concurrency", type=int, default=40, help="runs at once per worker")
    p.add_argument("--max-clients", type=int, default=80, help="most pgbench clients")
    p.add_argument("--runs-per-slot", type=int, default=3, help="runs queued per run slot")
    p.add_argument("--steps", type=int, default=4, help="steps per run (default 4)")
    p.add_argument("--seconds", type=float, default=3.0, help="length of each ceiling run")
    p.add_argument("--repeats", type=int, default=3, help="repetitions (median; default 3)")
    p.add_argument("--only", choices=["sqlite", "postgresql"], help="one database only")
    p.add_argument(
        "--compare",
        action="store_true",
        help="SQLite: also drain with each journal write a commit of its own (no group commit)",
    )
    options = p.parse_args()
    results = []
    if options.only in (None, "sqlite"):
        with common.scratch_folder(options.dir) as folder:
            url = common.sqlite_url(folder, "saturation")
            results += measure(
                "sqlite",
                url,
                options,
                options.sqlite_concurrency,
                lambda runner, _: sqlite_ceiling(runner, options.seconds),
            )
    postgres = None if options.only == "sqlite" else common.postgres_url_or_none(options)
    if postgres is not None:
        with common.scratch_postgres(postgres) as url:
            results += measure(
                "postgresql",
                url,
                options,
                options.postgres_concurrency,
                lambda runner, clients: pgbench_ceiling(
                    runner.url, min(clients, options.max_clients), options.seconds
                ),
            )
    common.print_table(
        f"saturation: {options.steps}-step runs, instant model and tool, "
        f"median (min-max) of {options.repeats}",
        [
            "database",
            "workers x runs at once",
            "ceiling",
            "ceiling commits/s",
            "entries/s",
            "entries/s / ceiling",
            "worker CPU us/entry",
        ],
        [
            [
                r["database"],
                f"{r['processes']} x {r['concurrency']}",
                "raw commit loop"
                if r["database"] == "sqlite"
                else f"pgbench, {r['ceiling_clients']} clients",
                common.fmt_spread(r["ceiling_per_second"]),
                common.fmt_spread(r["entries_per_second"]),
                common.fmt_spread(r["ratio"], 2),
                common.fmt_spread(r["worker_cpu_us_per_entry"]),
            ]
            for r in results
        ],
    )
    compared = [r for r in results if r["group_over_one_commit_per_write"] is not None]
    if compared:
        common.print_table(
            "SQLite: group commit against one commit per write, the same drain",
            [
                "workers x runs at once",
                "one commit per write entries/s",
                "group commit entries/s",
                "group / one commit per write",
            ],
            [
                [
                    f"{r['processes']} x {r['concurrency']}",
                    common.fmt_spread(r["one_commit_per_write_entries_per_second"]),
                    common.fmt_spread(r["entries_per_second"]),
                    common.fmt_spread(r["group_over_one_commit_per_write"], 2),
                ]
                for r in compared
            ],
        )
    common.write_json(options.json, "saturation", options, results)


if __name__ == "__main__":
    main()
