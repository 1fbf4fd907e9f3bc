"""Workers: steps per second for 1, 2 and 4 worker processes on PostgreSQL, next to the
raw commit rate of as many connections, measured in the same run.

    .venv/bin/python benchmarks/workers.py [--processes 1,2,4] [--concurrency 4]
                                           [--runs-per-slot 3] [--steps 50] [--json out.json]

For each process count P: first the raw baseline, P processes with `concurrency` threads
each, every thread on its own connection committing single-row INSERTs (an entries row's
columns and bytes, into a table with the entries table's primary key) for `--seconds`;
then the durable workload, P * concurrency * runs-per-slot runs of `--steps` steps with the
zero-cost model queued, and P `runner.Worker` processes (what `runner worker --once
--concurrency N` runs) started together behind a barrier, draining the queue and exiting.
Throughput is the steps of all runs over the window from the first claim to the last
finish (the runs' own timestamps), so process start-up is not counted; the wall time from
the barrier to the last exit is reported too. A durable step commits about twice
(action, observation), so "durable commits/s" (entries plus claims over the window) is
what to compare with the raw rate. "worker CPU us/step" is the worker processes' own CPU
time (all threads) per step; "CPU busy" the share of the whole machine's CPU time that was
busy during each phase (from /proc/stat: the database server's and everything else's too),
which says whether the cores, rather than the commit rate, were what bound.
"""

from __future__ import annotations

import multiprocessing
import statistics
import threading
import time
import uuid
from multiprocessing.synchronize import Barrier
from queue import Empty
from typing import Any

import common
import fakes
from sqlalchemy import func, insert, select

from runner import Runner
from runner.service.worker import Worker
from runner.sql.database import open_engine
from runner.sql.schema import entries, runs

SPAWN = multiprocessing.get_context("spawn")


# -- the processes ----------------------------------------------------------------------------


def serve(url: str, concurrency: int, barrier: Barrier, out: Any) -> None:
    """One worker process: drain the queue (`runner worker --once`), report, exit."""
    worker = Worker(url, concurrency=concurrency, poll=0.05, once=True)
    barrier.wait()
    started, cpu = time.perf_counter(), time.process_time()
    worker.serve()
    out.put(
        {
            "finished": worker.finished,
            "seconds": time.perf_counter() - started,
            "cpu_seconds": time.process_time() - cpu,  # all of this process's threads
        }
    )


def commit(
    url: str, threads: int, seconds: float, row: dict[str, Any], barrier: Barrier, out: Any
) -> None:
    """One baseline process: `threads` connections committing one row each, flat out."""
    engine = open_engine(url)
    statement = insert(common.floor_table())
    counts = [0] * threads
    ready = threading.Barrier(threads + 1)
    deadline = [0.0]

    def loop(i: int) -> None:
        run_id = uuid.uuid4().hex[: len(row["run_id"])]  # a key of its own, the same bytes
        with engine.connect() as connection:
            ready.wait()
            seq = 0
            while time.perf_counter() < deadline[0]:
                with connection.begin():
                    connection.execute(statement, {**row, "run_id": run_id, "seq": seq})
                seq += 1
            counts[i] = seq

    pool = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    barrier.wait()
    deadline[0] = time.perf_counter() + seconds
    ready.wait()
    for thread in pool:
        thread.join()
    engine.dispose()
    out.put({"commits": sum(counts), "seconds": seconds})


def cpu_ticks() -> tuple[int, int]:
    """The machine's (busy, total) CPU time so far, in clock ticks, from /proc/stat."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
    except OSError:
        return 0, 0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def together(target: Any, processes: int, *args: Any) -> tuple[float, float, list[dict[str, Any]]]:
    """Start `processes` copies of `target`, release them at once, wait for all.

    Returns the wall time, the share of the machine's CPU that was busy meanwhile (every
    process on it: these, the database server, anything else) and the processes' reports.
    """
    barrier = SPAWN.Barrier(processes + 1)
    out = SPAWN.Queue()
    pool = [SPAWN.Process(target=target, args=(*args, barrier, out)) for _ in range(processes)]
    for process in pool:
        process.start()
    barrier.wait(timeout=120)
    started = time.perf_counter()
    busy_before, total_before = cpu_ticks()
    reports = []
    for _ in pool:
        try:
            reports.append(out.get(timeout=600))
        except Empty:
            raise SystemExit("a benchmark process did not report back") from None
    wall = time.perf_counter() - started
    busy_after, total_after = cpu_ticks()
    busy = (busy_after - busy_before) / max(1, total_after - total_before)
    for process in pool:
        process.join()
        if process.exitcode != 0:
            raise SystemExit(f"a benchmark process exited with {process.exitcode}")
    return wall, busy, reports


# -- one measurement --------------------------------------------------------------------------


def raw_rate(
    url: str, processes: int, concurrency: int, seconds: float, row: Any
) -> tuple[float, float]:
    """Commits per second of `processes` * `concurrency` connections, and the CPU busy."""
    _, busy, reports = together(commit, processes, url, concurrency, seconds, row)
    return float(sum(r["commits"] for r in reports)) / seconds, busy


def durable_rate(
    runner: Runner, processes: int, concurrency: int, runs_per_slot: int, steps: int
) -> dict[str, Any]:
    count = processes * concurrency * runs_per_slot
    ids = [runner.submit(fakes.make_agent(), fakes.task(steps)) for _ in range(count)]
    wall, busy, reports = together(serve, processes, runner.url, concurrency)
    with runner.engine.connect() as connection:
        window = connection.execute(
            select(
                func.min(runs.c.leased_at),
                func.max(runs.c.finished_at),
                func.sum(runs.c.steps),
                func.count(),
            ).where(runs.c.id.in_(ids), runs.c.stop_reason == "final")
        ).one()
        written = connection.execute(
            select(func.count()).select_from(entries).where(entries.c.run_id.in_(ids))
        ).scalar_one()
    first, last, total_steps, finished = window
    if finished != count:
        raise SystemExit(f"only {finished} of {count} runs finished with an answer")
    seconds = (last - first).total_seconds()
    return {
        "runs": count,
        "steps": total_steps,
        "seconds": seconds,
        "wall_seconds": wall,
        "steps_per_second": total_steps / seconds,
        "commits_per_second": (written + count) / seconds,
        "cpu_busy": busy,
        "worker_cpu_us_per_step": sum(r["cpu_seconds"] for r in reports) / total_steps * 1e6,
        "per_process": reports,
    }


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--processes", default="1,2,4", help="worker process counts (default 1,2,4)")
    p.add_argument("--concurrency", type=int, default=4, help="runs at once per process")
    p.add_argument("--runs-per-slot", type=int, default=3, help="runs queued per run slot")
    p.add_argument("--steps", type=int, default=50, help="steps per run (default 50)")
    p.add_argument("--seconds", type=float, default=3.0, help="length of each raw baseline")
    p.add_argument("--repeats", type=int, default=3, help="repetitions (median; default 3)")
    options = p.parse_args()
    counts = [int(n) for n in options.processes.split(",")]
    postgres = common.postgres_url_or_none(options)
    if postgres is None:
        raise SystemExit("workers.py measures PostgreSQL: no server answers")
    samples: dict[int, list[tuple[float, dict[str, Any]]]] = {n: [] for n in counts}
    with common.scratch_postgres(postgres) as url:
        runner = Runner(url, lease_seconds=600)
        common.create_floor(runner.engine)
        warm = runner.run(fakes.make_agent(), fakes.task(10))
        assert warm.run_id is not None
        row = common.entry_rows(runner.engine, warm.run_id)[1]  # an action: the commonest row
        for _ in range(options.repeats):
            for n in counts:
                rate, busy = raw_rate(url, n, options.concurrency, options.seconds, row)
                durable = durable_rate(
                    runner, n, options.concurrency, options.runs_per_slot, options.steps
                )
                samples[n].append((rate, {**durable, "raw_cpu_busy": busy}))
        runner.close()

    results = []
    for n in counts:
        raw = [s[0] for s in samples[n]]
        steps = [s[1]["steps_per_second"] for s in samples[n]]
        commits = [s[1]["commits_per_second"] for s in samples[n]]
        ratio = [s[1]["commits_per_second"] / s[0] for s in samples[n]]
        worker_cpu = [s[1]["worker_cpu_us_per_step"] for s in samples[n]]
        results.append(
            {
                "processes": n,
                "connections": n * options.concurrency,
                "raw_commits_per_second": common.spread(raw),
                "steps_per_second": common.spread(steps),
                "durable_commits_per_second": common.spread(commits),
                "durable_over_raw": common.spread(ratio),
                "worker_cpu_us_per_step": common.spread(worker_cpu),
                "cpu_busy": statistics.median(s[1]["cpu_busy"] for s in samples[n]),
                "raw_cpu_busy": statistics.median(s[1]["raw_cpu_busy"] for s in samples[n]),
                "wall_seconds": statistics.median(s[1]["wall_seconds"] for s in samples[n]),
                "samples": [{"raw": s[0], **s[1]} for s in samples[n]],
            }
        )
    one = results[0]["steps_per_second"]["median"]
    common.print_table(
        f"workers on PostgreSQL, concurrency {options.concurrency}, "
        f"{options.steps}-step runs, median (min-max) of {options.repeats}",
        [
            "processes",
            "connections",
            "raw commits/s",
            "durable steps/s",
            "vs 1 process",
            "durable commits/s",
            "durable / raw commits",
            "worker CPU us/step",
            "CPU busy raw / durable",
        ],
        [
            [
                r["processes"],
                r["connections"],
                common.fmt_spread(r["raw_commits_per_second"]),
                common.fmt_spread(r["steps_per_second"]),
                f"{r['steps_per_second']['median'] / one:.2f}x",
                common.fmt_spread(r["durable_commits_per_second"]),
                common.fmt_spread(r["durable_over_raw"], 2),
                f"{r['worker_cpu_us_per_step']['median']:.0f}",
                f"{r['raw_cpu_busy']:.0%} / {r['cpu_busy']:.0%}",
            ]
            for r in results
        ],
    )
    common.write_json(options.json, "workers", options, results)


if __name__ == "__main__":
    main()
