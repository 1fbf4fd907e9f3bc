"""Recovery after a PostgreSQL outage: how long after the database comes back do runs step
again?

    .venv/bin/python benchmarks/outage.py [--rounds 3] [--down 20] [--lease 10] [--runs 8]
                                          [--json out.json]

A `runner worker` process serves `--runs` runs that never end by themselves (a model that
waits 50 ms a call, then a tool call, for ever). Each round takes the database away for
`--down` seconds (connections refused and every session in it terminated: what a failover
or a restart looks like to a client), then lets it back, and measures, from that instant:
- "first step": when the first new journal entry of any run is committed;
- "all runs": when every run has committed a new entry (the slowest run's recovery).
Both are read by a poller that reconnects every 10 ms and counts each run's entries, so
they are upper bounds by about that much. An outage longer than any backoff's cap shows
the cap: the worker's waits after a database error and a run's write retries both double
up to it. An outage longer than the lease (the default: 20 s against 10 s) interrupts the
runs' writes, and the worker claims them again after the outage: its claim loop's backoff
is what the measure shows. The target is "first step" within 2 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import common
import fakes
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from runner import Runner

RUNNER = Path(sys.executable).with_name("runner")
POLL = 0.01
TERMINATE = text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n")


def counts(url: str) -> dict[str, int] | None:
    """Each run's entry count, or None while the database refuses connections."""
    engine = create_engine(url, pool_size=1, max_overflow=0)
    try:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT run_id, count(*) FROM entries GROUP BY run_id"))
            return {run_id: n for run_id, n in rows}
    except Exception:
        return None
    finally:
        engine.dispose()


def set_available(admin_url: str, name: str, up: bool) -> None:
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(up).lower()}'))
            if not up:
                connection.execute(TERMINATE, {"n": name})
    finally:
        admin.dispose()


def one_round(url: str, admin_url: str, name: str, down: float) -> dict[str, float]:
    set_available(admin_url, name, False)
    time.sleep(down)
    before = None
    set_available(admin_url, name, True)
    back = time.monotonic()
    first = everyone = None
    while everyone is None and time.monotonic() - back < 120:
        now = counts(url)
        if now is not None:
            if before is None:
                before = now  # what was committed before the outage, read at once
            else:
                grown = [r for r, n in now.items() if n > before.get(r, 0)]
                if grown and first is None:
                    first = time.monotonic() - back
                if len(grown) == len(before):
                    everyone = time.monotonic() - back
        time.sleep(POLL)
    if first is None or everyone is None:
        raise SystemExit("the runs did not step again within 120 s of the database's return")
    return {"first": first, "all": everyone}


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--down", type=float, default=20.0, help="seconds each outage lasts")
    p.add_argument("--runs", type=int, default=8)
    p.add_argument(
        "--lease",
        type=float,
        default=10.0,
        help="the worker's lease (an outage past it "
        "interrupts the runs, which the worker claims again once the database is back)",
    )
    options = p.parse_args()
    admin_url = common.postgres_url_or_none(options)
    if admin_url is None:
        raise SystemExit("this benchmark needs PostgreSQL (an outage of SQLite is no outage)")
    results: list[dict[str, float]] = []
    with common.scratch_postgres(admin_url) as url:
        name = make_url(url).database or ""
        with Runner(url) as runner:
            for i in range(options.runs):
                runner.submit(fakes.WAITING_REF, "1000000:0.05", id=f"outage-{i:03d}")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("RUNNER_DATABASE_URL", None)
        worker = subprocess.Popen(
            [
                str(RUNNER),
                "worker",
                "--db",
                url,
                "--concurrency",
                str(options.runs),
                "--lease",
                f"{options.lease:g}",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while len(counts(url) or {}) < options.runs:  # every run has stepped once
                if time.monotonic() > deadline or worker.poll() is not None:
                    raise SystemExit("the worker did not start the runs")
                time.sleep(0.1)
            for n in range(options.rounds):
                result = one_round(url, admin_url, name, options.down)
                results.append(result)
                print(
                    f"round {n + 1}: down {options.down:g} s, first step "
                    f"{result['first']:.2f} s, all runs {result['all']:.2f} s after the return",
                    flush=True,
                )
        finally:
            worker.kill()
            worker.wait()
    first = common.spread([r["first"] for r in results])
    everyone = common.spread([r["all"] for r in results])
    common.print_table(
        f"Steps after a {options.down:g} s outage ({options.runs} runs, one worker, "
        f"{options.lease:g} s lease)",
        ["measure", "min s", "median s", "max s"],
        [
            ["first step after the return", *(f"{first[k]:.2f}" for k in ("min", "median", "max"))],
            ["every run stepped again", *(f"{everyone[k]:.2f}" for k in ("min", "median", "max"))],
        ],
    )
    data: dict[str, Any] = {
        "down": options.down,
        "runs": options.runs,
        "lease": options.lease,
        "rounds": results,
    }
    common.write_json(options.json, "outage", options, data)


if __name__ == "__main__":
    main()
