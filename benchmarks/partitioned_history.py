"""Benchmark (not a test): the per-release stop-reason query over a partitioned journal.

Builds a scratch PostgreSQL database at head (the journal partitioned by month, revision
0022) holding --entries journal entries (10 million by default), --per-run to a run, spread
evenly over the last --months months (each month its own partition), the runs finished with
the usual stop reasons over three agents and four releases. It loads them with
`generate_series` in one statement per table (foreign keys and the follow trigger off for
the load: `session_replication_role = replica`), then ANALYZEs. Then it times, --repeats
times each, the query of `runner stats --by release` (runner.history.stop_reason_stats) and
`runner stats --by release` itself as a process; and last `runner prune` of the runs that
finished by a day into the second month, which drops the oldest month's partition whole.

    .venv/bin/python benchmarks/partitioned_history.py                 # 10,000,000 entries
    .venv/bin/python benchmarks/partitioned_history.py --entries 1000000 --json out.json

The goal (issue 39): the per-release query within a second over 10 million entries.
"""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import common
from sqlalchemy import text

from runner.history import prune_runs, stop_reason_stats
from runner.sql.database import downgrade, open_engine
from runner.sql.partitions import month_of, next_month

RUNNER = Path(sys.executable).parent / "runner"
AGENTS = ("support", "research", "coder")
RELEASES = ("1.0", "1.1", "1.2", "2.0")
REASONS = ("final", "final", "final", "final", "final", "final", "max_steps", "repeated_call")

_RUNS = """
INSERT INTO runs (id, agent, agent_name, release, task, budgets, status, stop_reason,
    output_format, wrapped_up, steps, tokens, cost, resumes, cancel_requested, lease_epoch,
    created_at, updated_at, finished_at, queue, priority, below_steps, below_tokens,
    below_cost, undelivered_messages, stalled_resumes, progress_seq)
SELECT 'run-' || g, NULL, (CAST(:agents AS text[]))[1 + g % 3],
    (CAST(:releases AS text[]))[1 + (g / 7) % 4], 'task', '{}', 'finished',
    (CAST(:reasons AS text[]))[1 + (g * 7919) % 8], 'text', false, :per_run, 100, 0.01, 0,
    false, 1, at, at, at + interval '1 minute', 'default', 0, 0, 0, 0, 0, 0, 0
FROM generate_series(CAST(0 AS bigint), :runs - 1) AS g,
     LATERAL (SELECT CAST(:start AS timestamptz)
                     + (CAST(:span AS bigint) * g / :runs) * interval '1 second' AS at) AS t
"""
_ENTRIES = """
INSERT INTO entries (run_id, seq, step, kind, content, content_format, is_error, attempt,
    usage_tokens, usage_cost, steps, tokens, cost, error_streak, lease_epoch, created_at)
SELECT 'run-' || (g / :per_run), g % :per_run, g % :per_run, 'observation', 'ok', 'text',
    false, 1, 10, 0.001, g % :per_run, 10 * (g % :per_run), 0.001, 0, 1,
    CAST(:start AS timestamptz)
        + (CAST(:span AS bigint) * (g / :per_run) / :runs) * interval '1 second'
        + (g % :per_run) * interval '1 second'
FROM generate_series(CAST(0 AS bigint), :entries - 1) AS g
"""


def build(
    url: str, entries: int, per_run: int, months: int, partitioned: bool = True
) -> dict[str, float]:
    """Fill the database (with `partitioned` False, its journal one plain table, as before
    revision 0022); seconds each step took."""
    now = datetime.now(UTC)
    first = month_of(now)
    for _ in range(months - 1):
        first = month_of(first - timedelta(days=1))
    engine = open_engine(url)
    took: dict[str, float] = {}
    runs = entries // per_run
    binds = {
        "agents": list(AGENTS), "releases": list(RELEASES), "reasons": list(REASONS),
        "per_run": per_run, "runs": runs, "entries": entries, "start": first,
        "span": int((now - first).total_seconds()) - 120,
    }  # fmt: skip
    if not partitioned:
        downgrade(engine, "0021")
    with engine.begin() as connection:
        month = first
        while partitioned and month < now:
            name = f"entries_p{month:%Y%m}"
            connection.execute(
                text(
                    f"CREATE TABLE IF NOT EXISTS {name} PARTITION OF entries FOR VALUES "
                    f"FROM ('{month.isoformat()}') TO ('{next_month(month).isoformat()}')"
                )
            )
            connection.execute(  # as runner.sql.partitions makes a month
                text(f"CREATE UNIQUE INDEX IF NOT EXISTS {name}_run_id_seq ON {name} (run_id, seq)")
            )
            month = next_month(month)
    for step, sql in (("runs", _RUNS), ("entries", _ENTRIES)):
        started = time.perf_counter()
        with engine.begin() as connection:
            connection.execute(text("SET LOCAL session_replication_role = replica"))
            connection.execute(text(sql), binds)
        took[step] = time.perf_counter() - started
    started = time.perf_counter()
    with engine.connect() as connection:
        connection.execution_options(isolation_level="AUTOCOMMIT").execute(text("ANALYZE"))
    took["analyze"] = time.perf_counter() - started
    engine.dispose()
    return took


def timed(work: Any, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--entries", type=int, default=10_000_000)
    p.add_argument("--per-run", type=int, default=10)
    p.add_argument("--months", type=int, default=12)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument(
        "--unpartitioned",
        action="store_true",
        help="the journal one plain table (revision 0021), to compare",
    )
    options = p.parse_args()
    postgres = common.postgres_url_or_none(options)
    if postgres is None:
        raise SystemExit("this benchmark needs PostgreSQL")
    results: dict[str, Any] = {"entries": options.entries, "per_run": options.per_run}
    with common.scratch_postgres(postgres) as url:
        results["build_seconds"] = build(
            url, options.entries, options.per_run, options.months, not options.unpartitioned
        )
        print(f"built {options.entries:,} entries: {results['build_seconds']}", flush=True)
        engine = open_engine(url)
        groups = stop_reason_stats(engine, by="release")  # warm: the cache as a server's
        assert sum(g.runs for g in groups) == options.entries // options.per_run
        query = timed(lambda: stop_reason_stats(engine, by="release"), options.repeats)
        results["query_seconds"] = common.spread(query)
        if not options.unpartitioned:  # the command refuses a schema behind its own
            command = [str(RUNNER), "stats", "--by", "release", "--db", url]
            process = timed(
                lambda: subprocess.run(command, check=True, capture_output=True), options.repeats
            )
            results["command_seconds"] = common.spread(process)
        oldest = month_of(datetime.now(UTC))
        for _ in range(options.months - 1):
            oldest = month_of(oldest - timedelta(days=1))
        started = time.perf_counter()
        # A day into the next month: the oldest month's last runs finished by then.
        pruned = prune_runs(engine, next_month(oldest) + timedelta(days=1))
        engine.dispose()
        results["prune_oldest_month"] = {
            "seconds": time.perf_counter() - started,
            "runs": pruned.runs,
            "entries": pruned.entries,
            "partitions": pruned.partitions,
        }
    for name in ("query_seconds", "command_seconds")[: 1 if options.unpartitioned else 2]:
        print(f"{name}: {common.fmt_spread(results[name], 3)}")
    print(f"prune of the oldest month: {results['prune_oldest_month']}")
    common.write_json(options.json, "partitioned_history", options, results)


if __name__ == "__main__":
    main()
