"""Storage: the bytes a durable run leaves in the database, against its transcript's JSON.

    .venv/bin/python benchmarks/storage.py [--steps 50,100,200,400,800] [--repeats 3]
                                           [--json out.json]

For each N, one durable run of N steps with the zero-cost model, in two shapes: `echo`
(observations of a dozen bytes, the worst case for per-row overhead) and `read` (1 KiB
observations, closer to what agents read). Bytes per run are measured by difference around
the run, in one database per backend:

- SQLite: the file's size after `PRAGMA wal_checkpoint(TRUNCATE)` (pages the database holds,
  so a partly filled last page counts whole), and from `dbstat` the bytes of the journal's own
  pages (the entries table and its primary-key index) with the payload they carry.
- PostgreSQL: `pg_total_relation_size` of `entries` (heap, TOAST, indexes) and of `runs`.

The transcript's bytes are `len(json.dumps(result.transcript))`. The goal: stored bytes at
most 3 times that at every N, growing linearly in N (constant bytes per step).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from typing import Any

import common
import fakes
from sqlalchemy import Engine, text

from runner import Runner

Sizer = Callable[[Engine], dict[str, int]]
SHAPES = {"echo": 0, "read": 1024}


def sqlite_sizes(engine: Engine) -> dict[str, int]:
    # Outside any transaction (SQLAlchemy would begin one): a checkpoint needs no reader.
    connection = engine.raw_connection()
    try:
        cursor = connection.cursor()

        def one(sql: str) -> Any:
            return cursor.execute(sql).fetchone()

        one("PRAGMA wal_checkpoint(TRUNCATE)")
        (page_size,) = one("PRAGMA page_size")
        (pages,) = one("PRAGMA page_count")
        (free,) = one("PRAGMA freelist_count")
        pgsize, payload = one(
            "SELECT coalesce(sum(pgsize), 0), coalesce(sum(payload), 0) FROM dbstat "
            "WHERE name IN (SELECT name FROM sqlite_master WHERE tbl_name = 'entries')"
        )
        cursor.close()
    finally:
        connection.close()
    return {"total": (pages - free) * page_size, "entries": pgsize, "entries_payload": payload}


def postgres_sizes(engine: Engine) -> dict[str, int]:
    with engine.connect() as connection:
        row = connection.execute(
            text(
                "SELECT pg_total_relation_size('entries'), pg_total_relation_size('runs'), "
                "pg_relation_size('entries')"
            )
        ).one()
    return {"total": row[0] + row[1], "entries": row[0], "entries_heap": row[2]}


def measure_run(runner: Runner, sizer: Sizer, steps: int, size: int) -> dict[str, Any]:
    before = sizer(runner.engine)
    result = runner.run(fakes.make_agent(), fakes.task(steps, size))
    after = sizer(runner.engine)
    assert result.stop_reason == "final" and result.steps == steps, result
    transcript = len(json.dumps(result.transcript).encode())
    stored = {k: after[k] - before[k] for k in after}
    return {"transcript": transcript, **stored}


def measure(
    name: str, url: str, sizer: Sizer, steps: list[int], repeats: int
) -> list[dict[str, Any]]:
    results = []
    with Runner(url, lease_seconds=600) as runner:
        runner.run(fakes.make_agent(), fakes.task(20))  # the first run creates pages for all
        for shape, size in SHAPES.items():
            for n in steps:
                samples = [measure_run(runner, sizer, n, size) for _ in range(repeats)]
                keys = samples[0].keys()
                median = {k: statistics.median(s[k] for s in samples) for k in keys}
                results.append(
                    {
                        "database": name,
                        "shape": shape,
                        "steps": n,
                        **median,
                        "ratio": median["total"] / median["transcript"],
                        "samples": samples,
                    }
                )
    return results


def linearity(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Least-squares bytes = a + b*N, its R^2, and the worst point's distance from it."""
    xs = [float(r["steps"]) for r in rows]
    ys = [float(r["total"]) for r in rows]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    a = my - b * mx
    ss_tot = sum((y - my) ** 2 for y in ys) or 1.0
    ss_res = sum((y - (a + b * x)) ** 2 for x, y in zip(xs, ys, strict=True))
    worst = max(abs(y - (a + b * x)) / y for x, y in zip(xs, ys, strict=True))
    return {"bytes_per_step": b, "intercept": a, "r2": 1 - ss_res / ss_tot, "worst": worst}


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--steps", default="50,100,200,400,800", help="run lengths (comma-separated)")
    p.add_argument("--repeats", type=int, default=3, help="runs per length (median; default 3)")
    options = p.parse_args()
    steps = [int(n) for n in options.steps.split(",")]
    postgres = common.postgres_url_or_none(options)
    results: list[dict[str, Any]] = []
    with common.scratch_folder(options.dir) as folder:
        url = common.sqlite_url(folder, "storage")
        results += measure("sqlite", url, sqlite_sizes, steps, options.repeats)
    if postgres is not None:
        with common.scratch_postgres(postgres) as url:
            results += measure("postgresql", url, postgres_sizes, steps, options.repeats)

    table = []
    fits = {}
    for database in dict.fromkeys(r["database"] for r in results):
        for shape in SHAPES:
            rows = [r for r in results if r["database"] == database and r["shape"] == shape]
            fit = fits[f"{database} {shape}"] = linearity(rows)
            for r in rows:
                table.append(
                    [
                        f"{database} {shape}",
                        r["steps"],
                        f"{r['transcript']:,}",
                        f"{r['total']:,.0f}",
                        f"{r['entries']:,.0f}",
                        f"{r['total'] / r['steps']:,.0f}",
                        f"{r['ratio']:.2f}",
                    ]
                )
            table.append(
                [
                    "  linear fit",
                    "",
                    "",
                    f"{fit['bytes_per_step']:,.0f}/step",
                    "",
                    f"R2 {fit['r2']:.5f}",
                    f"worst {fit['worst']:.1%}",
                ]
            )
    common.print_table(
        f"storage per run: bytes by difference, median of {options.repeats}",
        [
            "database, tool",
            "steps",
            "transcript JSON",
            "stored",
            "of which entries",
            "stored/step",
            "stored / JSON",
        ],
        table,
    )
    common.write_json(options.json, "storage", options, {"runs": results, "fits": fits})


if __name__ == "__main__":
    main()
