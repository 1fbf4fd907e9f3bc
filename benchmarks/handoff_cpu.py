"""The in-memory step's CPU with and without holding a spare thread to its caller's processor.

    .venv/bin/python benchmarks/handoff_cpu.py [--steps 50] [--runs 10] [--rounds 6]
        [--realtime] [--json out.json]

Every model call with a `model_timeout` is handed to a spare thread (`runner.core.calls`);
before waking it, the caller holds it to its own processor (`_Nearby`). This times
`run_agent` in memory on the peers' agent (`peers/step_runner.py`: one `echo` tool call a
step, then the answer) in fresh processes, taking turns: one with the hold (as shipped),
one without it (`_Nearby` switched off: the code before it). Each process makes one
warm-up run, then RUNS timed runs of STEPS steps, and reports its CPU time (all threads)
and voluntary context switches a step; the ratio with / without is taken inside each
round, then the median and range over the rounds.

A handoff costs most when the woken thread finds a processor idle, as on a quiet machine;
on a busy one the thread waits for the caller's own processor anyway. `--realtime` runs
each process at real-time priority (`chrt -f 10`, root only), so that its threads preempt
everything else and a woken thread finds a processor free: a quiet machine's case on a
busy one.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import common

HERE = Path(__file__).resolve().parent


def measure(hold: bool, steps: int, runs: int) -> dict[str, float]:
    """In this process: CPU µs and voluntary switches a step."""
    sys.path.insert(0, str(HERE / "peers"))
    from step_runner import BUDGETS, make_agent

    from runner import run_agent
    from runner.core import calls

    if not hold:
        calls._NEARBY._usable = False
    agent = make_agent(steps)

    def go(k: int) -> None:
        for _ in range(k):
            run_agent(agent.model, agent.tools, "go", **BUDGETS)

    go(1)
    before = resource.getrusage(resource.RUSAGE_SELF)
    cpu, wall = time.process_time(), time.perf_counter()
    go(runs)
    after = resource.getrusage(resource.RUSAGE_SELF)
    n = steps * runs
    return {
        "cpu_us": (time.process_time() - cpu) / n * 1e6,
        "wall_us": (time.perf_counter() - wall) / n * 1e6,
        "switches": (after.ru_nvcsw - before.ru_nvcsw) / n,
    }


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--realtime", action="store_true", help="each process under chrt -f 10")
    p.add_argument("--child", choices=["hold", "none"], help=argparse.SUPPRESS)
    options = p.parse_args()
    if options.child:
        result = measure(options.child == "hold", options.steps, options.runs)
        print(json.dumps(result))
        return
    prefix = ["chrt", "-f", "10"] if options.realtime else []
    results: dict[str, list[dict[str, float]]] = {"hold": [], "none": []}
    for i in range(options.rounds):
        for which in ("hold", "none") if i % 2 == 0 else ("none", "hold"):
            argv = [*prefix, sys.executable, __file__, "--child", which]
            argv += ["--steps", str(options.steps), "--runs", str(options.runs)]
            out = subprocess.run(argv, capture_output=True, text=True, check=True)
            results[which].append(json.loads(out.stdout.strip().splitlines()[-1]))
    rows = []
    for which, label in (("none", "without the hold"), ("hold", "with the hold")):
        rs = results[which]
        rows.append(
            [
                label,
                common.fmt_spread(common.spread([r["cpu_us"] for r in rs]), 1),
                common.fmt_spread(common.spread([r["switches"] for r in rs]), 2),
            ]
        )
    ratio = common.spread(
        [h["cpu_us"] / n["cpu_us"] for h, n in zip(results["hold"], results["none"], strict=True)]
    )
    rows.append(["with / without, CPU", common.fmt_spread(ratio, 2), ""])
    common.print_table(
        f"run_agent in memory, {options.steps}-step runs, {options.rounds} rounds"
        + (" at real-time priority" if options.realtime else ""),
        ["", "CPU µs a step", "voluntary switches a step"],
        rows,
    )
    common.write_json(options.json, "handoff_cpu", options, {"results": results, "ratio": ratio})


if __name__ == "__main__":
    main()
