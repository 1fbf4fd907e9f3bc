"""Crash soak: a tree's budget and a provider's limit, kept while workers are SIGKILLed.

    .venv/bin/python benchmarks/crash_soak.py [--scenarios E F] [--trees 50]
        [--f-seconds 150] [--tokens-per-minute 6000] [--no-postgres] [--json out.json]

Real `runner worker` processes (--lease 3) drain the work while a killer SIGKILLs one of
them every 2 to 5 s (at random) and starts another in its place, on SQLite and on
PostgreSQL.

E. A tree's budget. `--trees` randomised trees (benchmarks/soak_agents.py: depth 1 to 3,
   1 to 4 children a parent running at once, 1 to 6 model calls a leaf, 30 to 220 tokens a
   call, each call stating max_tokens=150), each under a root budget of N tokens (N from
   600 to 2,400, drawn per tree), on 2 workers of 8 slots. Per tree: its spend (the root's
   own plus what was charged below it) against N. The goal (issue 40): no tree over N by
   more than the last call that found room and the estimation error of the calls in
   flight beside it. So for each tree the soak takes, from the models' ledger, the call
   that started last, and allows its usage plus the excess of usage over runner's estimate
   of every call of the tree in flight when it started (a call counts as in flight for
   1 s past its return, until its entry is written). Printed: the trees that crossed N,
   the worst overshoot in tokens and in calls (the tree's mean call), the worst overshoot
   past the last call's own usage (the estimation error's part), and the trees over their
   allowance (the goal: none).
F. A provider's limit. A local fake provider (benchmarks/fake_provider.py, OpenAI's wire
   format, enforcing nothing, logging every request it charges) serves runs of the real
   `OpenAIChat` adapter (5 calls each, 300 tokens of completion) with `runner limit set` at
   `--tokens-per-minute`, on 2 workers of 4 slots, for `--f-seconds`. Printed: the most
   tokens the provider charged in any sliding 60 s window against the limit (the goal:
   never over), with the calls, the kills, and the calls killed in flight.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import common
import fakes
from sqlalchemy import func, select

from runner import Runner
from runner.sql.database import open_engine
from runner.sql.schema import limit_reservations, runs

HERE = Path(__file__).resolve().parent
RUNNER = Path(sys.executable).parent / "runner"
TREE_REF = f"{HERE / 'soak_agents.py'}:root"
LIMIT = "openai/bench-model"
LEASE_SECONDS = 3
# A call is in flight from its start until its entry is written: this long past its return.
WRITE_MARGIN = 1.0


class Fleet:
    """`runner worker` processes, one of them SIGKILLed (and replaced) every few seconds."""

    def __init__(self, url: str, workers: int, slots: int, env: dict[str, str], seed: int):
        self.url, self.slots = url, slots
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNER_")}
        self.env.update(env, RUNNER_DATABASE_URL=url)
        self.rng = random.Random(seed)
        self.kills = 0
        self.processes = [self._start() for _ in range(workers)]

    def _start(self) -> subprocess.Popen[bytes]:
        command = [
            str(RUNNER), "--log-level", "warning", "worker", "--concurrency", str(self.slots),
            "--poll", "0.2", "--lease", str(LEASE_SECONDS),
        ]  # fmt: skip
        return subprocess.Popen(
            command, env=self.env, cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def run(self, done: Any, seconds: float) -> float:
        """Kill and replace workers until `done()` or `seconds` pass: the seconds taken."""
        started = time.time()
        next_kill = started + self.rng.uniform(2, 5)
        while not done() and time.time() - started < seconds:
            time.sleep(0.5)
            if time.time() >= next_kill:
                victim = self.rng.randrange(len(self.processes))
                self.processes[victim].send_signal(signal.SIGKILL)
                self.processes[victim].wait(30)
                self.kills += 1
                self.processes[victim] = self._start()
                next_kill = time.time() + self.rng.uniform(2, 5)
        return time.time() - started

    def stop(self) -> None:
        for process in self.processes:
            process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()


def unfinished(url: str, prefix: str) -> int:
    engine = open_engine(url)
    try:
        with engine.connect() as connection:
            return int(
                connection.execute(
                    select(func.count())
                    .select_from(runs)
                    .where(runs.c.id.startswith(prefix), runs.c.status != "finished")
                ).scalar_one()
            )
    finally:
        engine.dispose()


# -- E: a tree's budget -------------------------------------------------------------------------


def scenario_e(url: str, folder: Path, label: str, options: Any) -> dict[str, Any]:
    ledger = folder / f"ledger-{label}.jsonl"
    rng = random.Random(options.seed)
    budgets = {}
    with Runner(url) as runner:
        for n in range(options.trees):
            run_id = f"soak-{n:03d}"
            budgets[run_id] = rng.randint(600, 2400)
            runner.submit(TREE_REF, f"t{options.seed}-{n}", id=run_id, max_tokens=budgets[run_id])
    fleet = Fleet(url, 2, 8, {"RUNNER_SOAK_LEDGER": str(ledger)}, options.seed)
    try:
        seconds = fleet.run(lambda: not unfinished(url, "soak-"), options.e_timeout)
    finally:
        fleet.stop()
    calls: dict[str, list[dict[str, Any]]] = {}
    for line in ledger.read_text().splitlines():
        call = json.loads(line)
        calls.setdefault(call["task"].split(".")[0], []).append(call)
    rows = []
    with Runner(url) as runner:
        for n, (run_id, budget) in enumerate(budgets.items()):
            root = runner.store.get_run(run_id)
            spent = root.tokens + root.below_tokens
            made = calls.get(f"t{options.seed}-{n}", [])
            rows.append(_tree_row(run_id, budget, spent, str(root.stop_reason), made))
    crossed = [row for row in rows if row["over"] > 0]
    return {
        "label": label,
        "tree_count": len(rows),
        "seconds": round(seconds, 1),
        "kills": fleet.kills,
        "calls": sum(len(made) for made in calls.values()),
        "unfinished": unfinished(url, "soak-"),
        "crossed": len(crossed),
        "worst_over_tokens": max((row["over"] for row in rows), default=0),
        "worst_over_calls": round(max((row["over_calls"] for row in rows), default=0.0), 2),
        "over_allowance": [row for row in rows if row["over"] > row["allowed"]],
        # Past the crossing call itself (as a run's own budget allows): the estimation
        # error's part, against that error.
        "worst_beyond_last_call": max((row["over"] - row["last_call"] for row in rows), default=0),
        "trees": rows,
        "worst_allowance_used": round(
            max((row["over"] / row["allowed"] for row in crossed if row["allowed"]), default=0.0),
            2,
        ),
    }


def _tree_row(
    run_id: str, budget: int, spent: int, stop: str, made: list[dict[str, Any]]
) -> dict[str, Any]:
    over = spent - budget
    mean = sum(call["usage"] for call in made) / len(made) if made else 1.0
    allowed = error = 0
    if made:
        last = max(made, key=lambda call: call["start"])
        beside = [
            call
            for call in made
            if call is not last and call["start"] <= last["start"] <= call["end"] + WRITE_MARGIN
        ]
        error = sum(max(call["usage"] - call["estimate"], 0) for call in beside)
        allowed = last["usage"] + error
    return {
        "run": run_id,
        "budget": budget,
        "spent": spent,
        "over": over,
        "over_calls": over / mean,
        "allowed": allowed,
        "last_call": allowed - error,
        "error_beside": error,
        "stop": stop,
        "calls": len(made),
    }


# -- F: a provider's limit ----------------------------------------------------------------------


def scenario_f(url: str, label: str, options: Any) -> dict[str, Any]:
    with Runner(url) as runner:
        runner.set_limit(LIMIT, tokens_per_minute=options.tokens_per_minute)
        runner.submit_many(fakes.make_provider_agent(), ["go"] * options.f_runs, wake=False)
    fake = subprocess.Popen(
        [
            sys.executable, str(HERE / "fake_provider.py"), "--calls", "5",
            "--completion", "300", "--latency", "0.3",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert fake.stdout is not None
    base_url = fake.stdout.readline().strip()
    env = {
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_KEY": "bench",
        "RUNNER_BENCH_COMPLETION": "300",
    }
    fleet = Fleet(url, 2, 4, env, options.seed + 1)
    try:
        seconds = fleet.run(lambda: False, options.f_seconds)
    finally:
        fleet.stop()
        fake.send_signal(signal.SIGTERM)
        seen = json.loads(fake.stdout.read())
        fake.wait(30)
    accepted = [(at, tokens) for at, tokens in seen["accepted"]]
    busiest, j, window = 0, 0, 0
    for at, tokens in accepted:  # the most tokens in any sliding 60 s window
        window += tokens
        while accepted[j][0] <= at - 60:
            window -= accepted[j][1]
            j += 1
        busiest = max(busiest, window)
    engine = open_engine(url)
    try:
        with engine.connect() as connection:
            finished = connection.execute(
                select(func.count()).select_from(runs).where(runs.c.status == "finished")
            ).scalar_one()
            held = [
                [row.run_id, row.lease_epoch, row.tokens, row.settled,
                 row.reserved_at.timestamp(), row.settled_at and row.settled_at.timestamp()]
                for row in connection.execute(select(limit_reservations))
            ]  # fmt: skip
    finally:
        engine.dispose()
    if options.diagnose:
        print(json.dumps({"accepted": accepted, "reservations": held}), file=sys.stderr)
    return {
        "label": label,
        "seconds": round(seconds, 1),
        "kills": fleet.kills,
        "calls": len(accepted),
        "tokens": sum(tokens for _, tokens in accepted),
        "limit": options.tokens_per_minute,
        "busiest_minute": busiest,
        "ratio": round(busiest / options.tokens_per_minute, 3),
        "runs_finished": int(finished),
    }


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--scenarios", nargs="+", default=["E", "F"], choices=["E", "F"])
    p.add_argument("--trees", type=int, default=50)
    p.add_argument("--seed", type=int, default=40)
    p.add_argument("--e-timeout", type=float, default=600.0, help="E's longest drain, seconds")
    p.add_argument("--f-seconds", type=float, default=150.0, help="F's length, seconds")
    p.add_argument("--f-runs", type=int, default=60, help="F's runs queued (a backlog)")
    p.add_argument("--tokens-per-minute", type=int, default=6000)
    p.add_argument("--diagnose", action="store_true", help="F: print what was charged (stderr)")
    options = p.parse_args()
    pg = common.postgres_url_or_none(options)
    results: dict[str, Any] = {}
    with common.scratch_folder(options.dir) as folder:
        databases: list[tuple[str, Any]] = [("sqlite", None)]
        if pg is not None:
            databases.append(("postgres", pg))
        if "E" in options.scenarios:
            shown = []
            for label, admin in databases:
                if admin is None:
                    shown.append(scenario_e(common.sqlite_url(folder, "e"), folder, label, options))
                else:
                    with common.scratch_postgres(admin) as url:
                        shown.append(scenario_e(url, folder, label, options))
            results["E"] = shown
            common.print_table(
                f"E. {options.trees} randomised trees under a root budget, workers SIGKILLed",
                [
                    "database", "s", "kills", "calls", "trees over N", "worst over (tokens)",
                    "worst over (calls)", "worst past the last call", "over their allowance",
                    "most of an allowance used", "unfinished",
                ],
                [
                    (
                        r["label"], r["seconds"], r["kills"], r["calls"],
                        f"{r['crossed']}/{r['tree_count']}", r["worst_over_tokens"],
                        r["worst_over_calls"], r["worst_beyond_last_call"],
                        len(r["over_allowance"]),
                        r["worst_allowance_used"], r["unfinished"],
                    )
                    for r in shown
                ],
            )  # fmt: skip
            for r in shown:
                for row in r["over_allowance"]:
                    print(f"  {r['label']}: over its allowance: {row}")
        if "F" in options.scenarios:
            shown = []
            for label, admin in databases:
                if admin is None:
                    shown.append(scenario_f(common.sqlite_url(folder, "f"), label, options))
                else:
                    with common.scratch_postgres(admin) as url:
                        shown.append(scenario_f(url, label, options))
            results["F"] = shown
            common.print_table(
                f"F. A provider limit of {options.tokens_per_minute:,} tokens a minute, "
                "workers SIGKILLed",
                [
                    "database", "s", "kills", "calls", "tokens", "busiest 60 s", "limit",
                    "ratio", "runs finished",
                ],
                [
                    (
                        r["label"], r["seconds"], r["kills"], r["calls"], r["tokens"],
                        r["busiest_minute"], r["limit"], r["ratio"], r["runs_finished"],
                    )
                    for r in shown
                ],
            )  # fmt: skip
    common.write_json(options.json, "crash_soak", options, results)


if __name__ == "__main__":
    main()
