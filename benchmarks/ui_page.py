"""The page: how long `runner ui` takes to render a 10,000-step run, and the runs page.

    .venv/bin/python benchmarks/ui_page.py [--steps 10000] [--repeats 7] [--json out.json]

A finished run of `--steps` tool steps (the task, then an action and a 1 KiB observation a
step, then the answer) is written as the store writes it, in one transaction. Each request
goes through the whole application (Starlette's test client: routing, the guard, the
read-only engine, the queries, the templates), without the network: the first page of the
transcript (steps 1-50, with the counters chart over every step), a page in the middle,
the last page, and the runs page. Each figure is the median of `--repeats` requests after
one warm-up.
"""

from __future__ import annotations

import time
from typing import Any

import common
import fakes
from sqlalchemy import insert, update
from starlette.testclient import TestClient

from runner.core.actions import ActionKind
from runner.core.budgets import Budgets
from runner.core.clock import utc_now
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind
from runner.core.status import RunStatus
from runner.sql import leases
from runner.sql import runs as store
from runner.sql.database import open_engine
from runner.sql.schema import entries, runs
from runner.store.rows import entry_row
from runner.ui import make_app


def long_run(url: str, steps: int) -> str:
    engine = open_engine(url)
    run_id = "bench-ui-long"
    store.create_run(
        engine,
        run_id=run_id,
        agent=fakes.REF,
        agent_name="bench",
        release="b1",
        task="read every page",
        budgets=Budgets(**fakes.UNLIMITED).as_dict(),
    )
    claim = leases.claim_run(engine, run_id, owner="bench", lease_seconds=3600, max_resumes=3)
    at = utc_now()
    journal = [Entry(EntryKind.TASK, 0, Counters(), content="read every page")]
    for step in range(1, steps):
        counters = Counters(steps=step, tokens=30 * step, cost=0.0001 * step)
        key = f"{run_id}-{step}"
        journal.append(
            Entry(
                EntryKind.ACTION,
                step,
                counters,
                action_type=ActionKind.TOOL,
                tool="read",
                args={"path": f"docs/{step}.md"},
                idempotency_key=key,
                tokens=30,
                cost=0.0001,
            )
        )
        journal.append(
            Entry(
                EntryKind.OBSERVATION,
                step,
                counters,
                content="x" * 1024,
                tool="read",
                idempotency_key=key,
            )
        )
    done = Counters(steps=steps, tokens=30 * steps, cost=0.0001 * steps)
    journal.append(
        Entry(EntryKind.FINAL, steps, done, content="read them all", action_type=ActionKind.FINAL)
    )
    rows = [entry_row(run_id, seq, claim.epoch, e, at) for seq, e in enumerate(journal)]
    with engine.begin() as connection:
        connection.execute(insert(entries), rows)
        connection.execute(
            update(runs)
            .where(runs.c.id == run_id)
            .values(
                status=RunStatus.FINISHED,
                stop_reason="final",
                output="read them all",
                output_format="text",
                steps=done.steps,
                tokens=done.tokens,
                cost=done.cost,
                lease_owner=None,
                finished_at=at,
            )
        )
    engine.dispose()
    return run_id


def measure(name: str, url: str, steps: int, repeats: int) -> list[dict[str, Any]]:
    run_id = long_run(url, steps)
    last = 1 + (steps - 1) // 50 * 50
    pages = {
        "run, first page": f"/runs/{run_id}",
        "run, middle page": f"/runs/{run_id}?from={1 + steps // 100 * 50}",
        "run, last page": f"/runs/{run_id}?from={last}",
        "runs": "/",
        "stop reasons": "/stats",
    }
    results = []
    with TestClient(make_app(url), base_url="http://127.0.0.1:8780") as client:
        for label, path in pages.items():
            assert client.get(path).status_code == 200, path  # warm-up
            times = []
            for _ in range(repeats):
                started = time.perf_counter()
                response = client.get(path)
                times.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200
            results.append(
                {
                    "database": name,
                    "page": label,
                    "ms": common.spread(times),
                    "bytes": len(response.content),
                }
            )
    return results


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--repeats", type=int, default=7)
    options = p.parse_args()
    results: list[dict[str, Any]] = []
    with common.scratch_folder(options.dir) as folder:
        results += measure(
            "SQLite", common.sqlite_url(folder, "ui"), options.steps, options.repeats
        )
    postgres = common.postgres_url_or_none(options)
    if postgres is not None:
        with common.scratch_postgres(postgres) as url:
            results += measure("PostgreSQL", url, options.steps, options.repeats)
    common.print_table(
        f"runner ui, a {options.steps:,}-step run: ms per request, median (min-max)",
        ["database", "page", "ms", "KiB"],
        [
            [r["database"], r["page"], common.fmt_spread(r["ms"], 1), f"{r['bytes'] / 1024:.0f}"]
            for r in results
        ],
    )
    common.write_json(options.json, "ui_page", options, results)


if __name__ == "__main__":
    main()
