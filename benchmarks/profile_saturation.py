"""One worker at saturation to profile: `--concurrency` runs at once of the zero-cost model
and tool (benchmarks/fakes.py), drained by one `runner.Worker` in this process, so that a
profiler sees the worker's whole CPU: its run threads, claims, heartbeats and sweeps.

    .venv/bin/py-spy record -r 200 --format raw -o sat.txt -- \
        .venv/bin/python benchmarks/profile_saturation.py --postgres URL
    .venv/bin/python benchmarks/profile_saturation.py --postgres URL --statements

Queues `--runs` runs of `--steps` steps on a scratch database (PostgreSQL when a URL is
given, else a scratch SQLite file), drains them, and prints the CPU per journal entry and,
with `--statements`, the statements the worker sent per entry, by their first words.
"""

from __future__ import annotations

import collections
import time
from typing import Any

import common
import fakes
from sqlalchemy import func, select

from runner import Runner
from runner.service.worker import Worker
from runner.sql.schema import entries


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--runs", type=int, default=600, help="runs queued (default 600)")
    p.add_argument("--steps", type=int, default=4, help="steps per run (default 4)")
    p.add_argument("--concurrency", type=int, default=40, help="runs at once (default 40)")
    p.add_argument("--statements", action="store_true", help="count the statements sent")
    options = p.parse_args()
    postgres = common.postgres_url_or_none(options)
    with common.scratch_folder(options.dir) as folder:
        if postgres is not None:
            with common.scratch_postgres(postgres) as url:
                drain(url, options)
        else:
            drain(common.sqlite_url(folder, "saturation"), options)


def drain(url: str, options: Any) -> None:
    with Runner(url, lease_seconds=600) as runner:
        runner.submit_many(fakes.make_agent(), [fakes.task(options.steps)] * options.runs)
    worker = Worker(url, concurrency=options.concurrency, poll=0.05, once=True)
    sent: collections.Counter[str] = collections.Counter()
    if options.statements:
        count_statements(sent)
    cpu, wall = time.process_time(), time.perf_counter()
    worker.serve()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    with Runner(url) as runner, runner.engine.connect() as connection:
        written = connection.execute(select(func.count()).select_from(entries)).scalar_one()
    print(
        f"{written} entries in {wall:.2f} s: {written / wall:.0f} entries/s, "
        f"{cpu / written * 1e6:.0f} us of CPU per entry"
    )
    for words, n in sent.most_common():
        print(f"{n / written:8.3f} per entry  {words}")


def count_statements(sent: collections.Counter[str]) -> None:
    """Count every statement psycopg (or sqlite3) is asked to run, by its first words."""
    try:
        import psycopg

        cursor: Any = psycopg.Cursor
    except ImportError:  # pragma: no cover
        return
    execute = cursor.execute

    def counted(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        text = query if isinstance(query, str) else str(query)
        sent[" ".join(text.split()[:3])[:60]] += 1
        return execute(self, query, *args, **kwargs)

    cursor.execute = counted


if __name__ == "__main__":
    main()
