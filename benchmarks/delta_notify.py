"""Deltas on PostgreSQL: a NOTIFY in every batch against a 50 ms poll, measured.

    .venv/bin/python benchmarks/delta_notify.py [--batches 200] [--writers 4] [--json out.json]

Why no batch of every run sends a NOTIFY (only the batches of runs somebody follows do, by
the triggers of revision 0017: benchmarks/follow_notify.py measures those), and what a
NOTIFY gives a follower against the 50 ms poll followers used before: this prints what each
would cost and give, on one scratch database.

1. Latency. A writer commits `--batches` delta batches (one row each, `store.deltas.write`
   plus, in the same transaction, `pg_notify('runner_deltas', run id)`), 10 to 50 ms apart.
   A listener (its own connection, LISTEN) notes when each NOTIFY arrives; a poller
   (`store.deltas.deltas_after` every 50 ms, as `Runner.events(deltas=True)` does) notes when
   it first reads each row. Latency runs from just before the commit.
2. The writers' cost. `--writers` threads write batches as fast as they can for 3 s, first
   plain (as runner does), then each with a NOTIFY: PostgreSQL serialises the commits of
   notifying transactions (one lock on the notification queue), so a fleet of streaming
   workers would pay it on every batch. The ratio is the batches per second with NOTIFY
   over without.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from datetime import UTC, datetime
from typing import Any

import common
import psycopg
from sqlalchemy import Engine, text

from runner.core.deltas import Delta
from runner.sql import deltas as table
from runner.sql.database import open_engine, upgrade
from runner.sql.schema import deltas
from runner.store.delta_writer import Put
from runner.store.payloads import PLAIN

CHANNEL = "runner_deltas"


def write(engine: Engine, run_id: str, n: int, notify: bool) -> None:
    row = Put(run_id, Delta(1, n, f"p{n:05d} "), datetime.now(UTC))
    with engine.begin() as connection:
        connection.execute(deltas.insert(), [table._row(row, PLAIN)])
        if notify:
            connection.execute(text("SELECT pg_notify(:channel, :payload)"), {
                "channel": CHANNEL, "payload": f"{run_id}:{n}",
            })  # fmt: skip


def latency(url: str, engine: Engine, batches: int) -> dict[str, list[float]]:
    committed: dict[int, float] = {}
    notified: dict[int, float] = {}
    polled: dict[int, float] = {}
    done = threading.Event()
    listening = threading.Event()
    plain = url.replace("postgresql+psycopg://", "postgresql://")

    def listen() -> None:
        with psycopg.connect(plain, autocommit=True) as connection:
            connection.execute(f"LISTEN {CHANNEL}")
            listening.set()
            while not done.is_set():
                for note in connection.notifies(timeout=0.2, stop_after=1):
                    notified[int(note.payload.rsplit(":", 1)[1])] = time.time()

    def poll() -> None:
        cursor = 0
        while not done.is_set():
            for found, delta in table.deltas_after(engine, "lat", cursor, 1000):
                polled.setdefault(delta.ordinal, time.time())
                cursor = found
            time.sleep(0.05)

    threads = [threading.Thread(target=listen), threading.Thread(target=poll)]
    for thread in threads:
        thread.start()
    listening.wait(10)
    rng = random.Random(3)
    for n in range(batches):
        time.sleep(rng.uniform(0.01, 0.05))
        committed[n] = time.time()
        write(engine, "lat", n, notify=True)
    time.sleep(0.3)
    done.set()
    for thread in threads:
        thread.join()
    return {
        "notify": [(notified[n] - at) * 1000 for n, at in committed.items() if n in notified],
        "poll": [(polled[n] - at) * 1000 for n, at in committed.items() if n in polled],
    }


def throughput(engine: Engine, writers: int, notify: bool, seconds: float = 3.0) -> float:
    counts = [0] * writers
    stop = time.monotonic() + seconds

    def work(k: int) -> None:
        n = 0
        while time.monotonic() < stop:
            write(engine, f"w{k}", n, notify)
            n += 1
        counts[k] = n

    threads = [threading.Thread(target=work, args=(k,)) for k in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / seconds


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--batches", type=int, default=200, help="batches in the latency run")
    p.add_argument("--writers", type=int, default=4, help="threads writing in the cost run")
    options = p.parse_args()
    postgres = common.postgres_url_or_none(options)
    if postgres is None:
        raise SystemExit("this benchmark needs PostgreSQL")
    with common.scratch_postgres(postgres) as url:
        engine = open_engine(url, pool_size=options.writers + 2)
        upgrade(engine)
        try:
            found = latency(url, engine, options.batches)
            rates = []
            for _ in range(2):  # interleaved, twice: the machine's load moves
                rates.append(
                    (
                        throughput(engine, options.writers, notify=False),
                        throughput(engine, options.writers, notify=True),
                    )
                )
        finally:
            engine.dispose()
    rows: list[list[Any]] = []
    results: dict[str, Any] = {}
    for name, ms in found.items():
        ordered = sorted(ms)
        results[name] = {
            "received": len(ms),
            "p50_ms": statistics.median(ms),
            "p90_ms": ordered[int(0.9 * (len(ordered) - 1))],
            "max_ms": ordered[-1],
        }
        r = results[name]
        rows.append([name, f"{r['received']}/{options.batches}", f"{r['p50_ms']:.1f}",
                     f"{r['p90_ms']:.1f}", f"{r['max_ms']:.1f}"])  # fmt: skip
    common.print_table("a committed delta -> a reader has it (ms)",
                       ["path", "received", "p50", "p90", "max"], rows)  # fmt: skip
    results["batches_per_second"] = [
        {"plain": plain, "notify": notify, "ratio": notify / plain} for plain, notify in rates
    ]
    common.print_table(
        f"delta batches per second, {options.writers} writers",
        ["round", "plain", "with NOTIFY", "NOTIFY / plain"],
        [
            [n + 1, f"{plain:.0f}", f"{notify:.0f}", f"{notify / plain:.2f}"]
            for n, (plain, notify) in enumerate(rates)
        ],
    )
    common.write_json(options.json, "delta_notify", options, results)


if __name__ == "__main__":
    main()
