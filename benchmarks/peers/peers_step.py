"""A durable agent step, side by side with its peers and the raw-driver floor.

    .venv/bin/python benchmarks/peers/peers_step.py [--n 50] [--runs 4] [--reps 10]
        [--only sqlite|postgresql] [--labels plain,runner_memory] [--peers-python PATH]
        [--baseline-python PATH]

One agent step (a scripted model call that returns one tool call, then that call;
`workload.py`) made durable by runner (`Runner.run`), by LangGraph (sync checkpointer), by
DBOS (each call a step), and by the plain driver with one and with two commits a step, on
SQLite (WAL, synchronous=FULL for all, read back) and PostgreSQL; and the same agent with
no persistence: a plain Python loop, and runner in memory (`run_agent`).

Each contender is a fresh process (`step_*.py`) that makes one warm-up run, then RUNS
timed runs of N steps; its figures are the timed runs' wall time and its own CPU time
(all its threads; the database server's is not in it) over RUNS x N steps. One repetition
runs every contender once, the order rotated from one repetition to the next; ratios are
taken inside a repetition, then their median and range over the repetitions. The 1-minute
load average is sampled every 5 s. On a shared machine only the ratios mean much.
`--baseline-python` (another checkout's venv: the code before a change) runs runner's
contenders under it too, in the same rotation, and gives each one's ratio to its baseline.

runner's contenders run under this interpreter (runner's venv); the others under the
peers' venv, `--peers-python` (default: $RUNNER_BENCH_PEERS_PYTHON, else `.venv-peers/bin/
python` at the project's root), made as README.md says: LangGraph and DBOS are not
runner's dependencies. SQLite files go in a scratch folder (`--dir`, a real disk);
PostgreSQL contenders each get a scratch database, dropped at the end (`--no-postgres`:
SQLite only).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, NamedTuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/common.py

import common  # noqa: E402
from sqlalchemy import create_engine, text  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402


class Contender(NamedTuple):
    label: str
    interpreter: str  # "runner", "peers" or "baseline"
    script: str
    mode: list[str]  # the script's arguments before TARGET
    db: str  # "sqlite", "postgresql" or "none": what TARGET is


CONTENDERS = [
    Contender("plain", "peers", "step_raw.py", ["plain", "none"], "none"),
    Contender("runner_memory", "runner", "step_runner.py", ["memory"], "none"),
    Contender("raw_one_sqlite", "peers", "step_raw.py", ["one", "sqlite"], "sqlite"),
    Contender("raw_two_sqlite", "peers", "step_raw.py", ["two", "sqlite"], "sqlite"),
    Contender("runner_sqlite", "runner", "step_runner.py", ["sqlite"], "sqlite"),
    Contender("lg_sqlite", "peers", "step_lg.py", ["sqlite"], "sqlite"),
    Contender("dbos_sqlite", "peers", "step_dbos.py", ["sqlite"], "sqlite"),
    Contender("dbos_sqlite_delete", "peers", "step_dbos.py", ["sqlite"], "sqlite"),
    Contender("raw_one_pg", "peers", "step_raw.py", ["one", "postgresql"], "postgresql"),
    Contender("raw_two_pg", "peers", "step_raw.py", ["two", "postgresql"], "postgresql"),
    Contender("raw_two_ac_pg", "peers", "step_raw.py", ["two_ac", "postgresql"], "postgresql"),
    Contender("runner_pg", "runner", "step_runner.py", ["postgresql"], "postgresql"),
    Contender("lg_pg", "peers", "step_lg.py", ["postgresql"], "postgresql"),
    Contender("dbos_pg", "peers", "step_dbos.py", ["postgresql"], "postgresql"),
]

RATIOS = [
    # (name, numerator, denominator)
    ("runner in memory / plain loop", "runner_memory", "plain"),
    ("LangGraph / runner, SQLite", "lg_sqlite", "runner_sqlite"),
    ("DBOS (WAL) / runner, SQLite", "dbos_sqlite", "runner_sqlite"),
    ("DBOS (rollback journal) / runner, SQLite", "dbos_sqlite_delete", "runner_sqlite"),
    ("runner / raw 1 commit, SQLite", "runner_sqlite", "raw_one_sqlite"),
    ("runner / raw 2 commits, SQLite", "runner_sqlite", "raw_two_sqlite"),
    ("LangGraph / raw 2 commits, SQLite", "lg_sqlite", "raw_two_sqlite"),
    ("DBOS (WAL) / raw 2 commits, SQLite", "dbos_sqlite", "raw_two_sqlite"),
    ("raw 2 / raw 1, SQLite", "raw_two_sqlite", "raw_one_sqlite"),
    ("LangGraph / runner, PostgreSQL", "lg_pg", "runner_pg"),
    ("DBOS / runner, PostgreSQL", "dbos_pg", "runner_pg"),
    ("runner / raw 1 commit, PostgreSQL", "runner_pg", "raw_one_pg"),
    ("runner / raw 2 commits, PostgreSQL", "runner_pg", "raw_two_pg"),
    ("runner / raw 2 autocommit, PostgreSQL", "runner_pg", "raw_two_ac_pg"),
    ("LangGraph / raw 2 commits, PostgreSQL", "lg_pg", "raw_two_pg"),
    ("DBOS / raw 2 commits, PostgreSQL", "dbos_pg", "raw_two_pg"),
    ("raw 2 / raw 1, PostgreSQL", "raw_two_pg", "raw_one_pg"),
]


def baselines() -> list[Contender]:
    """runner's contenders again, under `--baseline-python` (the code before a change)."""
    return [
        c._replace(label=f"{c.label}_baseline", interpreter="baseline")
        for c in CONTENDERS
        if c.interpreter == "runner"
    ]


def baseline_ratios() -> list[tuple[str, str, str]]:
    return [
        (f"{c.label} / its baseline", c.label, f"{c.label}_baseline")
        for c in CONTENDERS
        if c.interpreter == "runner"
    ] + [
        ("baseline / raw 2 commits, SQLite", "runner_sqlite_baseline", "raw_two_sqlite"),
        ("baseline / raw 2 commits, PostgreSQL", "runner_pg_baseline", "raw_two_pg"),
    ]


class LoadSampler:
    """The 1-minute load average every `every` seconds while running (a daemon thread)."""

    def __init__(self, every: float = 5.0) -> None:
        self.samples: list[float] = [os.getloadavg()[0]]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(every,), daemon=True)

    def _sample(self, every: float) -> None:
        while not self._stop.wait(every):
            self.samples.append(os.getloadavg()[0])

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.samples.append(os.getloadavg()[0])


@contextmanager
def plain_postgres(admin_url: str) -> Iterator[str]:
    """A new empty PostgreSQL database (a peer makes its own tables); dropped afterwards.
    Its libpq URL, which psycopg, LangGraph and DBOS take."""
    name = f"runner_bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(admin_url).set(database=name, drivername="postgresql")
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def run_one(
    contender: Contender, interpreter: str, target: str, n: int, runs: int
) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNER_")}
    if contender.label == "dbos_sqlite_delete":
        env["DBOS_SQLITE_JOURNAL"] = "DELETE"
    argv = [interpreter, str(HERE / contender.script), *contender.mode, target, str(n), str(runs)]
    done = subprocess.run(argv, cwd=HERE, capture_output=True, text=True, timeout=900, env=env)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return result
    raise RuntimeError(
        f"{contender.label} failed (exit {done.returncode})\n{done.stdout[-1500:]}\n"
        f"{done.stderr[-3000:]}"
    )


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--n", type=int, default=50, help="steps a run (default 50)")
    p.add_argument("--runs", type=int, default=4, help="timed runs a process (default 4)")
    p.add_argument("--reps", type=int, default=10, help="repetitions (default 10)")
    p.add_argument("--only", choices=["sqlite", "postgresql"])
    p.add_argument("--labels", help="comma-separated contender labels (default: all)")
    p.add_argument(
        "--peers-python",
        default=os.environ.get(
            "RUNNER_BENCH_PEERS_PYTHON", str(HERE.parent.parent / ".venv-peers/bin/python")
        ),
        help="the peers' venv's interpreter (README.md)",
    )
    p.add_argument(
        "--baseline-python",
        help="another checkout's venv interpreter: runner's contenders run under it too, as "
        "`<label>_baseline`, each compared with its baseline inside each repetition",
    )
    options = p.parse_args()
    postgres = None if options.only == "sqlite" else common.postgres_url_or_none(options)
    contenders = CONTENDERS + (baselines() if options.baseline_python else [])
    ratios_named = RATIOS + (baseline_ratios() if options.baseline_python else [])
    chosen = [
        c
        for c in contenders
        if (c.db == "none" or c.db == (options.only or c.db))
        and (c.db != "postgresql" or postgres is not None)
        and (not options.labels or c.label.removesuffix("_baseline") in options.labels.split(","))
    ]
    interpreters = {
        "runner": sys.executable,
        "peers": options.peers_python,
        "baseline": options.baseline_python or "",
    }
    if any(c.interpreter == "peers" for c in chosen) and not Path(options.peers_python).exists():
        raise SystemExit(f"no peers' interpreter at {options.peers_python}: see README.md")
    reps: list[dict[str, dict[str, Any]]] = []
    with ExitStack() as stack, LoadSampler() as load:
        folder = stack.enter_context(common.scratch_folder(options.dir))
        targets: dict[str, str] = {}
        for c in chosen:
            if c.db == "sqlite":
                targets[c.label] = str(folder / f"{c.label}.db")
            elif c.db == "postgresql" and postgres is not None:
                scratch = plain_postgres if c.interpreter == "peers" else common.scratch_postgres
                targets[c.label] = stack.enter_context(scratch(postgres))
            else:
                targets[c.label] = "-"
        for rep in range(options.reps):
            k = rep % len(chosen)
            results: dict[str, dict[str, Any]] = {}
            for c in chosen[k:] + chosen[:k]:
                r = run_one(
                    c, interpreters[c.interpreter], targets[c.label], options.n, options.runs
                )
                r["load1"] = os.getloadavg()[0]
                results[c.label] = r
                print(
                    f"rep {rep} {c.label:20s} {r['per_step_us']:10.0f} µs/step, "
                    f"CPU {r['cpu_per_step_us']:8.0f}, load {r['load1']:.1f}",
                    file=sys.stderr,
                    flush=True,
                )
            reps.append(results)
    labels = [c.label for c in chosen]
    figures: dict[str, dict[str, Any]] = {
        label: {
            "wall": common.spread([r[label]["per_step_us"] for r in reps]),
            "cpu": common.spread([r[label]["cpu_per_step_us"] for r in reps]),
            "info": reps[0][label].get("info"),
        }
        for label in labels
    }
    ratios = {
        name: {
            "wall": common.spread([r[num]["per_step_us"] / r[den]["per_step_us"] for r in reps]),
            "cpu": common.spread(
                [r[num]["cpu_per_step_us"] / r[den]["cpu_per_step_us"] for r in reps]
            ),
        }
        for name, num, den in ratios_named
        if num in labels and den in labels
    }
    load_figures = {
        "start": load.samples[0],
        "end": load.samples[-1],
        "median": statistics.median(load.samples),
        "min": min(load.samples),
        "max": max(load.samples),
    }
    print(
        f"\n{options.n} steps x {options.runs} runs a process, {len(reps)} repetitions; "
        f"load average {load_figures['min']:.1f} to {load_figures['max']:.1f} "
        f"(median {load_figures['median']:.1f})"
    )
    common.print_table(
        "µs a step, median (min-max) over the repetitions",
        ["contender", "wall", "CPU (this process)"],
        [
            [lab, common.fmt_spread(f["wall"]), common.fmt_spread(f["cpu"])]
            for lab, f in figures.items()
        ],
    )
    common.print_table(
        "ratios inside each repetition, median (min-max)",
        ["ratio", "wall", "CPU"],
        [
            [name, common.fmt_spread(r["wall"], 2), common.fmt_spread(r["cpu"], 2)]
            for name, r in ratios.items()
        ],
    )
    common.write_json(
        options.json,
        "peers_step",
        options,
        {"load": load_figures, "contenders": figures, "ratios": ratios, "repetitions": reps},
    )


if __name__ == "__main__":
    main()
