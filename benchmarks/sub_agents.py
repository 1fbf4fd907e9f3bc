"""Sub-agents: what one costs over a plain tool call, a tree's parked parents hold no worker
slot, workers share a tree, and a root's token budget holds over randomised trees.

    .venv/bin/python benchmarks/sub_agents.py [--trees 50] [--no-postgres] [--json out.json]
    .venv/bin/python benchmarks/sub_agents.py --calls-only [--calls 20] [--repeats 5]

0. A sub-agent against a plain tool call, on SQLite and PostgreSQL: one in-process `Worker`
   (4 slots) runs a run of CALLS calls one after the other (one a step) of a plain tool
   (`tree_fakes.py:plain_caller`), then one whose tool is a sub-agent that answers at once,
   one model call (`sub_caller`), taking turns REPEATS times after a warm-up of each. The
   figures are the wall and the CPU (this process's, every thread) a call, from the submit
   to the run's end, and the sub-agent's cost over the plain call's, run by run. The
   machine's load says how much other work shared it.
1. One `runner worker --once --concurrency 20` (the real command) runs a tree three levels
   deep (benchmarks/tree_fakes.py): a root, 4 middles, 20 leaves, each leaf's tool taking
   1 s (RUNNER_BENCH_LEAF_SECONDS). While it runs, this process samples the tree's runs by
   status. If a parked parent held a slot, at most 15 leaves could run at once (5 parents
   parked); the figures show how many leaves really ran at once (from the leaves' own
   ledger) and how many runs were `running` (holding a slot) while parents were `waiting`.
   On SQLite and PostgreSQL.
2. On PostgreSQL, two `runner worker --concurrency 10` processes share the same tree: the
   leaves' ledger says which process ran each.
3. 50 randomised trees (depth 1-3, 1-4 children a parent, 1-6 model calls a leaf, 5-60
   tokens a call), each under a root budget of N tokens (N from 100 to 1,500), run in this
   process (`Runner.run` drives a tree's children on threads, all siblings at once) on
   SQLite: the tree's spend (the root's own plus what was charged below it) against N, and
   against N plus one model call's tokens (the largest) per run that was running at once
   (counted by the models themselves).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import common
from sqlalchemy import func, select

from runner import Agent, Runner, Worker
from runner.sql.database import connect
from runner.sql.schema import runs
from runner.testing import FunctionModel, tool_results, turns

RUNNER = Path(sys.executable).parent / "runner"
FAKES = Path(__file__).resolve().with_name("tree_fakes.py")


# -- 0: a sub-agent against a plain tool call -------------------------------------------------


def calls_on_a_worker(url: str, calls: int, repeats: int) -> dict[str, Any]:
    """Runs of `plain_caller` and `sub_caller` (CALLS calls each) taking turns, one at a time,
    on one in-process `Worker` (4 slots): the wall and CPU (this process's, every thread) a
    call, from the submit to the run's end."""
    os.environ["RUNNER_BENCH_CALLS"] = str(calls)
    worker = Worker(url, concurrency=4, poll=1.0)
    serving = threading.Thread(target=worker.serve, daemon=True)
    serving.start()
    figures: dict[str, dict[str, list[float]]] = {
        kind: {"wall": [], "cpu": []} for kind in ("plain", "sub")
    }
    try:
        with Runner(url) as runner:
            for n in range(repeats + 1):  # the first of each is a warm-up
                for kind, runs_a_call in (("plain", 0), ("sub", 1)):
                    expected = worker.finished + 1 + calls * runs_a_call
                    wall, cpu = time.perf_counter(), time.process_time()
                    run_id = runner.submit(f"{FAKES}:{kind}_caller", "go", id=f"{kind}-{n}")
                    worker._wake.set()  # as a NOTIFY would on PostgreSQL; SQLite polls
                    while worker.finished < expected:
                        time.sleep(0.0005)
                    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                    assert runner.get(run_id).output == f"{calls} calls", run_id
                    if n:
                        figures[kind]["wall"].append(wall * 1000 / calls)
                        figures[kind]["cpu"].append(cpu * 1000 / calls)
    finally:
        worker.stopping.set()
        worker._wake.set()
        serving.join()
    result: dict[str, Any] = {"calls": calls, "repeats": repeats}
    for measure in ("wall", "cpu"):
        plain, sub = figures["plain"][measure], figures["sub"][measure]
        result[measure] = {
            "plain_ms": common.spread(plain),
            "sub_ms": common.spread(sub),
            "over_ms": common.spread([s - p for s, p in zip(sub, plain, strict=True)]),
        }
    return result


# -- 1 and 2: a tree on workers ---------------------------------------------------------------


class Sampler(threading.Thread):
    """Counts the tree's runs by status every few milliseconds until stopped."""

    def __init__(self, url: str, root: str) -> None:
        super().__init__(daemon=True)
        self.engine = connect(url)
        self.root = root
        self.stop = threading.Event()
        self.samples: list[dict[str, int]] = []

    def run(self) -> None:
        while not self.stop.is_set():
            with self.engine.connect() as connection:
                rows = connection.execute(
                    select(runs.c.status, func.count())
                    .where(runs.c.root_id == self.root)
                    .group_by(runs.c.status)
                ).all()
            self.samples.append({status: n for status, n in rows})
            time.sleep(0.01)
        self.engine.dispose()


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    now = best = 0
    for _, change in events:
        now += change
        best = max(best, now)
    return best


def tree_on_workers(url: str, folder: Path, label: str, workers: int, slots: int) -> dict[str, Any]:
    ledger = folder / f"{label}.ledger"
    env = {**os.environ, "RUNNER_BENCH_TREE_LEDGER": str(ledger), "RUNNER_DATABASE_URL": url}
    env.setdefault("RUNNER_BENCH_LEAF_SECONDS", "1.0")
    root = f"tree-{label}"
    with Runner(url) as runner:
        runner.submit(f"{FAKES}:root", "tree", id=root, wake=False)
    sampler = Sampler(url, root)
    sampler.start()
    started = time.monotonic()
    once = ["--once"] if workers == 1 else []
    processes = [
        subprocess.Popen(
            [str(RUNNER), "worker", "--concurrency", str(slots), "--poll", "0.05", *once],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(workers)
    ]
    with Runner(url) as runner:
        while runner.store.get_run(root).status != "finished":
            if time.monotonic() - started > 300:
                raise SystemExit(f"{label}: the tree did not finish in 300 s")
            time.sleep(0.02)
        elapsed = time.monotonic() - started
        result = runner.get(root)
        tree = [runner.store.get_run(root), *all_below(runner, root)]
    for process in processes:
        if process.poll() is None:
            process.terminate()
        process.wait(timeout=60)
    sampler.stop.set()
    sampler.join()
    lines = [line.split() for line in ledger.read_text().splitlines()]
    intervals = [(float(a), float(b)) for a, b, *_ in lines]
    pids = sorted({pid for _, _, pid, _ in lines})
    waiting_when_busy = [s.get("waiting", 0) for s in sampler.samples if s.get("running", 0)]
    return {
        "label": label,
        "workers": workers,
        "slots_each": slots,
        "runs": len(tree),
        "answer": result.output,
        "seconds": round(elapsed, 2),
        "leaves_at_once": most_at_once(intervals),
        "most_running": max((s.get("running", 0) for s in sampler.samples), default=0),
        "most_waiting_while_running": max(waiting_when_busy, default=0),
        "leaves_by_process": [sum(1 for line in lines if line[2] == pid) for pid in pids],
        "tree_tokens": tree[0].tokens + tree[0].below_tokens,
        "sum_of_tokens": sum(run.tokens for run in tree),
    }


def all_below(runner: Runner, run_id: str) -> list[Any]:
    found = []
    for child in runner.store.child_runs(run_id):
        found.append(child)
        found.extend(all_below(runner, child.id))
    return found


# -- 3: randomised trees under a root budget ---------------------------------------------------


class Census:
    """Which runs are between their first and last model call, and the most at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active: set[str] = set()
        self.most = 0
        self.largest_call = 0

    def enter(self, task: str, tokens: int) -> None:
        with self.lock:
            self.active.add(task)
            self.most = max(self.most, len(self.active))
            self.largest_call = max(self.largest_call, tokens)

    def leave(self, task: str) -> None:
        with self.lock:
            self.active.discard(task)


def random_agent(rng: random.Random, census: Census, depth: int, name: str) -> Agent:
    """A sub-agent tree below `name`: a leaf (some noop calls) or a parent of 1-4 children."""
    cost = rng.randint(5, 60)
    if depth == 0 or rng.random() < 0.3:
        calls = rng.randint(1, 6)

        def leaf(transcript: list[dict[str, Any]]) -> dict[str, Any]:
            task = transcript[0]["content"]
            census.enter(task, cost)
            if turns(transcript) < calls:
                return {
                    "type": "tool",
                    "name": "noop",
                    "args": {"n": turns(transcript)},
                    "usage": cost,
                }
            census.leave(task)
            return {"type": "final", "content": "leaf done", "usage": cost}

        return Agent(
            FunctionModel(leaf),
            {"noop": lambda n: f"ok {n}"},
            name=name,
            max_steps=1000,
            max_tokens=None,
            max_repeats=None,
        )
    kids = [random_agent(rng, census, depth - 1, f"{name}{n}") for n in range(rng.randint(1, 4))]
    tools = {f"k{n}": kid.as_tool(f"k{n}") for n, kid in enumerate(kids)}

    def parent(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        task = transcript[0]["content"]
        census.enter(task, cost)
        if turns(transcript) == 0:
            calls = [{"name": t, "args": {"task": f"{task}/{t}"}} for t in tools]
            return {"type": "tool", "calls": calls, "usage": cost}
        census.leave(task)
        return {"type": "final", "content": f"{len(tool_results(transcript))}", "usage": cost}

    return Agent(
        FunctionModel(parent),
        tools,
        name=name,
        max_steps=1000,
        max_tokens=None,
        max_repeats=None,
        max_depth=5,
    )


def random_trees(url: str, trees: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    rows = []
    with Runner(url) as runner:
        for n in range(trees):
            census = Census()
            agent = random_agent(rng, census, rng.randint(1, 3), "t")
            budget = rng.randint(100, 1500)
            run_id = f"budget-{seed}-{n}"
            runner.run(agent, run_id, id=run_id, max_tokens=budget)
            root = runner.store.get_run(run_id)
            tree = [root, *all_below(runner, run_id)]
            spent = root.tokens + root.below_tokens
            assert spent == sum(run.tokens for run in tree), run_id
            bound = budget + census.largest_call * census.most
            rows.append((budget, spent, len(tree), census.most, census.largest_call, bound))
    over = [spent - budget for budget, spent, *_ in rows]
    return {
        "trees": trees,
        "over_budget": sum(1 for o in over if o > 0),
        "most_over_tokens": max(over),
        "most_over_in_calls": max(
            (spent - budget) / largest for budget, spent, _, _, largest, _ in rows
        ),
        "within_bound": sum(1 for _, spent, *_, bound in rows if spent <= bound),
        "most_runs_in_a_tree": max(r[2] for r in rows),
        "most_running_at_once": max(r[3] for r in rows),
    }


def sub_agent_costs(options: Any, folder: Path, pg: str | None, results: dict[str, Any]) -> None:
    shown = []
    url = common.sqlite_url(folder, "calls")
    shown.append(("SQLite", calls_on_a_worker(url, options.calls, options.repeats)))
    if pg is not None:
        with common.scratch_postgres(pg) as pg_url:
            shown.append(("PostgreSQL", calls_on_a_worker(pg_url, options.calls, options.repeats)))
    results["calls"] = {label: figures for label, figures in shown}
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    common.print_table(
        f"A sub-agent against a plain tool call: ms a call, median (min-max) of "
        f"{options.repeats} runs of {options.calls} calls each (load average {load})",
        ["database", "", "plain call", "sub-agent call", "sub-agent over plain"],
        [
            (
                label,
                measure,
                common.fmt_spread(figures[measure]["plain_ms"], 2),
                common.fmt_spread(figures[measure]["sub_ms"], 2),
                common.fmt_spread(figures[measure]["over_ms"], 2),
            )
            for label, figures in shown
            for measure in ("wall", "cpu")
        ],
    )


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--trees", type=int, default=50, help="randomised trees (part 3)")
    p.add_argument("--seed", type=int, default=24)
    p.add_argument("--calls", type=int, default=20, help="calls a run (part 0)")
    p.add_argument("--repeats", type=int, default=5, help="runs of each kind (part 0)")
    p.add_argument("--calls-only", action="store_true", help="part 0 alone")
    options = p.parse_args()
    pg = common.postgres_url_or_none(options)
    results: dict[str, Any] = {}
    with common.scratch_folder(options.dir) as folder:
        sub_agent_costs(options, folder, pg, results)
        if options.calls_only:
            common.write_json(options.json, "sub_agents", options, results)
            return
        shown = []
        url = common.sqlite_url(folder, "tree")
        shown.append(tree_on_workers(url, folder, "sqlite-1-worker", 1, 20))
        if pg is not None:
            with common.scratch_postgres(pg) as pg_url:
                shown.append(tree_on_workers(pg_url, folder, "postgres-1-worker", 1, 20))
            with common.scratch_postgres(pg) as pg_url:
                shown.append(tree_on_workers(pg_url, folder, "postgres-2-workers", 2, 10))
        results["workers"] = shown
        headers = [
            "database",
            "workers x slots",
            "runs",
            "s",
            "leaves at once",
            "most running",
            "most waiting then",
            "leaves by process",
            "tree tokens",
        ]
        common.print_table(
            "A root, 4 middles, 20 leaves (1 s each) on `runner worker`",
            headers,
            [
                (
                    r["label"],
                    f"{r['workers']} x {r['slots_each']}",
                    r["runs"],
                    r["seconds"],
                    r["leaves_at_once"],
                    r["most_running"],
                    r["most_waiting_while_running"],
                    "/".join(map(str, r["leaves_by_process"])),
                    f"{r['tree_tokens']} = {r['sum_of_tokens']}",
                )
                for r in shown
            ],
        )
        budget_url = common.sqlite_url(folder, "budgets")
        budgets = random_trees(budget_url, options.trees, options.seed)
        results["budgets"] = budgets
        common.print_table(
            f"{budgets['trees']} randomised trees under a root budget of N tokens (SQLite)",
            [
                "trees over N",
                "most over (tokens)",
                "most over (largest calls)",
                "within N + a call per run at once",
                "most runs",
                "most running at once",
            ],
            [
                (
                    budgets["over_budget"],
                    budgets["most_over_tokens"],
                    round(budgets["most_over_in_calls"], 2),
                    f"{budgets['within_bound']}/{budgets['trees']}",
                    budgets["most_runs_in_a_tree"],
                    budgets["most_running_at_once"],
                )
            ],
        )
    common.write_json(options.json, "sub_agents", options, results)


if __name__ == "__main__":
    main()
