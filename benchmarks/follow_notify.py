"""What the followers' triggers cost PostgreSQL's journal writers (revision 0017).

    .venv/bin/python benchmarks/follow_notify.py [--writers 8] [--seconds 3] [--rounds 3]
        [--json out.json]

`--writers` threads each write one run's journal as fast as they can, one entry a
transaction, with the fenced write a worker sends (`Backend.fenced_insert`: one statement in
autocommit that locks the run's row, renews its lease and inserts the entry), for
`--seconds` in each of three settings, interleaved and repeated `--rounds` times (the
machine's load moves):

- `before`: the triggers of revision 0017 disabled (`ALTER TABLE ... DISABLE TRIGGER`), as
  the schema was before it;
- `unfollowed`: the triggers on, no run marked: what every write of a run nobody follows
  pays (one probe of `follows` a statement, no NOTIFY);
- `followed`: every run marked followed and a listener LISTENing: each write NOTIFYs, and
  PostgreSQL serialises the commits of notifying transactions.

Printed: entries per second in each, and the ratios unfollowed / before (the target: 1) and
followed / before, per round and over all rounds; and the time PostgreSQL spent in the
trigger function per write (`pg_stat_user_functions`, with `track_functions = 'pl'` on the
scratch database), unfollowed and followed, beside the time of a whole write: a figure the
machine's load moves far less than the rates.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import common
import fakes
import psycopg
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from runner.core.actions import ActionKind
from runner.core.budgets import Budgets
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind
from runner.sql import leases
from runner.sql import runs as store
from runner.sql.backend import backend_for
from runner.sql.database import open_engine
from runner.sql.driver import Prepared
from runner.sql.follows import mark
from runner.store.rows import entry_row

SETTINGS = ("before", "unfollowed", "followed")


def runs(engine: Engine, writers: int) -> list[tuple[str, int]]:
    made = []
    for n in range(writers):
        run_id = f"w{n}"
        store.create_run(
            engine, run_id=run_id, agent=fakes.REF, agent_name="bench", release="b1",
            task="write", budgets=Budgets(**fakes.UNLIMITED).as_dict(),
        )  # fmt: skip
        claim = leases.claim_run(engine, run_id, owner="bench", lease_seconds=3600, max_resumes=3)
        made.append((run_id, claim.epoch))
    return made


def throughput(engine: Engine, made: list[tuple[str, int]], start: dict[str, int],
               seconds: float) -> float:  # fmt: skip
    """Entries a second, every writer appending to its run in a fenced write of its own."""
    statement = Prepared.of(backend_for("postgresql").fenced_insert(), engine.dialect)
    counts = [0] * len(made)
    stop = time.monotonic() + seconds
    far = datetime.now(UTC) + timedelta(hours=1)

    def work(k: int) -> None:
        run_id, epoch = made[k]
        n = start[run_id]
        # As a worker sends it (runner.sql.driver): the statement's text on the driver's
        # cursor, in autocommit, so it is its own transaction (one round trip).
        pooled = engine.raw_connection()
        try:
            connection: Any = pooled.driver_connection
            connection.autocommit = True
            cursor = connection.cursor()
            while time.monotonic() < stop:
                n += 1
                entry = Entry(
                    EntryKind.ACTION, n, Counters(steps=n, tokens=30 * n),
                    action_type=ActionKind.TOOL, tool="read", args={"path": f"docs/{n}.md"},
                    idempotency_key=f"{run_id}-{n}", tokens=30,
                )  # fmt: skip
                values = entry_row(run_id, n, epoch, entry, datetime.now(UTC)) | {
                    "fence_run": run_id, "fence_epoch": epoch,
                    "fence_renew_after": far - timedelta(hours=2), "fence_expiry": far,
                }  # fmt: skip
                cursor.execute(statement.sql, statement.parameters(values))
                assert cursor.fetchall(), "fenced out"
                counts[k] += 1
            connection.autocommit = False
        finally:
            pooled.close()
        start[run_id] = n

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(made))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / seconds


def setting(engine: Engine, name: str, made: list[tuple[str, int]]) -> None:
    switch = "DISABLE" if name == "before" else "ENABLE"
    with engine.begin() as connection:
        for table in ("entries", "deltas", "runs"):
            trigger = f"{table}_notify_followers"
            connection.execute(text(f"ALTER TABLE {table} {switch} TRIGGER {trigger}"))
        connection.execute(text("DELETE FROM follows"))
    if name == "followed":
        mark(engine, [run_id for run_id, _ in made], seconds=3600)


def trigger_ms(url: str) -> tuple[int, float]:
    """Calls of the trigger function so far, and the milliseconds spent in it. Read once the
    writers' connections have closed: a session reports its function statistics at exit."""
    time.sleep(1.0)
    engine = open_engine(url)
    try:
        with engine.connect() as connection:
            row = connection.execute(
                text(
                    "SELECT calls, total_time FROM pg_stat_user_functions "
                    "WHERE funcname = 'runner_notify_followers'"
                )
            ).first()
    finally:
        engine.dispose()
    return (0, 0.0) if row is None else (int(row.calls), float(row.total_time))


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--writers", type=int, default=8, help="threads, one run each")
    p.add_argument("--seconds", type=float, default=3.0, help="how long each setting writes")
    p.add_argument("--rounds", type=int, default=3, help="how many times each setting writes")
    options = p.parse_args()
    postgres = common.postgres_url_or_none(options)
    if postgres is None:
        raise SystemExit("this benchmark needs PostgreSQL")
    rounds: list[dict[str, float]] = []
    heard = 0
    spent = {name: [0, 0.0] for name in SETTINGS}  # trigger calls, milliseconds in them
    written = dict.fromkeys(SETTINGS, 0.0)
    with common.scratch_postgres(postgres) as url:
        engine = open_engine(url)
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            name = make_url(url).database
            connection.execute(text(f"ALTER DATABASE \"{name}\" SET track_functions = 'pl'"))
        engine.dispose()
        engine = open_engine(url, pool_size=options.writers + 2)
        listener = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"),
                                   autocommit=True)  # fmt: skip
        listener.execute("LISTEN runner_follow")
        try:
            made = runs(engine, options.writers)
            start = {run_id: 0 for run_id, _ in made}
            for _ in range(options.rounds):
                rates: dict[str, float] = {}
                for name in SETTINGS:
                    setting(engine, name, made)
                    engine.dispose()  # sessions that report their statistics when they end
                    calls, ms = trigger_ms(url)
                    rates[name] = throughput(engine, made, start, options.seconds)
                    written[name] += rates[name] * options.seconds
                    engine.dispose()
                    after = trigger_ms(url)
                    spent[name][0] += after[0] - calls
                    spent[name][1] += after[1] - ms
                    heard += sum(1 for _ in listener.notifies(timeout=0.5))
                rounds.append(rates)
        finally:
            listener.close()
            engine.dispose()
    rows: list[list[Any]] = []
    for n, rates in enumerate(rounds):
        rows.append([
            n + 1, *(f"{rates[name]:.0f}" for name in SETTINGS),
            f"{rates['unfollowed'] / rates['before']:.2f}",
            f"{rates['followed'] / rates['before']:.2f}",
        ])  # fmt: skip
    rows.append([
        "all", *(f"{written[name] / (options.rounds * options.seconds):.0f}" for name in SETTINGS),
        f"{written['unfollowed'] / written['before']:.2f}",
        f"{written['followed'] / written['before']:.2f}",
    ])  # fmt: skip
    common.print_table(
        f"fenced journal writes a second, {options.writers} writers on {options.writers} runs",
        ["round", *SETTINGS, "unfollowed / before", "followed / before"],
        rows,
    )
    per_write = {
        name: 1000 * spent[name][1] / spent[name][0] for name in SETTINGS if spent[name][0]
    }
    whole = 1e6 * options.writers * options.rounds * options.seconds / written["before"]
    common.print_table(
        "time in the trigger function per write (us), and a whole write's (before, per writer)",
        ["unfollowed", "followed", "a write"],
        [[f"{per_write.get('unfollowed', 0):.1f}", f"{per_write.get('followed', 0):.1f}",
          f"{whole:.0f}"]],
    )  # fmt: skip
    print(f"notifications heard in the followed settings: {heard}")
    common.write_json(options.json, "follow_notify", options, {
        "rounds": rounds, "heard": heard, "trigger_us_per_write": per_write,
        "write_us_before": whole,
    })  # fmt: skip


if __name__ == "__main__":
    main()
