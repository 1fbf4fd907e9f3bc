"""Parallel step overhead: a step of four tool calls, measured against its commit floor.

    .venv/bin/python benchmarks/parallel_step.py [--steps 50] [--width 4] [--repeats 7]
                                                 [--json out.json]

One run of --steps steps (every step but the last asks for --width calls of a zero-cost
tool at once, with provider ids; the last answers), timed: in memory (`run_agent`), and
durable (`Runner.run`) on SQLite (default settings) and PostgreSQL, each with the calls run
at once (`max_parallel_tools=8`, a thread per call) and in order on the loop's thread
(`max_parallel_tools=1`). A durable step of four calls makes five commits: its four action
rows together, before any call runs, then each call's observation as it ends.

The floor, in the same process right after each durable run: the same rows the run wrote,
grouped into the same commits (the step's four action rows in one commit, as one multi-row
INSERT; each observation in a commit of its own; the task, the answer, and two one-row
commits standing in for creating and claiming the run), into a table with the entries
table's columns and primary key, through plain SQLAlchemy Core over one connection. Both are
reported per step of the run; "(durable - memory) / floor" is the overhead durability adds
to a step over its floor. The last column is this process's CPU time per step.
"""

from __future__ import annotations

import gc
from typing import Any

import common
from sqlalchemy import Engine, event, insert, text
from step_overhead import Clock, synchronous_of

from runner import Agent, Runner, run_agent
from runner.core.ids import new_run_id

UNLIMITED: dict[str, Any] = {
    "max_steps": 1_000_000,
    "max_tokens": None,
    "max_consecutive_errors": None,
    "max_repeats": None,
}
MODES = {"parallel": 8, "in order": 1}


def batches(width: int) -> Any:
    """A model whose every step is `width` new calls at once, until the task's step count."""

    def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        steps = int(transcript[0]["content"])
        done = (len(transcript) - 1) // (1 + width)  # a step: one message of calls, outcomes
        if done >= steps - 1:
            return {"type": "final", "content": f"done after {done} steps"}
        calls = [
            {"id": f"call_{done}_{n}", "name": "echo", "args": {"i": done * width + n}}
            for n in range(width)
        ]
        return {"type": "tool", "calls": calls}

    return model


def echo(i: int) -> str:
    return f"echo {i}"


def in_memory(steps: int, width: int, parallel: int) -> tuple[float, float]:
    clock = Clock()
    result = run_agent(
        batches(width), {"echo": echo}, str(steps), max_parallel_tools=parallel, **UNLIMITED
    )
    elapsed = clock.since()
    assert result.stop_reason == "final" and result.steps == steps, result
    return elapsed


def durable(runner: Runner, steps: int, width: int, parallel: int) -> tuple[Any, int, str]:
    """One run: its (wall, cpu) time, how many commits it made, its id."""
    commits = 0

    def on_commit(_connection: Any) -> None:
        nonlocal commits
        commits += 1

    agent = Agent(batches(width), {"echo": echo}, max_parallel_tools=parallel, **UNLIMITED)
    event.listen(runner.engine, "commit", on_commit)
    try:
        clock = Clock()
        result = runner.run(agent, str(steps))
        elapsed = clock.since()
    finally:
        event.remove(runner.engine, "commit", on_commit)
    assert result.stop_reason == "final" and result.steps == steps, result
    assert result.run_id is not None
    return elapsed, commits, result.run_id


def commit_groups(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The run's rows as it committed them: its start (the run's row, standing in as a row
    of the floor's table, and its task) in one commit, a step's actions together, the rest
    one by one."""
    groups: list[list[dict[str, Any]]] = [[rows[0], rows[0]]]
    for row in rows[1:]:
        last = groups[-1][-1]
        same_batch = row["kind"] == last["kind"] == "action" and row["step"] == last["step"]
        if same_batch and len(groups) > 1:
            groups[-1].append(row)
        else:
            groups.append([row])
    return groups


def floor(engine: Engine, table: Any, groups: list[list[dict[str, Any]]]) -> tuple[float, float]:
    run_id = new_run_id()  # same length as the run's id: the same bytes, a new key
    seq = 0
    batch = []
    for group in groups:
        batch.append([{**row, "run_id": run_id, "seq": seq + i} for i, row in enumerate(group)])
        seq += len(group)
    statement = insert(table)
    with engine.connect() as connection:
        clock = Clock()
        for rows in batch:
            with connection.begin():
                connection.execute(statement, rows if len(rows) > 1 else rows[0])
        return clock.since()


def measure(name: str, url: str, steps: int, width: int, repeats: int) -> list[dict[str, Any]]:
    runner = Runner(url, lease_seconds=600)  # no heartbeat commit lands inside a run
    table = common.create_floor(runner.engine)
    settings = synchronous_of(runner.engine) if runner.engine.dialect.name == "sqlite" else ""
    results = []
    try:
        for mode, parallel in MODES.items():
            # Warm up; its rows and commits make the floor's work.
            _, commits, run_id = durable(runner, steps, width, parallel)
            groups = commit_groups(common.entry_rows(runner.engine, run_id))
            assert len(groups) == commits, (len(groups), commits)
            samples: dict[str, list[float]] = {
                k: [] for k in ("memory", "durable", "floor", "memory_cpu", "durable_cpu")
            }
            samples.update(floor_cpu=[], ratio=[], overhead_ratio=[])
            made_counts = {commits}
            for repeat in range(repeats):
                gc.collect()
                timed = {"memory": in_memory(steps, width, parallel)}
                if repeat % 2 == 0:
                    timed["durable"], made, _ = durable(runner, steps, width, parallel)
                    timed["floor"] = floor(runner.engine, table, groups)
                else:
                    timed["floor"] = floor(runner.engine, table, groups)
                    timed["durable"], made, _ = durable(runner, steps, width, parallel)
                made_counts.add(made)
                for kind, (wall, cpu) in timed.items():
                    samples[kind].append(wall / steps * 1e6)
                    samples[f"{kind}_cpu"].append(cpu / steps * 1e6)
                samples["ratio"].append(timed["durable"][0] / timed["floor"][0])
                overhead = timed["durable"][0] - timed["memory"][0]
                samples["overhead_ratio"].append(overhead / timed["floor"][0])
            results.append(
                {
                    "database": name,
                    "synchronous": settings,
                    "mode": mode,
                    "max_parallel_tools": parallel,
                    "steps": steps,
                    "width": width,
                    "commits_per_run": sorted(made_counts),
                    "us_per_step": {
                        k: common.spread(v) for k, v in samples.items() if "ratio" not in k
                    },
                    "ratio_to_floor": common.spread(samples["ratio"]),
                    "overhead_ratio_to_floor": common.spread(samples["overhead_ratio"]),
                    "samples": samples,
                }
            )
    finally:
        with runner.engine.begin() as connection:
            connection.execute(text("DROP TABLE bench_floor"))
        runner.close()
    return results


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--steps", type=int, default=50, help="steps per run (default 50)")
    p.add_argument("--width", type=int, default=4, help="calls per step (default 4)")
    p.add_argument("--repeats", type=int, default=7, help="repetitions (default 7)")
    options = p.parse_args()
    postgres = common.postgres_url_or_none(options)
    results = []
    with common.scratch_folder(options.dir) as folder:
        url = common.sqlite_url(folder, "parallel")
        results += measure("sqlite", url, options.steps, options.width, options.repeats)
    if postgres is not None:
        with common.scratch_postgres(postgres) as url:
            results += measure("postgresql", url, options.steps, options.width, options.repeats)

    rows = []
    for r in results:
        us = r["us_per_step"]
        rows.append(
            [
                r["database"] + (f" [{r['synchronous']}]" if r["synchronous"] else ""),
                f"{r['mode']} ({r['max_parallel_tools']})",
                "/".join(map(str, r["commits_per_run"])),
                common.fmt_spread(us["memory"], 1),
                common.fmt_spread(us["durable"]),
                common.fmt_spread(us["floor"]),
                common.fmt_spread(r["ratio_to_floor"], 2),
                common.fmt_spread(r["overhead_ratio_to_floor"], 2),
                f"{us['durable_cpu']['median']:.0f} / {us['floor_cpu']['median']:.0f}",
            ]
        )
    common.print_table(
        f"parallel step overhead: {options.steps}-step run, {options.width} zero-cost calls a "
        f"step, median (min-max) of {options.repeats}",
        [
            "database",
            "calls run",
            "commits",
            "in memory us/step",
            "durable us/step",
            "floor us/step",
            "durable / floor",
            "(durable - memory) / floor",
            "CPU us/step durable / floor",
        ],
        rows,
    )
    common.write_json(options.json, "parallel_step", options, results)


if __name__ == "__main__":
    main()
