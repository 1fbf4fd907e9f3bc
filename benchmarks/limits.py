"""Provider limits: a fleet of workers against a provider that enforces tokens and requests
per minute, with the limit set in runner and without it.

    .venv/bin/python benchmarks/limits.py [--runs 300] [--calls 5] [--tokens-per-minute 60000]
        [--requests-per-minute 300] [--completion 300] [--latency 0.2]
        [--postgres-workers 3] [--concurrency 50] [--no-postgres] [--json out.json]

A local fake provider (benchmarks/fake_provider.py, its own process) speaks OpenAI's Chat
Completions wire format and enforces `--tokens-per-minute` and `--requests-per-minute` over
a sliding minute, answering 429 with Retry-After above them. `--runs` runs of
`fakes.make_provider_agent` (the real `OpenAIChat` adapter through the real `openai` SDK; each
run makes `--calls` model calls: tool calls, then its answer) are drained by real
`runner worker` processes: `--postgres-workers` on PostgreSQL, one on SQLite. Each database
is run twice: with `runner limit set openai/bench-model` at the provider's numbers, and
without a limit (the same load). Reported per case: the 429s the provider sent, the calls
and tokens it accepted, the drain's wall time (first accepted call to last), the token rate
over the drain and its ratio to the limit, the most tokens the provider saw in any sliding
minute (over the limit means it let some through late: it never does), how the runs
stopped, and the runs' journaled waits for the limit (`limit_wait` entries).

Full size (300 runs of 5 calls at 60,000 tokens a minute) takes about ten minutes a case;
use `--runs` to scale (the figures recorded in docs/performance/sub-agents-and-limits.md say
what was run).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import common
import fakes
from sqlalchemy import func, select

from runner import Runner
from runner.sql.database import open_engine
from runner.sql.schema import entries, runs

HERE = Path(__file__).resolve().parent
RUNNER = Path(sys.executable).parent / "runner"
LIMIT = "openai/bench-model"


def provider(options: Any) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "fake_provider.py"),
            "--tokens-per-minute",
            str(options.tokens_per_minute),
            "--requests-per-minute",
            str(options.requests_per_minute),
            "--calls",
            str(options.calls),
            "--completion",
            str(options.completion),
            "--latency",
            str(options.latency),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    return process, process.stdout.readline().strip()


def unfinished(url: str) -> int:
    engine = open_engine(url)
    try:
        with engine.connect() as connection:
            return int(
                connection.execute(
                    select(func.count()).select_from(runs).where(runs.c.status != "finished")
                ).scalar_one()
            )
    finally:
        engine.dispose()


def outcome(url: str) -> tuple[Counter[str], int, float]:
    engine = open_engine(url)
    try:
        with engine.connect() as connection:
            reasons = Counter(
                str(r) for r in connection.execute(select(runs.c.stop_reason)).scalars()
            )
            waits = [
                (e or {}).get("waited_seconds", 0.0)
                for e in connection.execute(
                    select(entries.c.args).where(entries.c.kind == "limit_wait")
                ).scalars()
            ]
    finally:
        engine.dispose()
    return reasons, len(waits), sum(waits)


def case(url: str, workers: int, limited: bool, options: Any) -> dict[str, Any]:
    with Runner(url) as runner:
        if limited:
            runner.set_limit(
                LIMIT,
                tokens_per_minute=options.tokens_per_minute,
                requests_per_minute=options.requests_per_minute,
            )
        runner.submit_many(fakes.make_provider_agent(), ["go"] * options.runs, wake=False)
    fake, base_url = provider(options)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNER_")}
    env.update(
        RUNNER_DATABASE_URL=url,
        OPENAI_BASE_URL=base_url,
        OPENAI_API_KEY="bench",
        RUNNER_BENCH_COMPLETION=str(options.completion),
    )
    started = time.time()
    fleet = [
        subprocess.Popen(
            [
                str(RUNNER),
                "--log-level",
                "warning",
                "worker",
                "--concurrency",
                str(options.concurrency),
                "--poll",
                "0.2",
            ],
            env=env,
            cwd=HERE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(workers)
    ]
    try:
        while unfinished(url) and time.time() - started < options.timeout:
            time.sleep(1.0)
    finally:
        for process in fleet:
            process.send_signal(signal.SIGTERM)
        for process in fleet:
            process.wait(60)
        fake.send_signal(signal.SIGTERM)
        assert fake.stdout is not None
        seen = json.loads(fake.stdout.read())
        fake.wait(30)
    accepted = [(at, tokens) for at, tokens in seen["accepted"]]
    tokens = sum(t for _, t in accepted)
    first, last = accepted[0][0], accepted[-1][0]
    minutes = max(last - first, 1e-9) / 60
    busiest, j, window = 0, 0, 0
    for at, t in accepted:  # the most tokens in any sliding minute the provider saw
        window += t
        while accepted[j][0] <= at - 60:
            window -= accepted[j][1]
            j += 1
        busiest = max(busiest, window)
    reasons, waits, waited = outcome(url)
    return {
        "workers": workers,
        "limited": limited,
        "429s": len(seen["refused"]),
        "calls": len(accepted),
        "tokens": tokens,
        "seconds": last - first,
        "tokens_per_minute": tokens / minutes,
        "ratio": tokens / minutes / options.tokens_per_minute,
        "busiest_minute": busiest,
        "stop_reasons": dict(reasons),
        "limit_waits": waits,
        "waited_seconds": waited,
    }


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--runs", type=int, default=300)
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--tokens-per-minute", type=int, default=60_000)
    p.add_argument("--requests-per-minute", type=int, default=300)
    p.add_argument("--completion", type=int, default=300)
    p.add_argument("--latency", type=float, default=0.2)
    p.add_argument("--postgres-workers", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=50)
    p.add_argument("--timeout", type=float, default=1800.0)
    p.add_argument("--only", choices=("limited", "unlimited"), default=None)
    options = p.parse_args()
    rows, results = [], []
    postgres = common.postgres_url_or_none(options)
    with common.scratch_folder(None) as folder:
        for database in ("postgresql", "sqlite"):
            if database == "postgresql" and postgres is None:
                continue
            for limited in (True, False):
                if options.only is not None and limited != (options.only == "limited"):
                    continue
                if database == "sqlite":
                    url = common.sqlite_url(folder, f"limits-{limited}")
                    found = case(url, 1, limited, options)
                else:
                    with common.scratch_postgres(postgres) as url:  # type: ignore[arg-type]
                        found = case(url, options.postgres_workers, limited, options)
                found["database"] = database
                results.append(found)
                rows.append([
                    database, found["workers"], "set" if limited else "none", found["429s"],
                    found["calls"], f"{found['tokens']:,}", f"{found['seconds']:.0f}",
                    f"{found['tokens_per_minute']:,.0f}", f"{found['ratio']:.2f}",
                    f"{found['busiest_minute']:,}",
                    ", ".join(f"{k} {v}" for k, v in sorted(found["stop_reasons"].items())),
                    f"{found['limit_waits']} ({found['waited_seconds']:.0f}s)",
                ])  # fmt: skip
                print(json.dumps(found), flush=True)
    common.print_table(
        f"{options.runs} runs x {options.calls} calls, provider limit "
        f"{options.tokens_per_minute:,} tokens / {options.requests_per_minute} requests a minute",
        ["database", "workers", "limit", "429s", "calls", "tokens", "s", "tokens/min",
         "of limit", "busiest minute", "stops", "limit waits"],
        rows,
    )  # fmt: skip
    common.write_json(options.json, "limits", options, results)


if __name__ == "__main__":
    main()
