"""Benchmark (not a test): the history commands on a large history, SQLite and PostgreSQL.

Fills a fresh database with --runs runs and about --entries journal entries (bulk loaded:
three agents, four releases, sixty days, the usual stop reasons, the last release with more
max_steps), plus one run of --resume-entries entries written through the real journal and
interrupted by a simulated crash. Then it times `runner stats`, `runner list`, the queries
of docs/guides/history.md (`runner sql`), the resume of the long run, `runner export` of the
whole history in a child process (wall time and peak memory), and last `runner prune` of
the runs that finished more than 30 days ago.

    .venv/bin/python benchmarks/history.py                    # 100,000 runs, 1,000,000 entries
    .venv/bin/python benchmarks/history.py --runs 10000 --entries 100000
    .venv/bin/python benchmarks/history.py --db sqlite --keep # keep the SQLite file

The PostgreSQL side uses a throwaway database on --postgres-url's server (default: the
local test server), dropped at the end unless --keep.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from runner import Agent, tool
from runner.cli import main
from runner.service.runner import Runner
from runner.sql.database import open_engine, upgrade
from runner.sql.schema import entries, runs

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "guides" / "history.md"
AGENTS = ("support", "research", "coder")
RELEASES = ("1.0", "1.1", "1.2", "2.0")
# Stop reasons by release: the last release regresses (more max_steps and repeated_call).
REASONS = ("final", "max_steps", "repeated_call", "tool_errors", "token_budget", "cancelled")
WEIGHTS = {
    "1.0": (80, 8, 4, 4, 3, 1),
    "1.1": (81, 7, 4, 4, 3, 1),
    "1.2": (80, 8, 4, 4, 3, 1),
    "2.0": (66, 18, 8, 4, 3, 1),
}
TOOLS = ("search", "fetch", "calculator", "write_file", "send_email")
DAYS = 60
STAMP = "%Y-%m-%d %H:%M:%S.%f"  # how SQLAlchemy stores a DateTime in SQLite


# -- generating the history ------------------------------------------------------------------


def generate(
    n_runs: int, n_entries: int, seed: int = 7
) -> Iterator[tuple[dict[str, Any], list[Any]]]:
    """Runs with their journals, oldest first: (run row, [entry rows])."""
    rng = random.Random(seed)
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(days=DAYS)
    calls_per_run = max(1, round((n_entries / max(n_runs, 1) - 2) / 2))
    for i in range(n_runs):
        created = start + timedelta(seconds=DAYS * 86400 * i / n_runs)
        release = RELEASES[min(len(RELEASES) - 1, i * len(RELEASES) // n_runs)]
        reason = rng.choices(REASONS, WEIGHTS[release])[0]
        unfinished = rng.random() < 0.005
        calls = rng.randint(max(1, calls_per_run // 2), calls_per_run * 3 // 2)
        journal: list[dict[str, Any]] = []
        at = created + timedelta(seconds=rng.uniform(0.05, 2))
        tokens, cost, streak = 0, 0.0, 0
        journal.append(_entry(0, 0, "task", at, 0, 0.0, 0, content=f"task {i}"))
        for step in range(1, calls + 1):
            used = rng.randint(200, 900)
            tokens, cost = tokens + used, cost + used * 2e-6
            name = rng.choice(TOOLS)
            failed = rng.random() < (0.3 if name == "send_email" else 0.05)
            at += timedelta(seconds=rng.uniform(0.5, 4))
            action = _entry(len(journal), step, "action", at, tokens, cost, streak, tool=name)
            action.update(
                action_type="tool",
                role="assistant",
                args=json.dumps({"q": f"query {rng.randint(0, 10**6)}"}),
                idempotency_key=f"r{i:07d}-{step}",
                usage_tokens=used,
                usage_cost=used * 2e-6,
            )
            journal.append(action)
            streak = streak + 1 if failed else 0
            at += timedelta(seconds=rng.uniform(0.05, 3))
            outcome = "TimeoutError: no reply" if failed else f"result {rng.randint(0, 999)}"
            seen = _entry(len(journal), step, "observation", at, tokens, cost, streak, tool=name)
            seen.update(role="tool", content=outcome, is_error=failed)
            seen["idempotency_key"] = action["idempotency_key"]
            journal.append(seen)
        if not unfinished:
            at += timedelta(seconds=rng.uniform(0.5, 4))
            last = _entry(len(journal), calls + 1, "final", at, tokens, cost, 0, content="done")
            if reason != "final":
                last["kind"] = "refused"
            journal.append(last)
        run = {
            "id": f"r{i:07d}",
            "agent": f"agents:{AGENTS[i % 3]}",
            "agent_name": AGENTS[i % 3],
            "release": release,
            "task": f"task {i}",
            "budgets": json.dumps({"max_steps": 8}),
            "status": "running" if unfinished else "finished",
            "stop_reason": None if unfinished else reason,
            "output": "done" if reason == "final" and not unfinished else None,
            "output_format": "text",
            "error": None,
            "wrapped_up": False,
            "steps": 0 if unfinished else calls + 1,
            "tokens": 0 if unfinished else tokens,
            "cost": 0.0 if unfinished else cost,
            "resumes": 1 if rng.random() < 0.02 else 0,
            "stalled_resumes": 0,
            "progress_seq": 0,
            "deadline": None,
            "cancel_requested": False,
            "lease_owner": None,
            "lease_epoch": 1,
            "lease_expires_at": None,
            "leased_at": None,
            "created_at": created,
            "updated_at": at,
            "finished_at": None if unfinished else at,
        }
        for row in journal:
            row["run_id"] = run["id"]
        yield run, journal


def _entry(
    seq: int, step: int, kind: str, at: datetime, tokens: int, cost: float, streak: int, **more: Any
) -> dict[str, Any]:
    row = {
        "run_id": "",
        "seq": seq,
        "step": step,
        "kind": kind,
        "role": "user" if kind == "task" else "assistant",
        "content": None,
        "content_format": "text",
        "action_type": "final" if kind in ("final", "refused") else None,
        "tool": None,
        "args": None,
        "is_error": False,
        "error": None,
        "idempotency_key": None,
        "attempt": 1,
        "usage_tokens": 0,
        "usage_cost": 0.0,
        "steps": step,
        "tokens": tokens,
        "cost": cost,
        "error_streak": streak,
        "lease_epoch": 1,
        "created_at": at,
        "call_id": None,
    }
    row.update(more)
    return row


RUN_COLUMNS = [c.name for c in runs.columns]
ENTRY_COLUMNS = [c.name for c in entries.columns]


def fill(url: str, n_runs: int, n_entries: int) -> tuple[int, int]:
    """Bulk-load the generated history in chunks; returns (runs, entries) written."""
    engine = open_engine(url)
    raw: Any = engine.raw_connection()
    connection = raw.driver_connection
    load = _load_sqlite if engine.dialect.name == "sqlite" else _load_postgres
    total_runs = total_entries = 0
    chunk_runs: list[list[Any]] = []
    chunk_entries: list[list[Any]] = []
    try:
        for run, journal in generate(n_runs, n_entries):
            chunk_runs.append([run[c] for c in RUN_COLUMNS])
            chunk_entries.extend([e[c] for c in ENTRY_COLUMNS] for e in journal)
            if len(chunk_entries) >= 100_000:
                load(connection, chunk_runs, chunk_entries)
                total_runs += len(chunk_runs)
                total_entries += len(chunk_entries)
                chunk_runs, chunk_entries = [], []
        load(connection, chunk_runs, chunk_entries)
        total_runs += len(chunk_runs)
        total_entries += len(chunk_entries)
    finally:
        raw.close()
        engine.dispose()
    return total_runs, total_entries


def _load_sqlite(connection: Any, run_rows: list[list[Any]], entry_rows: list[list[Any]]) -> None:
    def value(v: Any) -> Any:
        return v.astimezone(UTC).strftime(STAMP) if isinstance(v, datetime) else v

    marks = ", ".join("?" * len(RUN_COLUMNS))
    entry_marks = ", ".join("?" * len(ENTRY_COLUMNS))
    cursor = connection.cursor()
    cursor.execute("BEGIN")
    cursor.executemany(
        f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) VALUES ({marks})",
        ([value(v) for v in row] for row in run_rows),
    )
    cursor.executemany(
        f"INSERT INTO entries ({', '.join(ENTRY_COLUMNS)}) VALUES ({entry_marks})",
        ([value(v) for v in row] for row in entry_rows),
    )
    cursor.execute("COMMIT")


def _load_postgres(connection: Any, run_rows: list[list[Any]], entry_rows: list[list[Any]]) -> None:
    with connection.cursor() as cursor:
        for name, columns, rows in (
            ("runs", RUN_COLUMNS, run_rows),
            ("entries", ENTRY_COLUMNS, entry_rows),
        ):
            with cursor.copy(f"COPY {name} ({', '.join(columns)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
    connection.commit()


# -- the long run: written through the real journal, interrupted, resumed ----------------------


class _Crash(BaseException):
    """Stands in for a killed worker: no `except Exception` in the loop catches it."""


def long_run_agent(n_entries: int) -> tuple[Agent, Callable[[], None]]:
    """An agent whose run writes `n_entries` entries (task, calls, one pending) then crashes."""
    pairs = (n_entries - 2) // 2  # the task, `pairs` calls with results, one pending call
    crash = {"armed": True}

    @tool(idempotent=True)
    def step(i: int) -> str:
        if i > pairs and crash["armed"]:
            crash["armed"] = False
            raise _Crash
        return f"ok {i}"

    def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        done = sum(1 for m in transcript if m["role"] == "tool")
        if done > pairs:
            return {"type": "final", "content": "finished", "usage": 10}
        return {"type": "tool", "name": "step", "args": {"i": done + 1}, "usage": 10}

    agent = Agent(
        model,
        {"step": step},
        name="long",
        release="1.0",
        max_steps=pairs + 10,
        max_tokens=None,
        max_repeats=None,
        max_consecutive_errors=None,
    )
    return agent, lambda: crash.update(armed=True)


def write_long_run(url: str, n_entries: int) -> tuple[str, Agent, float]:
    """Write the long run until its crash; returns (run id, agent, seconds per entry)."""
    agent, _ = long_run_agent(n_entries)
    run_id = f"long-{uuid.uuid4().hex[:8]}"
    with Runner(url) as runner:
        started = time.perf_counter()
        with contextlib.suppress(_Crash):  # the simulated kill, mid-call
            runner.run(agent, "count to the end", id=run_id)
        elapsed = time.perf_counter() - started
    return run_id, agent, elapsed / n_entries


def time_resume(url: str, run_id: str, agent: Agent) -> tuple[float, str]:
    started = time.perf_counter()
    with Runner(url) as runner:
        result = runner.resume(run_id, agent=agent, steal=True)
    return time.perf_counter() - started, str(result.stop_reason)


# -- timing the commands ----------------------------------------------------------------------


def time_command(args: list[str], repeat: int) -> tuple[float, float]:
    """(first, median of the rest) seconds of `runner ARGS`, run in this process."""
    cli = CliRunner()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        result = cli.invoke(main, args, catch_exceptions=False)
        times.append(time.perf_counter() - started)
        if result.exit_code != 0:
            raise SystemExit(f"runner {' '.join(args)} failed: {result.output}")
    return times[0], statistics.median(times[1:] or times)


def docs_queries() -> list[tuple[str, str]]:
    """The SQL blocks of the history guide, each with the title of its section."""
    found = []
    for section in DOCS.read_text().split("\n## ")[1:]:
        title = section.splitlines()[0]
        found += [(title, sql.strip()) for sql in re.findall(r"```sql\n(.*?)```", section, re.S)]
    return found


def time_export(url: str) -> tuple[float, float, int]:
    """Wall seconds and peak memory (MiB) of `runner export` of everything, in a child."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    done = subprocess.run(
        [str(Path(sys.executable).parent / "runner"), "export", "--db", url, "-o", "/dev/null"],
        capture_output=True,
        text=True,
        check=True,
    )
    elapsed = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    lines = int(re.search(r"exported (\d+) runs", done.stderr).group(1))  # type: ignore[union-attr]
    return elapsed, max(peak, before) / 1024, lines


def benchmark(name: str, url: str, args: argparse.Namespace) -> None:
    print(f"\n== {name}: {make_url(url).render_as_string(hide_password=True)}")
    engine = open_engine(url)
    upgrade(engine)
    engine.dispose()

    started = time.perf_counter()
    n_runs, n_entries = fill(url, args.runs, args.entries - args.resume_entries)
    if name == "postgresql":
        with create_engine(url).connect() as connection:
            connection.execute(text("ANALYZE"))
            connection.commit()
    print(f"filled {n_runs:,} runs, {n_entries:,} entries in {time.perf_counter() - started:.1f}s")

    run_id, agent, per_entry = write_long_run(url, args.resume_entries)
    print(
        f"wrote the long run ({args.resume_entries:,} entries through the journal): "
        f"{per_entry * 1e6:.0f} us per entry"
    )
    print(f"history: {n_runs + 1:,} runs, {n_entries + args.resume_entries:,} entries")

    db = ["--db", url]
    commands = [
        ["stats"],
        ["stats", "--by", "day"],
        ["stats", "--by", "agent", "--since", "7d"],
        ["list"],
        ["list", "--release", "1.1"],
        ["list", "--stop-reason", "tool_errors"],
        ["list", "--status", "running"],
        ["show", run_id],
    ]
    print(f"{'command':58} {'first':>8} {'median':>8}")
    for command in commands:
        first, median = time_command([*command, *db], args.repeat)
        print(f"runner {' '.join(command):51} {first * 1000:7.0f}ms {median * 1000:7.0f}ms")
    for title, sql in docs_queries():
        first, median = time_command(["sql", sql, "--csv", *db], args.repeat)
        print(f"runner sql: {title[:46]:46} {first * 1000:7.0f}ms {median * 1000:7.0f}ms")

    seconds, reason = time_resume(url, run_id, agent)
    print(
        f"resume of the run with {args.resume_entries:,} entries: {seconds * 1000:.0f}ms ({reason})"
    )

    if not args.skip_export:
        seconds, peak, lines = time_export(url)
        print(
            f"runner export (all {lines:,} runs to /dev/null): {seconds:.1f}s, peak {peak:.0f} MiB"
        )

    # Last, as it deletes: the runs that finished more than a month ago (about half).
    started = time.perf_counter()
    pruned = CliRunner().invoke(main, ["prune", "--finished-before", "30d", "--json", *db])
    seconds = time.perf_counter() - started
    done = json.loads(pruned.stdout)
    print(
        f"runner prune --finished-before 30d: {done['runs']:,} runs, "
        f"{done['entries']:,} entries in {seconds:.1f}s"
    )


def main_(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--resume-entries", type=int, default=10_000)
    parser.add_argument("--db", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument(
        "--postgres-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/test"
    )
    parser.add_argument("--repeat", type=int, default=5, help="Runs of each command.")
    parser.add_argument("--skip-export", action="store_true")
    parser.add_argument("--keep", action="store_true", help="Keep the databases afterwards.")
    args = parser.parse_args(argv)

    if args.db in ("sqlite", "both"):
        folder = Path(tempfile.mkdtemp(prefix="runner-bench-"))
        path = folder / "history.db"
        try:
            benchmark("sqlite", f"sqlite:///{path}", args)
        finally:
            if args.keep:
                print(f"kept {path}")
            else:
                for leftover in folder.iterdir():
                    leftover.unlink()
                folder.rmdir()
    if args.db in ("postgresql", "both"):
        name = f"runner_bench_{uuid.uuid4().hex[:8]}"
        admin = create_engine(args.postgres_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        url = make_url(args.postgres_url).set(database=name).render_as_string(hide_password=False)
        try:
            benchmark("postgresql", url, args)
        finally:
            if args.keep:
                print(f"kept database {name}")
            else:
                with admin.connect() as connection:
                    connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            admin.dispose()


if __name__ == "__main__":
    main_()
