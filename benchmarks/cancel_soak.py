"""Cancel soak: trees of sub-agents cancelled while workers are SIGKILLed (issue 40, point 2).

    .venv/bin/python benchmarks/cancel_soak.py [--trees 40] [--within 20] [--no-postgres]
        [--json out.json]

`--trees` randomised trees (benchmarks/soak_agents.py, as crash_soak.py's scenario E, with no
budget) run on 2 `runner worker` processes of 8 slots (--lease 3) while one of them is
SIGKILLed (and replaced) every 2 to 5 s, on SQLite and on PostgreSQL. Each tree's root is
cancelled at a random moment 0.5 to `--within` s after the trees are queued. Per tree: how
long after its cancel the last of its runs that ended after it was finished (the goal:
within the lease plus 2 s, kills included), and how many of its runs ended with an empty
journal (the goal: none). Printed: the worst and the median of those delays against the
goal, the runs that ended after their cancel and how, the kills, and the runs left
unfinished. Figures of one run (2 cores, load 6): SQLite worst 1.29 s, median 0.0 s;
PostgreSQL worst 0.39 s, median 0.01 s; 6 kills each, no tree over 5 s, no empty journal
(before issue 40's change a soak saw a descendant stay `running` 45.5 s).
"""

from __future__ import annotations

import random
import statistics
import time
from pathlib import Path
from typing import Any

import common
from crash_soak import LEASE_SECONDS, TREE_REF, Fleet, unfinished
from sqlalchemy import func, select

from runner import Runner
from runner.sql.database import open_engine
from runner.sql.schema import entries, runs

GOAL_SECONDS = LEASE_SECONDS + 2


def scenario(url: str, folder: Path, label: str, options: Any) -> dict[str, Any]:
    rng = random.Random(options.seed)
    ledger = folder / f"ledger-cancel-{label}.jsonl"
    with Runner(url) as runner:
        roots = [f"cx-{n:03d}" for n in range(options.trees)]
        for n, root in enumerate(roots):
            runner.submit(TREE_REF, f"t{options.seed}-{n}", id=root, max_tokens=1_000_000)
        began = time.time()
        due = sorted((began + rng.uniform(0.5, options.within), root) for root in roots)
        cancelled: dict[str, Any] = {}  # root -> the database's time of its cancel

        def done() -> bool:
            while due and due[0][0] <= time.time():
                _, root = due.pop(0)
                cancelled[root] = runner.now()
                runner.cancel(root)
            return not due and not unfinished(url, "cx-")

        fleet = Fleet(url, 2, 8, {"RUNNER_SOAK_LEDGER": str(ledger)}, options.seed)
        try:
            seconds = fleet.run(done, options.timeout)
        finally:
            fleet.stop()
    delays: list[float] = []
    empty, ended = 0, 0
    stops: set[str] = set()
    for root, at in cancelled.items():
        rows = _tree(url, root)
        # The runs that ended after the cancel: its own work, or what it let finish first.
        after = [row for row in rows if row.finished_at is not None and row.finished_at >= at]
        ended += len(after)
        stops.update(str(row.stop_reason) for row in after)
        empty += sum(1 for row in rows if not _entries(url, row.id))
        delays.append(max(((row.finished_at - at).total_seconds() for row in after), default=0))
    return {
        "label": label,
        "trees": len(cancelled),
        "seconds": round(seconds, 1),
        "kills": fleet.kills,
        "cancelled_runs": ended,
        "stop_reasons": sorted(stops),
        "worst_delay": round(max(delays, default=0.0), 2),
        "median_delay": round(statistics.median(delays), 2) if delays else 0.0,
        "over_goal": sum(1 for delay in delays if delay > GOAL_SECONDS),
        "empty_journals": empty,
        "unfinished": unfinished(url, "cx-"),
    }


def _tree(url: str, root: str) -> list[Any]:
    engine = open_engine(url)
    try:
        with engine.connect() as connection:
            return list(connection.execute(select(runs).where(runs.c.root_id == root)))
    finally:
        engine.dispose()


def _entries(url: str, run_id: str) -> int:
    engine = open_engine(url)
    try:
        with engine.connect() as connection:
            query = select(func.count()).select_from(entries).where(entries.c.run_id == run_id)
            return int(connection.execute(query).scalar_one())
    finally:
        engine.dispose()


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--trees", type=int, default=40)
    p.add_argument("--seed", type=int, default=40)
    p.add_argument("--timeout", type=float, default=300.0, help="the longest drain, seconds")
    p.add_argument("--within", type=float, default=20.0, help="cancels come within, seconds")
    options = p.parse_args()
    pg = common.postgres_url_or_none(options)
    shown = []
    with common.scratch_folder(options.dir) as folder:
        shown.append(scenario(common.sqlite_url(folder, "cancel"), folder, "sqlite", options))
        if pg is not None:
            with common.scratch_postgres(pg) as url:
                shown.append(scenario(url, folder, "postgres", options))
    common.print_table(
        f"Cancels of {options.trees} trees, workers SIGKILLed (goal: every run finished "
        f"within {GOAL_SECONDS:g} s of its tree's cancel)",
        [
            "database", "s", "kills", "runs ended after", "stop reasons", "worst (s)",
            "median (s)", "trees over the goal", "empty journals", "unfinished",
        ],
        [
            (
                r["label"], r["seconds"], r["kills"], r["cancelled_runs"],
                " ".join(r["stop_reasons"]), r["worst_delay"], r["median_delay"],
                f"{r['over_goal']}/{r['trees']}", r["empty_journals"], r["unfinished"],
            )
            for r in shown
        ],
    )  # fmt: skip
    common.write_json(options.json, "cancel_soak", options, shown)


if __name__ == "__main__":
    main()
