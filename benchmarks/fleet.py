"""A thousand runs in one worker: runs in flight against the connections they hold.

    .venv/bin/python benchmarks/fleet.py [--runs 1000] [--calls 4] [--sleep 1.0]
                                         [--concurrency N] [--repeats 2] [--json out.json]

For each database (a scratch SQLite file, a scratch PostgreSQL database), `--runs` runs of
`fakes.make_waiting_agent` are queued: its model sleeps `--sleep` seconds a call, like a
real model's latency, for `--calls` calls (three tool calls, then the answer). Then ONE real
`runner worker --concurrency N --once` process (N is `--runs` unless given) drains them.

Reported, per repetition: the wall time from starting the worker process to its exit
(start-up included) and the window from the first claim to the last finish (the runs' own
timestamps), with its parts outside the window: from the start to the first claim, and from
the last finish to the exit; the time from the first claim to the last (filling the slots);
the worker process's CPU time (all its threads); the peak number of runs in
flight (claimed and not yet finished, from those timestamps); the peak number of database
connections the worker process held, sampled every 10 ms (PostgreSQL: the backends
connected to the scratch database, which nothing but the worker uses meanwhile; SQLite: the
worker's open file descriptors on the database file, one per connection); and the pool the
worker chose (its start-up line). "floor" is calls x sleep: what the model's latency alone
allows a run. Beside them, what the database allowed: the drain's commits (one per journal
entry, one per claim), the time of one commit measured right after it on the same database
(300 single-row commits into a table like `entries`), and their product, the time those
commits take one after another, which binds a SQLite file (one writer at a time).

The worker starts as an installed copy does: with Python's bytecode cache (its environment
drops PYTHONDONTWRITEBYTECODE, which made each start compile every runner module anew, about
0.3 s), after one warm-up start on the same database with nothing queued, which writes it.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import common
import fakes
from sqlalchemy import create_engine, func, insert, select, text
from sqlalchemy.pool import NullPool

from runner import Runner
from runner.sql.database import open_engine
from runner.sql.schema import entries, runs

RUNNER = Path(sys.executable).parent / "runner"
SAMPLE_SECONDS = 0.01
POOL_LINE = re.compile(r"pool \d+ connections for concurrency \d+ \(.*\)")


def submit(url: str, count: int, task: str) -> None:
    """Queue `count` runs from this one process: Runner.submit_many, a transaction a batch."""
    agent = fakes.make_waiting_agent()
    with Runner(url) as runner:
        runner.submit_many(agent, [task] * count, wake=False)


class Peak:
    """The highest value a probe returns, sampled on a thread until stopped."""

    def __init__(self, probe: Callable[[], int]) -> None:
        self.probe = probe
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            try:
                value = self.probe()
            except Exception:
                continue  # the process just exited, or the file is being replaced
            self.samples += 1
            self.peak = max(self.peak, value)


def postgres_connections(url: str) -> tuple[Callable[[], int], Callable[[], None]]:
    """Backends on the database of `url` other than the probe's own (one kept connection)."""
    engine = create_engine(url, poolclass=NullPool)
    connection = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    query = text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )

    def probe() -> int:
        return int(connection.execute(query).scalar_one())

    def close() -> None:
        connection.close()
        engine.dispose()

    return probe, close


def sqlite_connections(pid: int, database: Path) -> Callable[[], int]:
    """The process's open descriptors on the database file: one per SQLite connection."""
    target = str(database.resolve())
    folder = Path(f"/proc/{pid}/fd")

    def probe() -> int:
        count = 0
        for fd in os.listdir(folder):
            try:
                if os.readlink(folder / fd) == target:
                    count += 1
            except OSError:
                continue
        return count

    return probe


def commit_latency(url: str, run_id: str, commits: int = 300) -> float:
    """Milliseconds per commit of one entries row, one after another (the floor table, on
    an engine with runner's settings): right after the drain, on the same database."""
    engine = open_engine(url)
    table = common.create_floor(engine)
    rows = common.entry_rows(engine, run_id)
    statement = insert(table)
    with engine.connect() as connection:
        started = time.perf_counter()
        for seq in range(commits):
            with connection.begin():
                connection.execute(statement, {**rows[seq % len(rows)], "seq": seq})
        elapsed = time.perf_counter() - started
    engine.dispose()
    return elapsed / commits * 1000


def in_flight(spans: list[tuple[datetime, datetime]]) -> int:
    """The most runs claimed and not yet finished at one moment."""
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    peak = now = 0
    for _, change in events:
        now += change
        peak = max(peak, now)
    return peak


def warm_up(url: str, env: dict[str, str]) -> None:
    """One start of the worker with nothing queued: it writes the bytecode cache."""
    command = [str(RUNNER), "worker", "--once", "--db", url]
    subprocess.run(command, env=env, check=True, capture_output=True)


def drain(url: str, options: Any, sqlite_file: Path | None) -> dict[str, Any]:
    task = f"{options.calls}:{options.sleep}"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("RUNNER_") and k != "PYTHONDONTWRITEBYTECODE"
    }
    warm_up(url, env)
    started = time.perf_counter()
    submit(url, options.runs, task)
    submit_seconds = time.perf_counter() - started
    concurrency = options.concurrency or options.runs
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"fleet-worker-{os.getpid()}.log"
    command = [str(RUNNER), "worker", "--concurrency", str(concurrency), "--once", "--db", url]
    close: Callable[[], None] = lambda: None  # noqa: E731
    with log.open("w") as stderr:
        started = time.perf_counter()
        started_at = datetime.now(UTC)
        worker = subprocess.Popen(command, env=env, stderr=stderr, stdout=subprocess.DEVNULL)
        if sqlite_file is not None:
            probe = sqlite_connections(worker.pid, sqlite_file)
        else:
            probe, close = postgres_connections(url)
        try:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            with Peak(probe) as connections:
                code = worker.wait(timeout=600)
            wall = time.perf_counter() - started
            ended_at = datetime.now(UTC)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
        finally:
            close()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = log.read_text()
    log.unlink()
    if code != 0:
        raise SystemExit(f"the worker exited with {code}:\n{lines[-2000:]}")
    pool = POOL_LINE.search(lines)
    engine = create_engine(url, poolclass=NullPool)
    with engine.connect() as connection:
        rows = connection.execute(
            select(
                runs.c.id, runs.c.leased_at, runs.c.finished_at, runs.c.stop_reason, runs.c.steps
            )
        ).all()
        written = connection.execute(select(func.count()).select_from(entries)).scalar_one()
    engine.dispose()
    first_run = rows[0].id
    finished = [r for r in rows if r.stop_reason == "final" and r.steps == options.calls]
    if len(finished) != options.runs:
        raise SystemExit(f"only {len(finished)} of {options.runs} runs finished as asked")
    # One per entry written, and at most one per claim (a worker claims in batches): the
    # commits a drain makes at most, to set their time in a row beside the drain.
    commits = written + len(rows)
    commit_ms = commit_latency(url, first_run)
    spans = [(_utc(r.leased_at), _utc(r.finished_at)) for r in rows]
    first = min(start for start, _ in spans)
    last = max(end for _, end in spans)
    last_claim = max(start for start, _ in spans)
    return {
        "runs": options.runs,
        "concurrency": concurrency,
        "submit_seconds": submit_seconds,
        "wall_seconds": wall,
        "worker_cpu_seconds": cpu,
        "window_seconds": (last - first).total_seconds(),
        "to_first_claim_seconds": (first - started_at).total_seconds(),
        "claims_seconds": (last_claim - first).total_seconds(),
        "after_last_finish_seconds": (ended_at - last).total_seconds(),
        "commits": commits,
        "commit_ms": commit_ms,
        "serial_commit_seconds": commits * commit_ms / 1000,
        "peak_in_flight": in_flight(spans),
        "peak_connections": connections.peak,
        "connection_samples": connections.samples,
        "pool": pool.group(0) if pool else None,
    }


def _utc(value: datetime) -> datetime:
    """A run's timestamp, aware (SQLite's come back naive, in UTC)."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--runs", type=int, default=1000, help="runs queued (default 1000)")
    p.add_argument("--calls", type=int, default=4, help="model calls per run (default 4)")
    p.add_argument("--sleep", type=float, default=1.0, help="seconds per model call (1.0)")
    p.add_argument("--concurrency", type=int, default=None, help="the worker's (default: runs)")
    p.add_argument("--repeats", type=int, default=2, help="repetitions (default 2)")
    options = p.parse_args()
    postgres = common.postgres_url_or_none(options)
    results: list[dict[str, Any]] = []
    with common.scratch_folder(options.dir) as folder:
        for repeat in range(options.repeats):
            name = f"fleet{repeat}"
            url = common.sqlite_url(folder, name)
            results.append({"database": "sqlite", **drain(url, options, folder / f"{name}.db")})
            print(results[-1], file=sys.stderr)
            if postgres is not None:
                with common.scratch_postgres(postgres) as url:
                    results.append({"database": "postgresql", **drain(url, options, None)})
                print(results[-1], file=sys.stderr)
    floor = options.calls * options.sleep
    common.print_table(
        f"{options.runs} runs of {options.calls} model calls of {options.sleep:g} s "
        f"(floor {floor:g} s), one worker process",
        [
            "database",
            "concurrency",
            "worker wall s",
            "first claim to last finish s",
            "start to first claim s",
            "first to last claim s",
            "last finish to exit s",
            "peak runs in flight",
            "peak connections",
            "worker CPU s",
            "commits",
            "commit ms",
            "commits one after another s",
            "submit s",
            "the worker's pool",
        ],
        [
            [
                r["database"],
                r["concurrency"],
                f"{r['wall_seconds']:.1f}",
                f"{r['window_seconds']:.1f}",
                f"{r['to_first_claim_seconds']:.2f}",
                f"{r['claims_seconds']:.2f}",
                f"{r['after_last_finish_seconds']:.2f}",
                r["peak_in_flight"],
                r["peak_connections"],
                f"{r['worker_cpu_seconds']:.1f}",
                r["commits"],
                f"{r['commit_ms']:.2f}",
                f"{r['serial_commit_seconds']:.1f}",
                f"{r['submit_seconds']:.1f}",
                r["pool"],
            ]
            for r in results
        ],
    )
    common.write_json(options.json, "fleet", options, results)


if __name__ == "__main__":
    main()
