"""A durable step in instructions: what the peers' agent costs the CPU, counted by
callgrind, not timed, so that a change of a few percent shows through a shared machine.

    .venv/bin/python benchmarks/step_instructions.py [--runs 10] [--steps 50]
        [--baseline-python OTHER/.venv/bin/python] [--no-postgres] [--json out.json]

Each interpreter (this checkout's, and `--baseline-python`'s: the code before a change)
runs the agent of `benchmarks/peers` (one model call that returns a tool call, then that
call; `--steps` of them, then the final answer) through `Runner.run`, under `valgrind
--tool=callgrind`, twice: once with a warm-up run alone and once with `--runs` more runs.
The difference over the steps of those runs is the step's instructions, start-up, imports
and the warm-up left out; a run's own start and end are in it, shared by its steps, as in
`peers_step.py`. Only the process's instructions are counted: not the kernel's (the
fsyncs), not the PostgreSQL server's. The counts move by about 1% with the interpreter's
hash seed, so every child runs with PYTHONHASHSEED=0; on PostgreSQL they move a little more
(how often psycopg finds the server's answer not yet there). `valgrind` comes with the
machine; each count takes about a minute.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # benchmarks/common.py

import common  # noqa: E402

# What each child runs: the warm-up run, then RUNS more, of STEPS steps (argv: TARGET
# STEPS RUNS), with runner imported from the interpreter's own installation.
CHILD = """
import sys, uuid
sys.path.insert(0, {peers!r})
import step_runner
from runner import Runner
target, steps, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
runner = Runner(target)
agent = step_runner.make_agent(steps)
for _ in range(runs + 1):
    result = runner.run(agent, "go", id="i" + uuid.uuid4().hex[:16])
    assert result.stop_reason == "final" and result.steps == steps + 1, result
runner.close()
"""

_COLLECTED = re.compile(r"Collected : (\d+)")


def instructions(python: str, target: str, steps: int, runs: int) -> int:
    """The instructions of one child process under callgrind."""
    with tempfile.TemporaryDirectory() as scratch:
        script = Path(scratch) / "child.py"
        script.write_text(CHILD.format(peers=str(HERE / "peers")))
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={scratch}/out",
                python,
                str(script),
                target,
                str(steps),
                str(runs),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
            check=False,
        )
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{python} under callgrind failed:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def per_step(python: str, target: str, steps: int, runs: int) -> float:
    alone = instructions(python, target, steps, 0)
    more = instructions(python, target, steps, runs)
    return (more - alone) / (runs * steps)


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--runs", type=int, default=10, help="timed runs after the warm-up")
    p.add_argument("--steps", type=int, default=50, help="tool steps a run")
    p.add_argument("--baseline-python", metavar="PATH", help="the code before a change")
    options = p.parse_args()
    pythons = {"this": sys.executable}
    if options.baseline_python:
        pythons["baseline"] = options.baseline_python
    rows: list[list[Any]] = []
    results: dict[str, dict[str, float]] = {}
    postgres = common.postgres_url_or_none(options)
    with common.scratch_folder(options.dir) as folder:
        for label, python in pythons.items():
            target = common.sqlite_url(folder, label)
            results.setdefault("sqlite", {})[label] = per_step(
                python, target, options.steps, options.runs
            )
    if postgres is not None:
        for label, python in pythons.items():
            with common.scratch_postgres(postgres) as target:
                results.setdefault("postgresql", {})[label] = per_step(
                    python, target, options.steps, options.runs
                )
    for db, counts in results.items():
        row: list[Any] = [db, f"{counts['this']:,.0f}"]
        if "baseline" in counts:
            row += [f"{counts['baseline']:,.0f}", f"{counts['this'] / counts['baseline']:.3f}"]
        rows.append(row)
    headers = ["database", "instructions a step"]
    if options.baseline_python:
        headers += ["baseline's", "this / baseline"]
    common.print_table(
        f"{options.runs} runs of {options.steps} steps after a warm-up run", headers, rows
    )
    common.write_json(options.json, "step_instructions", options, results)


if __name__ == "__main__":
    main()
