"""Bulk submit: 10,000 runs by `Runner.submit_many` and by `runner submit --from`.

    .venv/bin/python benchmarks/bulk_submit.py [--runs 10000] [--repeats 3]
                                               [--single 200] [--json out.json]

Each repetition, on a fresh scratch database of each kind, side by side:

1. `Runner.submit_many(agent, tasks)`: N tasks, in batches of 1,000 (one transaction each);
2. `runner submit AGENT --from FILE`: the same N lines, as a subprocess (its start-up
   included: what a user waits for);
3. `Runner.submit` called once per run, for `--single` runs, in one process: the rate
   runs would be submitted at one at a time, for the ratio;
4. the claim that follows: `leases.claim_some` of one run with the N runs queued, 50 times
   each: by a worker serving the queue, by one serving every queue, and with the queue limited
   (`max_running` far above what runs, so the limit is counted and never reached).

Every figure is the median (min-max) over the repetitions.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import common
import fakes

from runner import Runner
from runner.sql import leases

CLAIMS = 50


def measure(url: str, folder: Path, runs: int, single: int) -> dict[str, float]:
    tasks = [{"task": fakes.task(2), "queue": "bulk", "priority": i % 3} for i in range(runs)]
    with Runner(url) as runner:
        started = time.perf_counter()
        done = runner.submit_many(fakes.REF, tasks)
        many = time.perf_counter() - started
        assert done.created == runs
        started = time.perf_counter()
        for i in range(single):
            runner.submit(fakes.REF, fakes.task(2), id=f"one-{i}")
        one = (time.perf_counter() - started) / single

        claims = {}
        for way, served, limit in (
            ("one", ["bulk"], None),
            ("any", None, None),
            ("limited", ["bulk"], 1_000_000),
        ):
            runner.set_queue_limit("bulk", limit)
            started = time.perf_counter()
            for i in range(CLAIMS):
                claim = leases.claim_some(
                    runner.engine,
                    limit=1,
                    owner=f"bench:{i}:{way}",
                    lease_seconds=60,
                    max_resumes=3,
                    queues=served,
                    clock=runner.clock,
                )
                assert claim
            claims[way] = (time.perf_counter() - started) / CLAIMS

    lines = folder / "tasks.jsonl"
    lines.write_text("".join(json.dumps({"task": t["task"], "queue": "cli"}) + "\n" for t in tasks))
    runner_bin = str(Path(sys.executable).parent / "runner")
    started = time.perf_counter()
    subprocess.run(
        [runner_bin, "submit", fakes.REF, "--from", str(lines), "--db", url],
        check=True,
        capture_output=True,
    )
    cli = time.perf_counter() - started
    return {
        "submit_many_s": many,
        "submit_many_runs_per_s": runs / many,
        "cli_from_s": cli,
        "single_submit_ms": one * 1000,
        "single_extrapolated_s": one * runs,
        "speedup": one * runs / many,
        "claim_ms": claims["one"] * 1000,
        "claim_any_queue_ms": claims["any"] * 1000,
        "claim_limited_ms": claims["limited"] * 1000,
    }


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--runs", type=int, default=10_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--single", type=int, default=200)
    options = p.parse_args()
    postgres = common.postgres_url_or_none(options)
    results: dict[str, list[dict[str, float]]] = {"SQLite": [], "PostgreSQL": []}
    with common.scratch_folder(options.dir) as folder:
        for repeat in range(options.repeats):
            url = common.sqlite_url(folder, f"bulk-{repeat}")
            results["SQLite"].append(measure(url, folder, options.runs, options.single))
            if postgres is not None:
                with common.scratch_postgres(postgres) as pg:
                    results["PostgreSQL"].append(measure(pg, folder, options.runs, options.single))
    rows: list[list[Any]] = []
    for database, measured in results.items():
        if not measured:
            continue

        def of(key: str, digits: int = 2, found: list[dict[str, float]] = measured) -> str:
            return common.fmt_spread(common.spread([m[key] for m in found]), digits)

        rows.append(
            [
                database,
                of("submit_many_s"),
                of("submit_many_runs_per_s", 0),
                of("cli_from_s"),
                of("single_submit_ms"),
                of("speedup", 0),
                of("claim_ms"),
                of("claim_any_queue_ms"),
                of("claim_limited_ms"),
            ]
        )
    common.print_table(
        f"{options.runs:,} runs submitted; median (min-max) of {options.repeats}",
        [
            "database",
            "submit_many s",
            "runs/s",
            "submit --from s",
            "one submit ms",
            "submit_many vs one at a time",
            f"claim ms, {options.runs:,} queued",
            "any queue",
            "queue limited",
        ],
        rows,
    )
    common.write_json(options.json, "bulk_submit", options, results)


if __name__ == "__main__":
    main()
