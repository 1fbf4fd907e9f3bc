"""Resume: time from `Runner.resume` to the next model call, and the memory it takes.

    .venv/bin/python benchmarks/resume.py [--entries 100,1000,10000] [--repeats 5]
                                          [--json out.json]

For each size, a run is left as a crashed worker leaves it: the journal holds the task,
then tool steps (action and observation), then one more action whose call is pending, for
exactly that many entries, under the lease of a process that no longer exists. The rows
are the store's own (`runner.store` builds them), written in one transaction for speed.

Each measurement is a fresh process (`--child`, below) that opens a Runner, then calls
`resume`: the claim, loading the journal, replaying it, settling the pending call (the tool
is not idempotent, so an "outcome unknown" observation is committed) and the next model
call, where the model records the time and stops the process. Peak memory is measured in
the same process (its peak RSS during the resume, and that peak less the RSS just before)
and, in one more process per size, with tracemalloc (the peak of Python allocations during
the resume).
"""

from __future__ import annotations

import contextlib
import json
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import common
import fakes
from sqlalchemy import insert

from runner import Agent, Runner
from runner.core.actions import ActionKind
from runner.core.budgets import Budgets
from runner.core.clock import utc_now
from runner.core.counters import Counters
from runner.core.ids import new_run_id
from runner.core.journal import Entry, EntryKind
from runner.sql import leases
from runner.sql import runs as store
from runner.sql.database import open_engine
from runner.sql.schema import entries
from runner.store.owner import owner_name
from runner.store.rows import entry_row

# A process of this host that does not exist: its lease is free at once.
DEAD_OWNER = owner_name(999999, "1")


def journal(run_id: str, count: int) -> list[Entry]:
    """`count` entries: the task, tool steps, and an action whose call is pending."""
    out = [Entry(EntryKind.TASK, 0, Counters(), content=fakes.task(1_000_000))]
    step = 0
    while len(out) < count:
        step += 1
        counters = Counters(steps=step, tokens=10 * step)
        key = f"{run_id}-{step}"
        out.append(
            Entry(
                EntryKind.ACTION,
                step,
                counters,
                action_type=ActionKind.TOOL,
                tool="echo",
                args={"i": step},
                idempotency_key=key,
                tokens=10,
            )
        )
        if len(out) < count:
            out.append(
                Entry(
                    EntryKind.OBSERVATION,
                    step,
                    counters,
                    content=fakes.echo(step),
                    tool="echo",
                    idempotency_key=key,
                )
            )
    return out


def crashed_run(url: str, count: int) -> str:
    """A run whose worker wrote `count` entries and died while its last tool call ran."""
    engine = open_engine(url)
    run_id = new_run_id()
    store.create_run(
        engine,
        run_id=run_id,
        agent=fakes.REF,
        agent_name="bench",
        release=None,
        task=fakes.task(1_000_000),
        budgets=Budgets(**fakes.UNLIMITED).as_dict(),
    )
    claim = leases.claim_run(engine, run_id, owner=DEAD_OWNER, lease_seconds=3600, max_resumes=3)
    at = utc_now()
    rows = [
        entry_row(run_id, seq, claim.epoch, entry, at)  # the rows the store writes
        for seq, entry in enumerate(journal(run_id, count))
    ]
    with engine.begin() as connection:
        connection.execute(insert(entries), rows)
    engine.dispose()
    return str(run_id)


class Reached(BaseException):
    """Raised by the model: the resume got as far as the next model call."""


def child(url: str, run_id: str, trace: bool) -> dict[str, Any]:
    """In a fresh process: resume the run and stop at its next model call."""
    reached: list[float] = []

    def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        reached.append(time.perf_counter())
        raise Reached

    agent = Agent(model, fakes.tools(), **fakes.UNLIMITED)
    runner = Runner(url)
    rss_before = status_kib("VmRSS")
    reset_peak_rss()
    if trace:
        tracemalloc.start()
    started = time.perf_counter()
    with contextlib.suppress(Reached):
        runner.resume(run_id, agent=agent)
    traced = tracemalloc.get_traced_memory()[1] if trace else None
    peak = status_kib("VmHWM")
    assert reached, "the resume never reached the model"
    return {
        "seconds": reached[0] - started,
        "rss_before_kib": rss_before,
        "rss_peak_kib": peak,
        "rss_growth_kib": peak - rss_before,
        "traced_peak_bytes": traced,
    }


def status_kib(field: str) -> int:
    """A memory figure of this process from /proc/self/status, in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # not Linux: the lifetime peak


def reset_peak_rss() -> None:
    """Start VmHWM (the peak RSS) again from the current RSS: Linux's clear_refs 5."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def in_a_process(url: str, run_id: str, trace: bool) -> dict[str, Any]:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", url, run_id]
    if trace:
        command.append("--trace")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the resume process failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(name: str, url: str, sizes: list[int], repeats: int) -> list[dict[str, Any]]:
    results = []
    for count in sizes:
        timed = [in_a_process(url, crashed_run(url, count), False) for _ in range(repeats)]
        traced = in_a_process(url, crashed_run(url, count), True)
        seconds = [t["seconds"] for t in timed]
        growth = [t["rss_growth_kib"] for t in timed]
        results.append(
            {
                "database": name,
                "entries": count,
                "ms": common.spread([s * 1000 for s in seconds]),
                "rss_growth_kib": common.spread(growth),
                "rss_peak_kib": common.spread([t["rss_peak_kib"] for t in timed]),
                "rss_before_kib": timed[0]["rss_before_kib"],
                "traced_peak_bytes": traced["traced_peak_bytes"],
                "samples": timed,
            }
        )
    return results


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        url, run_id = sys.argv[2], sys.argv[3]
        print(json.dumps(child(url, run_id, trace="--trace" in sys.argv)))
        return
    p = common.parser(__doc__)
    p.add_argument("--entries", default="100,1000,10000", help="journal sizes (comma-separated)")
    p.add_argument("--repeats", type=int, default=5, help="timed resumes per size (default 5)")
    options = p.parse_args()
    sizes = [int(n) for n in options.entries.split(",")]
    postgres = common.postgres_url_or_none(options)
    results: list[dict[str, Any]] = []
    with common.scratch_folder(options.dir) as folder:
        results += measure("sqlite", common.sqlite_url(folder, "resume"), sizes, options.repeats)
    if postgres is not None:
        with common.scratch_postgres(postgres) as url:
            results += measure("postgresql", url, sizes, options.repeats)

    rows = []
    for r in results:
        previous = [
            q for q in results if q["database"] == r["database"] and q["entries"] < r["entries"]
        ]
        marginal = ""
        if previous:
            q = previous[-1]
            extra = (r["ms"]["median"] - q["ms"]["median"]) * 1000
            marginal = f"{extra / (r['entries'] - q['entries']):.0f}"
        rows.append(
            [
                r["database"],
                f"{r['entries']:,}",
                common.fmt_spread(r["ms"], 1),
                f"{r['ms']['median'] * 1000 / r['entries']:.0f}",
                marginal,
                f"{r['traced_peak_bytes'] / 1e6:.2f}",
                f"{r['traced_peak_bytes'] / r['entries']:,.0f}",
                f"{r['rss_peak_kib']['median'] / 1024:.1f}",
                f"{r['rss_growth_kib']['median'] / 1024:.1f}",
            ]
        )
    common.print_table(
        f"resume to the next model call, median (min-max) of {options.repeats} processes",
        [
            "database",
            "entries",
            "ms",
            "us/entry",
            "marginal us/entry",
            "traced peak MB",
            "bytes/entry",
            "peak RSS MiB",
            "RSS growth MiB",
        ],
        rows,
    )
    common.write_json(options.json, "resume", options, results)


if __name__ == "__main__":
    main()
