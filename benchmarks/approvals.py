"""Approvals: the latency from a person's answer to the approved tool starting, with the
worker idle, on PostgreSQL (woken by NOTIFY) and on SQLite (polling).

    .venv/bin/python benchmarks/approvals.py [--answers 20] [--json out.json]

For each configuration, one `runner worker` process (the real command) serves a scratch
database; `--answers` runs are submitted and taken by it to their wait (their one tool
call needs approval). Then, one at a time, after a random pause of 0.2 to 0.6 s (so the
worker has gone back to sleep: it has nothing else to do), this process approves a run
(`Runner.approve`) and waits until the tool has started: the tool writes the moment it
starts to a file. The latency is that moment minus the moment just before `approve` was
called: the answer's commit, the NOTIFY or the poll, the claim, the journal's replay and
the step's bookkeeping up to the tool. Both clocks are this machine's.

Configurations: PostgreSQL with `--poll 30` (only a NOTIFY can wake the worker in time) and
with the default `--poll 1`; SQLite with the default `--poll 1` and with `--poll 0.1`.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import common
import fakes

from runner import Runner
from runner.core.status import RunStatus

RUNNER = Path(sys.executable).parent / "runner"
REF = fakes.APPROVAL_REF


def starts(path: Path) -> dict[int, float]:
    if not path.exists():
        return {}
    found = {}
    for line in path.read_text().splitlines():
        n, at = line.split()
        found[int(n)] = float(at)
    return found


def wait_until(predicate: Any, timeout: float, what: str) -> None:
    give_up = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > give_up:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.001)


def measure(url: str, poll: float, answers: int, folder: Path, label: str) -> dict[str, Any]:
    log = folder / f"{label}.log"
    started = folder / f"{label}.starts"
    env = {**os.environ, fakes.STARTS_VARIABLE: str(started)}
    env.pop("RUNNER_DATABASE_URL", None)
    env.pop("RUNNER_FAULT", None)
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [str(RUNNER), "worker", "--db", url, "--poll", f"{poll:g}", "--concurrency", "4"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            env=env,
        )
    rng = random.Random(7)
    latencies = []
    try:
        with Runner(url) as runner:
            ids = [runner.submit(REF, str(n), id=f"{label}-{n}") for n in range(answers)]
            wait_until(
                lambda: all(runner.row(i).status is RunStatus.WAITING for i in ids),
                120,
                f"{label}: every run to wait",
            )
            for n, run_id in enumerate(ids):
                time.sleep(rng.uniform(0.2, 0.6))
                before = time.time()
                runner.approve(run_id, by="bench")
                wait_until(lambda n=n: n in starts(started), 60, f"{label}: tool {n} to start")
                latencies.append(starts(started)[n] - before)
    finally:
        worker.terminate()
        worker.wait(30)
    ms = [seconds * 1000 for seconds in latencies]
    ms.sort()
    return {
        "config": label,
        "poll_seconds": poll,
        "answers": len(ms),
        "median_ms": ms[len(ms) // 2],
        "p90_ms": ms[int(len(ms) * 0.9) - 1],
        "min_ms": ms[0],
        "max_ms": ms[-1],
    }


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--answers", type=int, default=20, help="answers per configuration")
    options = p.parse_args()
    postgres = common.postgres_url_or_none(options)
    results = []
    with common.scratch_folder(options.dir) as folder:
        if postgres is not None:
            for poll in (30.0, 1.0):
                with common.scratch_postgres(postgres) as url:
                    label = f"postgresql-notify-poll{poll:g}"
                    results.append(measure(url, poll, options.answers, folder, label))
        for poll in (1.0, 0.1):
            url = common.sqlite_url(folder, f"approvals-{poll:g}")
            label = f"sqlite-poll{poll:g}"
            results.append(measure(url, poll, options.answers, folder, label))
    common.print_table(
        "answer -> approved tool starting, worker idle (ms)",
        ["configuration", "poll s", "answers", "median", "p90", "min", "max"],
        [
            [
                r["config"],
                f"{r['poll_seconds']:g}",
                r["answers"],
                f"{r['median_ms']:.1f}",
                f"{r['p90_ms']:.1f}",
                f"{r['min_ms']:.1f}",
                f"{r['max_ms']:.1f}",
            ]
            for r in results
        ],
    )
    common.write_json(options.json, "approvals", options, results)


if __name__ == "__main__":
    main()
