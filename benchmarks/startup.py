"""Start-up: how long `runner --help` and `runner list` take, beside a bare interpreter.

    .venv/bin/python benchmarks/startup.py [--repeats 21] [--runs 20] [--json out.json]
                                           [--baseline OTHER/.venv/bin] [--terminal]

Each command runs as the user runs it, a fresh `runner` process (the installed script),
`--repeats` times, the commands taking turns so that the machine's load falls on each
alike: `python -c pass` (the interpreter's own start, the floor no command can go under),
`runner --help`, `runner list --db FILE` on a SQLite file holding `--runs` finished runs
(the default database kind), `runner show ID` of one of them, and `runner worker --once` on
it (nothing queued: a worker's start, SQLAlchemy and the store, and its exit). Reported per
command: wall time and CPU time (user + system of the child), median (min-max), in milliseconds, the
wall time less the bare interpreter's, and the CPU time as a ratio to the bare interpreter's
(per repetition, then the median). The commands write to pipes, as in a script; with
`--terminal`, `list` and `show` also take turns writing to a pseudo-terminal (a colour one),
where rich draws the table and the styles. The goals are under 150 ms for `--help` and under 250 ms
for `list` (issue 13), and at most 3.3x and 4.3x the interpreter's CPU (issue 28). With
PostgreSQL at hand (`--postgres URL`, the local server by default; `--no-postgres` skips
it), `runner list` and `runner show` of a scratch PostgreSQL database holding as many runs
take their turns too (the baseline lists the same database).

`--baseline` names another installation's bin folder (a checkout of an earlier commit with
its own `.venv`): its `runner --help`, `list` and `show` (on a database it made itself)
then take their turns beside these, and each is reported as a ratio to it.

The commands run as an installed copy does: with Python's bytecode cache (the children's
environment drops PYTHONDONTWRITEBYTECODE, which would make each start compile every runner
module anew), after one warm-up run of each that writes it.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import common

RUNNER = Path(sys.executable).parent / "runner"
CACHED = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
# A colour terminal, as a person's usually is (rich draws styles there).
TERMINAL = {**{k: v for k, v in CACHED.items() if k != "NO_COLOR"}, "TERM": "xterm-256color"}


def timed(command: list[str], terminal: bool = False) -> tuple[float, float]:
    """One run of `command` (its stdout and stderr a pseudo-terminal with `terminal`, else
    pipes): its wall and CPU milliseconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    if terminal:
        returncode, said = _on_a_terminal(command)
    else:
        done = subprocess.run(command, capture_output=True, text=True, env=CACHED)
        returncode, said = done.returncode, done.stderr
    wall = (time.perf_counter() - started) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert returncode == 0, said
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return wall, cpu


def _on_a_terminal(command: list[str]) -> tuple[int, str]:
    """`command` writing to a pseudo-terminal (as a person's shell runs it: styles shown),
    read as it writes; its exit code and what it wrote."""
    leader, follower = os.openpty()
    written: list[bytes] = []

    def read() -> None:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the other side closed
                return
            if not chunk:
                return
            written.append(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        done = subprocess.run(
            command, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=TERMINAL
        )
    finally:
        os.close(follower)
        reader.join()
        os.close(leader)
    return done.returncode, b"".join(written).decode(errors="replace")


def runner_commands(runner: Path, url: str) -> dict[str, list[str]]:
    return {
        "runner --help": [str(runner), "--help"],
        "runner list": [str(runner), "list", "--db", url],
        "runner show": [str(runner), "show", "run-0", "--db", url],
        # A worker's start and exit with nothing queued: the one of these that loads SQLAlchemy.
        "runner worker --once": [str(runner), "worker", "--once", "--db", url],
    }


def fill(python: str, url: str, runs: int) -> None:
    """Finished runs in a new database, made by that installation's own `python`."""
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); import fakes; from runner import Runner\n"
        "with Runner(sys.argv[2]) as runner:\n"
        "    for i in range(int(sys.argv[3])):\n"
        "        runner.run(fakes.make_agent(), fakes.task(3), id=f'run-{i}')\n"
    )
    here = str(Path(__file__).parent)
    # Not from this checkout's folder: `python -c` would import its runner, not that one's.
    subprocess.run(
        [python, "-c", script, here, url, str(runs)],
        check=True,
        env=CACHED,
        cwd=tempfile.gettempdir(),
    )


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--repeats", type=int, default=21)
    p.add_argument("--runs", type=int, default=20, help="finished runs in the listed database")
    p.add_argument("--baseline", metavar="BIN", help="another installation's bin folder")
    p.add_argument(
        "--terminal",
        action="store_true",
        help="also `list` and `show` writing to a pseudo-terminal (styles drawn)",
    )
    options = p.parse_args()
    postgres = common.postgres_url_or_none(options)
    with ExitStack() as stack:
        folder = stack.enter_context(common.scratch_folder(options.dir))
        url = common.sqlite_url(folder, "startup")
        fill(sys.executable, url, options.runs)
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            **runner_commands(RUNNER, url),
        }
        if options.baseline is not None:
            bin_folder = Path(options.baseline)
            other = f"sqlite:///{folder / 'baseline.db'}"  # made (and migrated) by that one
            fill(str(bin_folder / "python"), other, options.runs)
            for name, command in runner_commands(bin_folder / "runner", other).items():
                commands[f"{name} (baseline)"] = command
        if postgres is not None:
            served = stack.enter_context(common.scratch_postgres(postgres))
            fill(sys.executable, served, options.runs)
            commands["runner list (PostgreSQL)"] = [str(RUNNER), "list", "--db", served]
            commands["runner show (PostgreSQL)"] = [
                str(RUNNER), "show", "run-0", "--db", served,
            ]  # fmt: skip
            if options.baseline is not None:
                commands["runner list (PostgreSQL) (baseline)"] = [
                    str(Path(options.baseline) / "runner"), "list", "--db", served,
                ]  # fmt: skip
        on_terminal: set[str] = set()
        if options.terminal:
            for name in [n for n in commands if n.startswith(("runner list", "runner show"))]:
                if "PostgreSQL" not in name:
                    shown = name.replace("runner list", "runner list (terminal)")
                    shown = shown.replace("runner show", "runner show (terminal)")
                    commands[shown] = commands[name]
                    on_terminal.add(shown)
        for name, command in commands.items():
            # warm-up: the bytecode cache written, the file in the page cache
            timed(command, name in on_terminal)
        walls: dict[str, list[float]] = {name: [] for name in commands}
        cpus: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(options.repeats):
            for name, command in commands.items():
                wall, cpu = timed(command, name in on_terminal)
                walls[name].append(wall)
                cpus[name].append(cpu)
    floor = common.spread(walls["python -c pass"])["median"]
    # The goals (docs/performance.md) are ratios of CPU time to the bare interpreter's, per
    # repetition (the two took turns), then the median: a ratio survives the machine's load.
    interpreter_cpu = cpus["python -c pass"]
    results: dict[str, Any] = {}
    rows = []
    for name in commands:
        wall_spread, cpu_spread = common.spread(walls[name]), common.spread(cpus[name])
        baseline = walls.get(f"{name} (baseline)")
        # Per repetition (the two took turns), then the median.
        ratio = (
            common.spread([a / b for a, b in zip(walls[name], baseline, strict=True)])
            if baseline is not None
            else None
        )
        cpu_ratio = common.spread([a / b for a, b in zip(cpus[name], interpreter_cpu, strict=True)])
        results[name] = {
            "wall_ms": wall_spread,
            "cpu_ms": cpu_spread,
            "over_interpreter_ms": wall_spread["median"] - floor,
            "cpu_to_interpreter": cpu_ratio,
            "to_baseline": ratio,
        }
        rows.append(
            [
                name,
                common.fmt_spread(wall_spread),
                common.fmt_spread(cpu_spread),
                f"{wall_spread['median'] - floor:.0f}",
                common.fmt_spread(cpu_ratio, 2),
                "" if ratio is None else common.fmt_spread(ratio, 2),
            ]
        )
    common.print_table(
        f"Start-up, {options.repeats} repetitions (ms, median (min-max))",
        ["command", "wall", "CPU", "wall - interpreter", "CPU / interpreter", "to baseline"],
        rows,
    )
    common.write_json(options.json, "startup", options, results)


if __name__ == "__main__":
    main()
