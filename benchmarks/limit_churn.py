"""Limit churn: runs waiting for a `--concurrency` slot while one slow call holds it (issue 40,
point 4).

    .venv/bin/python benchmarks/limit_churn.py [--waiting 10] [--slow 20] [--no-postgres]
        [--json out.json]

A limit of one call at a time; a run whose one model call lasts `--slow` seconds takes the
slot, then `--waiting` runs (one quick call each) are queued behind it, all drained by one
`runner worker --concurrency N+1 --poll 0.2`. Counted: the "parked" lines the worker logged,
the claims made (the sum of the runs' lease epochs) and the highest epoch of a run. With a
recheck of waiting runs every second, each waiting run was claimed again about once a second
of the slow call (the issue saw 934 parked lines and an epoch of 65 in two minutes); woken by
the call's end instead, each parks once and is claimed twice in all: the ratio printed is the
claims made against that floor, 2 per waiting run and 1 for the slow run.

Figures of one run (10 waiting, a 20 s call, 2 cores at load 6): woken by the call's end,
SQLite 10 parked lines, 21 claims, highest epoch 2 (ratio 1.0, drained 20.3 s after the
waiting runs were queued), PostgreSQL the same (20.8 s); with the 1 s recheck and no wake-up
(the code before issue 40's change, rebuilt for the comparison), SQLite 189 parked lines,
200 claims, highest epoch 22 (ratio 9.52, 24.1 s), PostgreSQL 195, 206, 23 (9.81, 25.8 s).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import common
from sqlalchemy import func, select

from runner import Agent, Runner
from runner.sql.database import open_engine
from runner.sql.schema import runs
from runner.testing import FunctionModel

RUNNER = Path(sys.executable).parent / "runner"
SLOW_VARIABLE = "RUNNER_BENCH_SLOW"


def _answer(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    if transcript[0]["content"] == "slow":
        time.sleep(float(os.environ.get(SLOW_VARIABLE, "20")))
    return {"type": "final", "content": "done", "usage": 10}


# Loaded by path by the worker (this file, `benchmarks/limit_churn.py:agent`).
agent = Agent(FunctionModel(_answer), limit="one-at-a-time")


def case(url: str, folder: Path, label: str, options: Any) -> dict[str, Any]:
    ref = f"{Path(__file__).resolve()}:agent"
    log = folder / f"worker-{label}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNER_")}
    env.update(RUNNER_DATABASE_URL=url, **{SLOW_VARIABLE: f"{options.slow:g}"})
    with Runner(url) as runner:
        runner.set_limit("one-at-a-time", concurrency=1)
        slow = runner.submit(ref, "slow", id="slow")
        with log.open("w") as written:
            worker = subprocess.Popen(
                [str(RUNNER), "worker", "--concurrency", str(options.waiting + 1),
                 "--poll", "0.2"],
                env=env, stdout=written, stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            while runner.limits()[0].in_flight == 0:
                time.sleep(0.05)
            waiting = [runner.submit(ref, f"w{n}", id=f"w{n:02d}") for n in range(options.waiting)]
            started = time.time()
            ids = [slow, *waiting]
            while any(runner.row(run_id).status != "finished" for run_id in ids):
                time.sleep(0.1)
            seconds = time.time() - started
        finally:
            worker.terminate()
            worker.wait(60)
    engine = open_engine(url)
    try:
        with engine.connect() as connection:
            claims, highest = connection.execute(
                select(func.sum(runs.c.lease_epoch), func.max(runs.c.lease_epoch))
            ).one()
    finally:
        engine.dispose()
    floor = 2 * options.waiting + 1
    return {
        "label": label,
        "seconds": round(seconds, 1),
        "parked_lines": log.read_text().count(" parked: "),
        "claims": int(claims),
        "highest_epoch": int(highest),
        "ratio": round(int(claims) / floor, 2),
    }


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--waiting", type=int, default=10)
    p.add_argument("--slow", type=float, default=20.0, help="the slow call, seconds")
    options = p.parse_args()
    pg = common.postgres_url_or_none(options)
    shown = []
    with common.scratch_folder(options.dir) as folder:
        shown.append(case(common.sqlite_url(folder, "churn"), folder, "sqlite", options))
        if pg is not None:
            with common.scratch_postgres(pg) as url:
                shown.append(case(url, folder, "postgres", options))
    common.print_table(
        f"{options.waiting} runs waiting for a slot while a {options.slow:g} s call holds it",
        ["database", "s", "parked lines", "claims", "highest epoch", "claims / floor"],
        [
            (r["label"], r["seconds"], r["parked_lines"], r["claims"], r["highest_epoch"],
             r["ratio"])
            for r in shown
        ],
    )  # fmt: skip
    common.write_json(options.json, "limit_churn", options, shown)


if __name__ == "__main__":
    main()
