"""Step overhead: what durability costs a step, measured against two-commit floors.

    .venv/bin/python benchmarks/step_overhead.py [--steps 200] [--repeats 7] [--json out.json]

One 200-step run (199 tool calls, then the answer) with a zero-cost model and tool, timed:
in memory (`run_agent`), and durable (`Runner.run`) on SQLite with the default settings,
with `?synchronous=full` and with `?synchronous=normal`, and on PostgreSQL. In the same
process, right after each durable run, the floor: as many commits as that run made (counted
with SQLAlchemy's commit event), each one INSERT of one of the rows the run wrote into a
table with the entries table's columns and primary key, through plain SQLAlchemy Core on an
engine opened with the same settings, over one connection; and the raw floor: the same
commits of the same rows through the plain `sqlite3` or `psycopg` driver, no SQLAlchemy,
each a transaction of its own (BEGIN, INSERT, COMMIT), and once more with each INSERT
alone in the driver's autocommit mode (`raw_floor.py` says what they include); and the
loop's floor: the in-memory run once more, each of its journal writes also one raw commit of
a prebuilt row (`raw_floor.CommittingJournal`), the least any durable runner of this loop
can cost; and the same with each commit the journal's own fenced statement, its parameters
prebuilt (`raw_floor.fenced_committer`): the durable step with no Python in its write path.
And the durable run once more with its tools declared `mark_start` (one more commit per
tool call, the start mark), reported as a ratio to the plain durable run.
The seven take turns going first. All are
reported per step of the run, and the durable time as a ratio to each floor (per
repetition, then the median); "(durable - memory) / floor" is the overhead durability adds
to a step (the durable step less the same step in memory) over the floor. The last column
is this process's CPU time per step (the database server's is not in it): on a busy
machine it shows what the wall times cannot, where the client's time goes. A last table
splits that CPU per journal entry (per commit for the raw floors) into user and system time,
with the context switches (voluntary: a thread that blocked, on a lock, a queue or an fsync;
involuntary: one preempted) and the threads alive at the end, from getrusage.
"""

from __future__ import annotations

import gc
import resource
import threading
import time
from collections.abc import Callable
from itertools import cycle, islice
from typing import Any, ClassVar

import common
import fakes
import raw_floor
from sqlalchemy import Engine, Table, event, insert, text

from runner import Runner, run_agent
from runner.core.agent import bind_tools
from runner.core.budgets import Budgets
from runner.core.clock import SYSTEM, utc_now
from runner.core.ids import new_run_id
from runner.core.journal import Entry
from runner.core.loop import drive
from runner.core.tools import as_tools
from runner.sql import fenced_inserts, leases
from runner.sql import runs as store
from runner.sql.backend import backend_for
from runner.store.payloads import PLAIN
from runner.store.rows import entry_values

SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
SQLITE = {
    "sqlite": ("sqlite (default)", ""),
    "sqlite-full": ("sqlite ?synchronous=full", "?synchronous=full"),
    "sqlite-normal": ("sqlite ?synchronous=normal", "?synchronous=normal"),
}
DATABASES = [*SQLITE, "postgresql"]
# What Clock.last splits a contender's CPU into.
SPLIT = ("user", "system", "voluntary", "involuntary", "threads")
SPLIT_NAMES = {
    "durable": "durable (per entry)",
    "memory": "in memory (per entry)",
    "raw": "raw floor (per commit)",
    "raw_autocommit": "raw autocommit (per commit)",
    "loop_floor": "loop + raw floor (per entry)",
    "fenced_floor": "loop + fenced (per entry)",
}


class Clock:
    """Wall time and this process's CPU time, read together; `since` also leaves the
    split of that CPU (user, system, context switches) in `Clock.last`."""

    last: ClassVar[dict[str, float]] = {}

    def __init__(self) -> None:
        self.usage = resource.getrusage(resource.RUSAGE_SELF)
        self.wall = time.perf_counter()
        self.cpu = time.process_time()

    def since(self) -> tuple[float, float]:
        elapsed = time.perf_counter() - self.wall, time.process_time() - self.cpu
        now, then = resource.getrusage(resource.RUSAGE_SELF), self.usage
        Clock.last = {
            "user": now.ru_utime - then.ru_utime,
            "system": now.ru_stime - then.ru_stime,
            "voluntary": now.ru_nvcsw - then.ru_nvcsw,
            "involuntary": now.ru_nivcsw - then.ru_nivcsw,
            "threads": threading.active_count(),
        }
        return elapsed


def in_memory(steps: int) -> tuple[float, float]:
    clock = Clock()
    result = run_agent(fakes.model, fakes.tools(), fakes.task(steps), **fakes.UNLIMITED)
    elapsed = clock.since()
    assert result.stop_reason == "final" and result.steps == steps, result
    return elapsed


def durable(
    runner: Runner, steps: int, *, marked: bool = False
) -> tuple[tuple[float, float], int, str]:
    """One run: its (wall, cpu) time, how many commits it made, its id. `marked`: its tools
    declared `mark_start` (a start mark committed before each tool call)."""
    commits = 0

    def on_commit(_connection: Any) -> None:
        nonlocal commits
        commits += 1

    event.listen(runner.engine, "commit", on_commit)
    try:
        clock = Clock()
        agent = fakes.make_marked_agent() if marked else fakes.make_agent()
        result = runner.run(agent, fakes.task(steps))
        elapsed = clock.since()
    finally:
        event.remove(runner.engine, "commit", on_commit)
    assert result.stop_reason == "final" and result.steps == steps, result
    assert result.run_id is not None
    return elapsed, commits, result.run_id


def floor_rows(rows: list[dict[str, Any]], commits: int) -> list[dict[str, Any]]:
    """`commits` of the run's own rows (cycled) under a new run id."""
    run_id = new_run_id()  # same length as the run's id: the same bytes, a new key
    return [
        {**row, "run_id": run_id, "seq": seq}
        for seq, row in enumerate(islice(cycle(rows), commits))
    ]


def raw(
    engine: Engine, table: Table, rows: list[dict[str, Any]], commits: int, autocommit: bool
) -> tuple[float, float]:
    """The same commits through the plain driver (see raw_floor.py)."""
    batch = raw_floor.driver_rows(engine, table, floor_rows(rows, commits))
    elapsed: tuple[float, float] = raw_floor.commits(engine, table, batch, Clock, autocommit)
    return elapsed


def loop_floor(
    engine: Engine, table: Table, rows: list[dict[str, Any]], commits: int, steps: int
) -> tuple[float, float]:
    """The in-memory run, each journal write also one raw commit (raw_floor.CommittingJournal):
    what any durable runner of this loop pays at least."""
    # Rows to spare: the loop writes no more often than the durable run commits.
    batch = raw_floor.driver_rows(engine, table, floor_rows(rows, 2 * commits))
    with raw_floor.committer(engine, table) as commit:
        return committing_run(commit, batch, steps)


def committing_run(commit: Any, rows: list[Any], steps: int) -> tuple[float, float]:
    """The in-memory run, timed, each journal write also `commit` of the next of `rows`."""
    tools = as_tools(fakes.tools())
    model = bind_tools(fakes.model, tools)
    journal = raw_floor.CommittingJournal(commit=commit, rows=iter(rows))
    clock = Clock()
    result = drive(model, tools, fakes.task(steps), Budgets(**fakes.UNLIMITED), journal)
    elapsed = clock.since()
    assert result.stop_reason == "final" and result.steps == steps, result
    return elapsed


def fenced_loop_floor(
    runner: Runner, journal: list[Entry], commits: int, steps: int
) -> tuple[float, float]:
    """The loop's floor with the journal's own fenced statement on each commit, its
    parameters built before the clock starts (raw_floor.fenced_committer), on a run of its
    own claimed for it: the durable step with no Python in its write path."""
    engine = runner.engine
    run_id = new_run_id()
    store.create_run(
        engine, run_id=run_id, agent=None, agent_name=None, release=None, task="floor",
        budgets={},
    )  # fmt: skip
    claim = leases.claim_run(
        engine, run_id, owner="bench:1:1", lease_seconds=runner.lease_seconds, max_resumes=1
    )
    # The statement and binds exactly as fencing.append_entries makes them for one entry
    # (payloads neither encrypted nor offloaded: the runner's default).
    dialect = engine.dialect
    statement = fenced_inserts.fenced_insert(dialect, 1)
    at = utc_now(SYSTEM)
    fence = fenced_inserts.fence_values(
        backend_for(dialect.name), run_id, claim.epoch, at, runner.lease_seconds
    )
    parameters = [
        statement.parameters(
            fenced_inserts.insert_values(
                (entry_values(run_id, seq, claim.epoch, journal[seq % len(journal)], at, PLAIN),),
                fence,
            )
        )
        for seq in range(2 * commits)
    ]
    with raw_floor.fenced_committer(engine, statement.sql) as commit:
        return committing_run(commit, parameters, steps)


def floor(
    engine: Engine, table: Any, rows: list[dict[str, Any]], commits: int
) -> tuple[float, float]:
    """`commits` single-row INSERT commits of the run's own rows (cycled) on one connection."""
    batch = floor_rows(rows, commits)
    statement = insert(table)
    with engine.connect() as connection:
        clock = Clock()
        for row in batch:
            with connection.begin():
                connection.execute(statement, row)
        return clock.since()


def synchronous_of(engine: Engine) -> str:
    with engine.connect() as connection:
        value = connection.exec_driver_sql("PRAGMA synchronous").scalar_one()
    return SYNCHRONOUS.get(int(value), str(value))


def measure(name: str, url: str, steps: int, repeats: int) -> dict[str, Any]:
    runner = Runner(url, lease_seconds=600)  # no heartbeat commit lands inside a run
    table = common.create_floor(runner.engine)
    settings = synchronous_of(runner.engine) if runner.engine.dialect.name == "sqlite" else ""
    # Warm up (caches, the pool, the file); its rows and commit count make the floor's work.
    _, commits, run_id = durable(runner, steps)
    rows = common.entry_rows(runner.engine, run_id)
    journal = [entry for entry, _ in store.load_entries(runner.engine, run_id)]
    kinds = (
        "memory", "durable", "marked", "floor", "raw", "raw_autocommit", "loop_floor",
        "fenced_floor",
    )  # fmt: skip
    samples: dict[str, list[float]] = {k: [] for k in (*kinds, *(f"{k}_cpu" for k in kinds))}
    prefixes = {
        "": "floor",
        "raw_": "raw",
        "raw_autocommit_": "raw_autocommit",
        "loop_floor_": "loop_floor",
        "fenced_floor_": "fenced_floor",
    }
    for ratio in (f"{prefix}{what}" for prefix in prefixes for what in ("ratio", "overhead_ratio")):
        samples[ratio] = []
    samples["loop_floor_to_raw_ratio"] = []
    samples["fenced_floor_to_raw_ratio"] = []
    samples["marked_ratio"] = []
    # CPU per journal entry of the durable run against the raw floor's CPU per commit.
    entries = len(journal)
    samples["durable_cpu_per_entry"] = []
    samples["raw_cpu_per_commit"] = []
    samples["fenced_floor_cpu_per_entry"] = []
    samples["cpu_entry_ratio"] = []
    samples["fenced_cpu_entry_ratio"] = []
    # The split of each one's CPU per entry (per commit for the raw floors): user, system,
    # context switches, threads alive (Clock.last).
    split_of = ("durable", "raw", "raw_autocommit", "loop_floor", "fenced_floor", "memory")
    split: dict[str, dict[str, list[float]]] = {
        kind: {part: [] for part in SPLIT} for kind in split_of
    }
    commit_counts = {commits}
    made = commits

    def run_durable() -> tuple[float, float]:
        nonlocal made
        elapsed, made, _ = durable(runner, steps)
        return elapsed

    contenders: dict[str, Callable[[], tuple[float, float]]] = {
        "durable": run_durable,
        "marked": lambda: durable(runner, steps, marked=True)[0],
        "floor": lambda: floor(runner.engine, table, rows, commits),
        "raw": lambda: raw(runner.engine, table, rows, commits, False),
        "raw_autocommit": lambda: raw(runner.engine, table, rows, commits, True),
        "loop_floor": lambda: loop_floor(runner.engine, table, rows, commits, steps),
        "fenced_floor": lambda: fenced_loop_floor(runner, journal, commits, steps),
    }
    order = list(contenders)
    try:
        for repeat in range(repeats):
            gc.collect()
            timed = {"memory": in_memory(steps)}
            # Take turns going first, so a slow spell of the machine hits all alike.
            turn = repeat % len(order)
            usage = {"memory": Clock.last}
            for kind in order[turn:] + order[:turn]:
                timed[kind] = contenders[kind]()
                usage[kind] = Clock.last
            for kind in split_of:
                per = commits if kind.startswith("raw") else entries
                for part in SPLIT:
                    scale = 1e6 if part in ("user", "system") else 1.0
                    value = usage[kind][part]
                    split[kind][part].append(value if part == "threads" else value / per * scale)
            commit_counts.add(made)
            for kind, (wall, cpu) in timed.items():
                samples[kind].append(wall / steps * 1e6)
                samples[f"{kind}_cpu"].append(cpu / steps * 1e6)
            samples["loop_floor_to_raw_ratio"].append(timed["loop_floor"][0] / timed["raw"][0])
            samples["fenced_floor_to_raw_ratio"].append(timed["fenced_floor"][0] / timed["raw"][0])
            samples["marked_ratio"].append(timed["marked"][0] / timed["durable"][0])
            per_entry = timed["durable"][1] / entries * 1e6
            per_commit = timed["raw"][1] / commits * 1e6
            fenced_per_entry = timed["fenced_floor"][1] / entries * 1e6
            samples["durable_cpu_per_entry"].append(per_entry)
            samples["raw_cpu_per_commit"].append(per_commit)
            samples["fenced_floor_cpu_per_entry"].append(fenced_per_entry)
            samples["cpu_entry_ratio"].append(per_entry / per_commit)
            samples["fenced_cpu_entry_ratio"].append(fenced_per_entry / per_commit)
            overhead = timed["durable"][0] - timed["memory"][0]
            for prefix, base in prefixes.items():
                samples[f"{prefix}ratio"].append(timed["durable"][0] / timed[base][0])
                samples[f"{prefix}overhead_ratio"].append(overhead / timed[base][0])
    finally:
        with runner.engine.begin() as connection:
            connection.execute(text("DROP TABLE bench_floor"))
        runner.close()
    return {
        "database": name,
        "synchronous": settings,
        "steps": steps,
        "commits_per_run": sorted(commit_counts),
        "us_per_step": {
            k: common.spread(v)
            for k, v in samples.items()
            if "ratio" not in k and not k.endswith(("per_entry", "per_commit"))
        },
        "cpu_us_per_entry": common.spread(samples["durable_cpu_per_entry"]),
        "raw_cpu_us_per_commit": common.spread(samples["raw_cpu_per_commit"]),
        "fenced_floor_cpu_us_per_entry": common.spread(samples["fenced_floor_cpu_per_entry"]),
        "cpu_per_entry_to_raw_per_commit": common.spread(samples["cpu_entry_ratio"]),
        "fenced_cpu_per_entry_to_raw_per_commit": common.spread(samples["fenced_cpu_entry_ratio"]),
        "ratio_to_floor": common.spread(samples["ratio"]),
        "overhead_ratio_to_floor": common.spread(samples["overhead_ratio"]),
        "ratio_to_raw_floor": common.spread(samples["raw_ratio"]),
        "overhead_ratio_to_raw_floor": common.spread(samples["raw_overhead_ratio"]),
        "ratio_to_raw_autocommit_floor": common.spread(samples["raw_autocommit_ratio"]),
        "ratio_to_loop_floor": common.spread(samples["loop_floor_ratio"]),
        "loop_floor_to_raw_floor": common.spread(samples["loop_floor_to_raw_ratio"]),
        "ratio_to_fenced_floor": common.spread(samples["fenced_floor_ratio"]),
        "fenced_floor_to_raw_floor": common.spread(samples["fenced_floor_to_raw_ratio"]),
        "marked_to_durable": common.spread(samples["marked_ratio"]),
        "split_per_entry": {
            kind: {part: common.spread(values) for part, values in parts.items()}
            for kind, parts in split.items()
        },
        "samples": samples,
    }


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--steps", type=int, default=200, help="steps per run (default 200)")
    p.add_argument("--repeats", type=int, default=7, help="repetitions (default 7, at least 5)")
    p.add_argument(
        "--only", action="append", choices=DATABASES, help="measure only this database (repeatable)"
    )
    options = p.parse_args()
    postgres = common.postgres_url_or_none(options)
    chosen = set(options.only or DATABASES)
    results = []
    with common.scratch_folder(options.dir) as folder:
        for key, (name, query) in SQLITE.items():
            if key in chosen:
                url = common.sqlite_url(folder, key, query)
                results.append(measure(name, url, options.steps, options.repeats))
    if postgres is not None and "postgresql" in chosen:
        with common.scratch_postgres(postgres) as url:
            results.append(measure("postgresql", url, options.steps, options.repeats))

    rows = []
    cpu_rows = []
    for r in results:
        us = r["us_per_step"]
        rows.append(
            [
                r["database"] + (f" [{r['synchronous']}]" if r["synchronous"] else ""),
                "/".join(map(str, r["commits_per_run"])),
                common.fmt_spread(us["memory"], 1),
                common.fmt_spread(us["durable"]),
                common.fmt_spread(r["marked_to_durable"], 2),
                common.fmt_spread(us["floor"]),
                common.fmt_spread(us["raw"]),
                common.fmt_spread(us["raw_autocommit"]),
                common.fmt_spread(r["ratio_to_floor"], 2),
                common.fmt_spread(r["ratio_to_raw_floor"], 2),
                common.fmt_spread(r["ratio_to_raw_autocommit_floor"], 2),
                common.fmt_spread(us["loop_floor"]),
                common.fmt_spread(r["loop_floor_to_raw_floor"], 2),
                common.fmt_spread(r["ratio_to_loop_floor"], 2),
                common.fmt_spread(us["fenced_floor"]),
                common.fmt_spread(r["fenced_floor_to_raw_floor"], 2),
                common.fmt_spread(r["ratio_to_fenced_floor"], 2),
                common.fmt_spread(r["overhead_ratio_to_floor"], 2),
                common.fmt_spread(r["overhead_ratio_to_raw_floor"], 2),
                f"{us['durable_cpu']['median']:.0f} / {us['floor_cpu']['median']:.0f}"
                f" / {us['raw_cpu']['median']:.0f}",
            ]
        )
        cpu_rows.append(
            [
                r["database"] + (f" [{r['synchronous']}]" if r["synchronous"] else ""),
                common.fmt_spread(r["cpu_us_per_entry"]),
                common.fmt_spread(r["raw_cpu_us_per_commit"]),
                common.fmt_spread(r["cpu_per_entry_to_raw_per_commit"], 2),
                common.fmt_spread(r["fenced_floor_cpu_us_per_entry"]),
                common.fmt_spread(r["fenced_cpu_per_entry_to_raw_per_commit"], 2),
                common.fmt_spread(r["ratio_to_fenced_floor"], 2),
            ]
        )
    common.print_table(
        f"step overhead: {options.steps}-step run, zero-cost model and tool, "
        f"median (min-max) of {options.repeats}",
        [
            "database",
            "commits",
            "in memory us/step",
            "durable us/step",
            "with start marks / durable",
            "floor us/step",
            "raw floor us/step",
            "raw autocommit us/step",
            "durable / floor",
            "durable / raw floor",
            "durable / raw autocommit",
            "loop + raw floor us/step",
            "loop + raw floor / raw floor",
            "durable / loop + raw floor",
            "loop + fenced floor us/step",
            "loop + fenced floor / raw floor",
            "durable / loop + fenced floor",
            "(durable - memory) / floor",
            "(durable - memory) / raw floor",
            "CPU us/step durable / floor / raw",
        ],
        rows,
    )
    common.print_table(
        "this process's CPU per journal entry against the raw floor's per commit "
        "(the goal: at most 1.5), and the single step against the loop with the journal's "
        "fenced statement (the goal: at most 1.15)",
        [
            "database",
            "durable CPU us/entry",
            "raw floor CPU us/commit",
            "durable / raw, CPU",
            "loop + fenced CPU us/entry",
            "loop + fenced / raw, CPU",
            "durable / loop + fenced, wall",
        ],
        cpu_rows,
    )
    split_rows = []
    for r in results:
        for kind, parts in r["split_per_entry"].items():
            split_rows.append(
                [
                    r["database"] + (f" [{r['synchronous']}]" if r["synchronous"] else ""),
                    SPLIT_NAMES[kind],
                    f"{parts['user']['median']:.0f}",
                    f"{parts['system']['median']:.0f}",
                    f"{parts['voluntary']['median']:.2f}",
                    f"{parts['involuntary']['median']:.2f}",
                    f"{parts['threads']['max']:.0f}",
                ]
            )
    common.print_table(
        "this process's CPU split, median per journal entry (per commit for the raw floors)",
        [
            "database",
            "what",
            "user us",
            "system us",
            "voluntary switches",
            "involuntary switches",
            "threads at most",
        ],
        split_rows,
    )
    common.write_json(options.json, "step_overhead", options, results)


if __name__ == "__main__":
    main()
