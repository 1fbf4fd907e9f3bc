"""A model call under a provider limit against the same call with none (issue 39, point 3).

    .venv/bin/python benchmarks/limited_call.py [--steps 50] [--repeats 7] [--no-postgres]
        [--busy 0] [--profile limited] [--json out.json]

One run of `--steps` steps (the zero-cost model and tool of benchmarks/fakes.py: a model call
and a tool call a step, then the answer) run by `Runner.run`, timed, three ways taking turns
going first: its agent drawing from no limit (`none`); from a limit of tokens and requests a
minute (`minute`: set far above what runs, so no call ever waits), its calls drawn from the
worker's grants (runner.sql.grants); from the same limit with each call reserved and settled
alone, as a limit under 1,000 requests a minute is (`minute-alone`: its reservation and
settle riding in the run's journal writes, runner.sql.limit_rides; before them, two commits
more a call, and the issue measured 12.9 ms over the unlimited call on PostgreSQL); and from
one that also caps the calls at once (`concurrency`: never a grant, and its settle also locks
the limit's row and looks at its line). On SQLite and PostgreSQL, in one run.

Reported per model call: the wall and this process's CPU time (the database server's is
not in it) of each way, median of `--repeats` (min-max), and the limited call less the
unlimited one, as time and as a ratio (per repetition, then the median). The limit's
charges build up over the repetitions (every call of the last minute is charged): the
table says how many the minute held at the end. `--busy N` first gives each limit N calls
of other runs, settled, spread over the two minutes before (half in the minute, half in the
minute before that the sweep has not yet deleted), as a busy limit holds. `--profile minute`
prints a cProfile of the `minute` runs of the last database instead, sorted by own time.
"""

from __future__ import annotations

import cProfile
import gc
import pstats
import time
import uuid
from datetime import timedelta
from typing import Any

import common
import fakes

from runner import Agent, Runner
from runner.core.clock import utc_now
from runner.sql import grants
from runner.sql.database import open_engine
from runner.sql.schema import limit_reservations

GRANT_FROM_REQUESTS = grants.GRANT_FROM_REQUESTS

LIMITS = {
    "minute": "bench/minute",
    "minute-alone": "bench/minute-alone",
    "concurrency": "bench/concurrency",
}
WAYS = ("none", *LIMITS)
# Far above what a benchmark run charges: no call waits.
PLENTY = 1_000_000_000


def agent(way: str) -> Agent:
    return Agent(fakes.model, fakes.tools(), name=f"bench-{way}", limit=LIMITS.get(way),
                 **fakes.UNLIMITED)  # fmt: skip


def timed(runner: Runner, way: str, steps: int) -> tuple[float, float]:
    """One run's wall and CPU seconds per model call."""
    if way == "minute-alone":  # as before grants: every call reserved and settled alone
        grants.GRANT_FROM_REQUESTS = 2**62
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        result = runner.run(agent(way), fakes.task(steps))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        grants.GRANT_FROM_REQUESTS = GRANT_FROM_REQUESTS
    assert result.stop_reason == "final" and result.steps == steps, result
    return wall / steps, cpu / steps


def busy(url: str, calls: int) -> None:
    """Give each limit `calls` settled calls of other runs over the 110 s before now."""
    if not calls:
        return
    now = utc_now()
    engine = open_engine(url)
    try:
        with engine.begin() as connection:
            for name in LIMITS.values():
                rows = []
                for i in range(calls):
                    at = now - timedelta(seconds=1 + 109 * i / calls)
                    rows.append(
                        {"id": uuid.uuid4().hex, "limit_name": name, "run_id": f"busy{i}",
                         "lease_epoch": 1, "tokens": 100, "settled": True,
                         "reserved_at": at - timedelta(seconds=1), "settled_at": at,
                         "counted_from": at}
                    )  # fmt: skip
                connection.execute(limit_reservations.insert(), rows)
    finally:
        engine.dispose()


def measure(
    url: str, steps: int, repeats: int, profile: str | None, busy_calls: int = 0
) -> dict[str, Any]:
    runner = Runner(url, lease_seconds=600)  # no heartbeat commit lands inside a run
    for way in ("minute", "minute-alone"):
        runner.set_limit(LIMITS[way], tokens_per_minute=PLENTY, requests_per_minute=PLENTY)
    runner.set_limit(
        LIMITS["concurrency"], tokens_per_minute=PLENTY, requests_per_minute=PLENTY,
        concurrency=1000,
    )  # fmt: skip
    busy(url, busy_calls)
    samples: dict[str, list[float]] = {}
    profiler = cProfile.Profile() if profile else None
    try:
        for way in WAYS:  # warm up: caches, the pool, the file
            timed(runner, way, steps)
        for repeat in range(repeats):
            gc.collect()
            turn = repeat % len(WAYS)
            got: dict[str, tuple[float, float]] = {}
            for way in WAYS[turn:] + WAYS[:turn]:
                if profiler is not None and way == profile:
                    profiler.enable()
                got[way] = timed(runner, way, steps)
                if profiler is not None:
                    profiler.disable()
            for way, (wall, cpu) in got.items():
                samples.setdefault(way, []).append(wall * 1e6)
                samples.setdefault(f"{way}_cpu", []).append(cpu * 1e6)
            for way in LIMITS:
                for kind, base in (("", got["none"][0]), ("_cpu", got["none"][1])):
                    mine = got[way][0 if kind == "" else 1]
                    samples.setdefault(f"{way}_extra{kind}", []).append((mine - base) * 1e6)
                    samples.setdefault(f"{way}_ratio{kind}", []).append(mine / base)
        charged = {info.name: info.requests for info in runner.limits()}
    finally:
        runner.close()
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(35)
    found: dict[str, Any] = {key: common.spread(values) for key, values in samples.items()}
    found["charged_in_minute"] = charged
    return found


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--busy", type=int, default=0, help="settled calls given to each limit first")
    p.add_argument("--profile", choices=list(LIMITS), default=None)
    options = p.parse_args()
    postgres = common.postgres_url_or_none(options)
    results: dict[str, Any] = {}
    rows = []
    with common.scratch_folder(options.dir) as folder:
        for database in ("sqlite", "postgresql"):
            if database == "sqlite":
                found = measure(common.sqlite_url(folder, "limited"), options.steps,
                                options.repeats, options.profile, options.busy)  # fmt: skip
            elif postgres is not None:
                with common.scratch_postgres(postgres) as url:
                    found = measure(
                        url, options.steps, options.repeats, options.profile, options.busy
                    )
            else:
                continue
            results[database] = found
            for way in WAYS:
                extra = (
                    ["", "", "", ""]
                    if way == "none"
                    else [
                        common.fmt_spread(found[f"{way}_extra"]),
                        common.fmt_spread(found[f"{way}_extra_cpu"]),
                        common.fmt_spread(found[f"{way}_ratio"], 2),
                        f"{found['charged_in_minute'][LIMITS[way]]:,}",
                    ]
                )
                rows.append([
                    database, way, common.fmt_spread(found[way]),
                    common.fmt_spread(found[f"{way}_cpu"]), *extra,
                ])  # fmt: skip
    common.print_table(
        f"a model call (and a tool call) of a {options.steps}-step run, us per call, "
        f"median of {options.repeats} (min-max)",
        ["database", "limit", "wall", "cpu", "wall over none", "cpu over none",
         "ratio to none", "calls in the minute"],
        rows,
    )  # fmt: skip
    common.write_json(options.json, "limited_call", options, results)


if __name__ == "__main__":
    main()
