"""What durability adds to a Pydantic AI agent, per step: bare, under runner's RunnerAgent, and
under Pydantic AI's own DBOSAgent, on one SQLite file and on one PostgreSQL database.

    .venv/bin/python benchmarks/pydantic_ai_overhead.py [--runs 150] [--no-postgres]

The agent is the same in every mode: two tools (`add`, `multiply`) and pydantic-ai's
FunctionModel, which answers in-process (add, then multiply, then the answer: three model
requests and two tool calls a run), so what is measured is what each mode adds around the
framework's own loop, not a provider's latency. The modes:

- bare: `agent.run_sync(task)`, nothing durable.
- runner: `Runner(url).run(RunnerAgent(agent), task)`: each request and tool call journaled.
- dbos: `DBOSAgent(agent).run_sync(task)` in a DBOS workflow, DBOS's system database in
  runner's PostgreSQL database (its own schema), or in a SQLite file beside runner's (one file
  cannot hold both: each has a table `queues`); the tools are `@DBOS.step()`s, so each tool
  call is checkpointed as runner's are (DBOSAgent checkpoints each model request itself, and
  runs plain function tools inline).

Each mode runs in a process of its own (DBOS is one per process), kept alive for the whole
benchmark; the parent interleaves them, one run of each mode in turn (in a shuffled order each
round), so the machine's load is spread evenly over all of them. Each child measures its run's
wall time and CPU time (time.process_time: every thread of that process; the database
server's CPU is not counted, for any mode). Reported: the median per run, and what each mode
adds per step (a model request) over bare; then runner's added time over DBOS's, on each
database (the goal: at most 0.5).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

STEPS = 3  # model requests a run makes
TASK = "What is (2 + 3) * 7?"


# -- the agent ---------------------------------------------------------------------------------


def make_agent(tool_wrapper: Any = None) -> Any:
    """The benchmark's Pydantic AI agent; `tool_wrapper` wraps each tool function (DBOS's
    step decorator)."""
    from pydantic_ai import Agent
    from pydantic_ai import messages as pm
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    def answer(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
        done = sum(
            isinstance(part, pm.ToolReturnPart)
            for message in messages
            if isinstance(message, pm.ModelRequest)
            for part in message.parts
        )
        if done == 0:
            return pm.ModelResponse(parts=[pm.ToolCallPart("add", {"a": 2, "b": 3}, "call_1")])
        if done == 1:
            return pm.ModelResponse(parts=[pm.ToolCallPart("multiply", {"a": 5, "b": 7}, "call_2")])
        return pm.ModelResponse(parts=[pm.TextPart("35")])

    agent = Agent(FunctionModel(answer), name="calculator", instructions="Use the tools.")

    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    def multiply(a: int, b: int) -> int:
        """Multiply two numbers."""
        return a * b

    wrap = tool_wrapper or (lambda fn: fn)
    agent.tool_plain(wrap(add))
    agent.tool_plain(wrap(multiply))
    return agent


# -- a mode's process ----------------------------------------------------------------------------


def serve(mode: str, url: str | None) -> None:
    """A child: set the mode up, say `ready`, then one run per `run` line, answering with its
    wall and CPU seconds."""
    warnings.simplefilter("ignore")
    run = setup(mode, url)
    run()  # warm: imports, connections, the first run's one-offs
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        wall, cpu = time.perf_counter(), time.process_time()
        run()
        print(f"{time.perf_counter() - wall} {time.process_time() - cpu}", flush=True)


def setup(mode: str, url: str | None) -> Any:
    if mode == "bare":
        agent = make_agent()

        def bare() -> None:
            assert agent.run_sync(TASK).output == "35"

        return bare
    if mode.startswith("runner"):
        from runner import Runner
        from runner.integrations.pydantic_ai import RunnerAgent

        assert url is not None
        runner = Runner(url)
        durable = RunnerAgent(make_agent(), max_steps=10)

        def journaled() -> None:
            result = runner.run(durable, TASK)
            assert (result.stop_reason, result.output) == ("final", "35"), result

        return journaled
    from dbos import DBOS
    from pydantic_ai.durable_exec.dbos import DBOSAgent

    assert url is not None
    DBOS(config={"name": "pydantic_ai_overhead", "system_database_url": url, "log_level": "ERROR"})
    checkpointed = DBOSAgent(make_agent(DBOS.step()), name="calculator")
    DBOS.launch()

    def in_workflow() -> None:
        assert checkpointed.run_sync(TASK).output == "35"

    return in_workflow


# -- the parent --------------------------------------------------------------------------------


class Child:
    def __init__(self, mode: str, url: str | None) -> None:
        self.mode = mode
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve", mode, url or "-"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.walls: list[float] = []
        self.cpus: list[float] = []

    def wait_ready(self) -> None:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if line.strip() != "ready":
            raise SystemExit(f"{self.mode}: did not start ({line!r})")

    def run(self, keep: bool) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write("run\n")
        self.process.stdin.flush()
        wall, cpu = map(float, self.process.stdout.readline().split())
        if keep:
            self.walls.append(wall)
            self.cpus.append(cpu)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(30)


def postgres_database(admin_url: str) -> tuple[str, Any]:
    """A scratch database (runner's schema in it) and how to drop it."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"runner_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f"CREATE DATABASE {name}"))
    url = make_url(admin_url).set(database=name)

    def drop() -> None:
        with admin.connect() as connection:
            connection.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()

    return url.render_as_string(hide_password=False), drop


def migrated(url: str) -> str:
    from runner.sql.database import open_engine, upgrade

    engine = open_engine(url)
    upgrade(engine)
    engine.dispose()
    return url


def main() -> None:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument("--runs", type=int, default=150, help="measured runs of each mode")
    p.add_argument("--warmup", type=int, default=10, help="unmeasured runs of each mode first")
    p.add_argument("--no-postgres", action="store_true")
    p.add_argument(
        "--postgres",
        default=os.environ.get(
            "RUNNER_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
        ),
    )
    p.add_argument("--json", metavar="PATH")
    p.add_argument(
        "--modes", default=None, help="only these modes, comma-separated (bare is always run)"
    )
    args = p.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="pyai_overhead_"))
    sqlite = migrated(f"sqlite:///{folder / 'bench.db'}")
    urls = {"sqlite": sqlite}
    drop = None
    if not args.no_postgres:
        pg, drop = postgres_database(args.postgres)
        urls["postgres"] = migrated(pg)
    load_before = os.getloadavg()
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    chosen = None if args.modes is None else {"bare", *args.modes.split(",")}
    children = [Child("bare", None)]
    for db, url in urls.items():
        if chosen is None or f"runner-{db}" in chosen:
            children.append(Child(f"runner-{db}", url))
        # On PostgreSQL, DBOS's tables are in a schema of their own (`dbos`) in runner's
        # database. On SQLite both name a table `queues`: DBOS gets a file of its own, beside
        # runner's, on the same disk with the same settings.
        dbos_url = (
            f"sqlite:///{folder / 'dbos.db'}"
            if db == "sqlite"
            else url.replace("postgresql+psycopg://", "postgresql://")
        )
        if chosen is None or f"dbos-{db}" in chosen:
            children.append(Child(f"dbos-{db}", dbos_url))
    try:
        for child in children:
            child.wait_ready()
        for n in range(args.warmup + args.runs):
            for child in random.sample(children, len(children)):
                child.run(keep=n >= args.warmup)
    finally:
        for child in children:
            child.close()
        if drop is not None:
            drop()
    load_after = os.getloadavg()
    report(children, args, started, load_before, load_after)


def report(
    children: list[Child],
    args: Any,
    started: str,
    load_before: tuple[float, float, float],
    load_after: tuple[float, float, float],
) -> None:
    medians = {
        c.mode: (statistics.median(c.walls) * 1000, statistics.median(c.cpus) * 1000)
        for c in children
    }
    bare_wall, bare_cpu = medians["bare"]
    print(
        f"pydantic_ai_overhead: {args.runs} runs a mode ({STEPS} steps each), interleaved; "
        f"started {started}; load {load_before[0]:.2f} -> {load_after[0]:.2f} "
        f"(1-min), {os.cpu_count()} cores"
    )
    print(
        f"{'mode':<16}{'wall ms/run':>12}{'CPU ms/run':>12}"
        f"{'+wall ms/step':>15}{'+CPU ms/step':>14}"
    )
    added: dict[str, tuple[float, float]] = {}
    for mode, (wall, cpu) in medians.items():
        plus = ((wall - bare_wall) / STEPS, (cpu - bare_cpu) / STEPS)
        added[mode] = plus
        shown = "" if mode == "bare" else f"{plus[0]:>15.2f}{plus[1]:>14.2f}"
        print(f"{mode:<16}{wall:>12.2f}{cpu:>12.2f}{shown}")
    ratios: dict[str, dict[str, float]] = {}
    for db in ("sqlite", "postgres"):
        ours, theirs = added.get(f"runner-{db}"), added.get(f"dbos-{db}")
        if ours is None or theirs is None:
            continue
        ratios[db] = {"wall": ours[0] / theirs[0], "cpu": ours[1] / theirs[1]}
        met = "met" if max(ratios[db].values()) <= 0.5 else "NOT met"
        print(
            f"runner/DBOS added per step on {db}: wall {ratios[db]['wall']:.2f}, "
            f"CPU {ratios[db]['cpu']:.2f} (goal <= 0.5: {met})"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "runs": args.runs,
                    "started": started,
                    "load": [load_before, load_after],
                    "median_ms": medians,
                    "added_ms_per_step": added,
                    "ratios": ratios,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        serve(sys.argv[2], None if sys.argv[3] == "-" else sys.argv[3])
    else:
        main()
