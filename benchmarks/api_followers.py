"""The HTTP API's event stream under load: many followers of many live runs on one server.

    .venv/bin/python benchmarks/api_followers.py [--runs 200] [--rate 1] [--seconds 20]
        [--idle-seconds 10] [--json out.json] [--no-postgres] [--no-polling]

`--runs` runs are made live (claimed, their task journaled) and the API server (`runner
ui`'s application under uvicorn, in a process of its own, so its CPU and memory are its
alone) is followed by one SSE connection per run (httpx, in this process). A writer here
appends `--rate` entries a second to every run, as a worker's commits would, for
`--seconds`; then nothing is written for `--idle-seconds`. Each database is measured twice
in the same run: `watcher`, as runner follows (one watcher per server wakes the followers:
runner.sql.follows), and `polling`, the server's followers polling each on its own every
EVENT_POLL_SECONDS as before the watcher (its stores' `follow` answering None), the
baseline (`--no-polling` leaves it out). Reported:

- events a second the followers received, and how long an entry took from its commit to a
  follower (median, 99th percentile);
- the server's CPU (its user + system time over the phase, as a share of one core) and its
  resident memory at the end of the phase;
- the statements the server's followers sent to the database a second (counted in the
  server by a SQLAlchemy event on every engine and on runner.sql.reads' plain reads), per
  follower and second; and apart, the watcher's own: on PostgreSQL the marks' renewals
  (3 statements each), on SQLite the poller's `PRAGMA data_version` probes and position
  queries (on its own connection).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import common
import fakes
import httpx
from sqlalchemy import insert

from runner.core.actions import ActionKind
from runner.core.budgets import Budgets
from runner.core.clock import utc_now
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind
from runner.service.events import EVENT_POLL_SECONDS
from runner.sql import leases
from runner.sql import runs as store
from runner.sql.database import open_engine
from runner.sql.schema import entries
from runner.store.rows import entry_row

TICKS = os.sysconf("SC_CLK_TCK")


# -- the server, in a process of its own ------------------------------------------------------


def serve(url: str, port: int, counts: str) -> None:
    """The server's process: the API's app under uvicorn, its statements counted to a file."""
    import uvicorn
    from sqlalchemy import event
    from sqlalchemy.engine import Engine
    from sqlalchemy.pool import Pool

    from runner.sql import follows, reads
    from runner.sql import store as sql_store
    from runner.ui import make_app

    if os.environ.get("RUNNER_BENCH_POLLING"):
        # The baseline: no watcher, every follower polls on its own (as before it).
        sql_store.SqlStore.follow = lambda self, run_id, poll_seconds: None  # type: ignore
    made: list[follows.Followers] = []
    followers_init = follows.Followers.__init__

    def tracked(self: Any, *args: Any, **kwargs: Any) -> None:
        followers_init(self, *args, **kwargs)
        made.append(self)

    follows.Followers.__init__ = tracked  # type: ignore[method-assign]

    def watcher_statements() -> tuple[int, int]:
        marks = probes = 0
        for followers in made:
            watcher = followers.watcher
            marks += getattr(watcher, "marks", 0)
            probes += getattr(watcher, "probes", 0) + getattr(watcher, "queries", 0)
        return marks, probes

    # Statements: SQLAlchemy's, and the plain reads (runner.sql.reads) on the driver's
    # cursor beneath it; checkouts: each ends with the pool's reset (a rollback) as well.
    sent = [0, 0]

    @event.listens_for(Engine, "before_cursor_execute")
    def count(*_: Any) -> None:
        sent[0] += 1

    @event.listens_for(Pool, "checkout")
    def checked_out(*_: Any) -> None:
        sent[1] += 1

    plain_each = reads.Reader.each

    def counted_each(self: Any, *args: Any, **kwargs: Any) -> Any:
        sent[0] += 1
        return plain_each(self, *args, **kwargs)

    reads.Reader.each = counted_each  # type: ignore[method-assign]

    def report() -> None:
        while True:
            marks, probes = watcher_statements()
            Path(counts + ".new").write_text(f"{sent[0]} {sent[1]} {marks} {probes}")
            os.replace(counts + ".new", counts)  # whole, never read half written
            time.sleep(0.2)

    threading.Thread(target=report, daemon=True).start()
    uvicorn.run(make_app(url), host="127.0.0.1", port=port, log_level="warning")


class Server:
    def __init__(self, url: str, folder: Path, polling: bool) -> None:
        self.port = _free_port()
        self.counts = folder / f"counts-{self.port}"
        env = {**os.environ, "RUNNER_BENCH_POLLING": "1" if polling else ""}
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", url, str(self.port), str(self.counts)],
            stdin=subprocess.DEVNULL,
            env=env,
        )
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(self.base + "/api/runs?limit=1", timeout=5)
                return
            except httpx.HTTPError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise SystemExit("the server did not start") from None
                time.sleep(0.1)

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def statements(self) -> tuple[int, int, int]:
        """The statements the server's followers sent so far, their connection checkouts,
        and the statements of the server's watcher of followed runs."""
        time.sleep(0.3)  # the file is written every 0.2 s
        sent, checkouts, marks, probes = (int(n) for n in self.counts.read_text().split())
        # A mark is one transaction of 3 statements through SQLAlchemy (counted in `sent`);
        # the poller's probes and queries go to a raw connection of its own (not counted).
        return sent - 3 * marks, checkouts - marks, 3 * marks + probes

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


# -- the runs and their writer ------------------------------------------------------------------


def live_runs(url: str, count: int) -> list[tuple[str, int]]:
    """`count` running runs, each claimed and its task journaled: (run id, lease epoch)."""
    engine = open_engine(url)
    made = []
    at = utc_now()
    for n in range(count):
        run_id = f"live-{n:04d}"
        store.create_run(
            engine, run_id=run_id, agent=fakes.REF, agent_name="bench", release="b1",
            task="follow me", budgets=Budgets(**fakes.UNLIMITED).as_dict(),
        )  # fmt: skip
        claim = leases.claim_run(engine, run_id, owner="bench", lease_seconds=3600, max_resumes=3)
        task = Entry(EntryKind.TASK, 0, Counters(), content="follow me")
        with engine.begin() as connection:
            connection.execute(insert(entries), [entry_row(run_id, 0, claim.epoch, task, at)])
        made.append((run_id, claim.epoch))
    engine.dispose()
    return made


def write(url: str, runs: list[tuple[str, int]], rate: float, seconds: float,
          committed: dict[tuple[str, int], float]) -> int:  # fmt: skip
    """Append one entry to each run `rate` times a second for `seconds`, one transaction an
    entry (as a worker commits); the commit time of each (run, position) in `committed`."""
    engine = open_engine(url)
    seq = {run_id: 0 for run_id, _ in runs}
    period = 1.0 / rate
    start = time.monotonic()
    rounds = 0
    while time.monotonic() - start < seconds:
        for run_id, epoch in runs:
            seq[run_id] += 1
            n = seq[run_id]
            entry = Entry(
                EntryKind.ACTION, n, Counters(steps=n, tokens=30 * n), action_type=ActionKind.TOOL,
                tool="read", args={"path": f"docs/{n}.md"}, idempotency_key=f"{run_id}-{n}",
                tokens=30,
            )  # fmt: skip
            with engine.begin() as connection:
                connection.execute(insert(entries), [entry_row(run_id, n, epoch, entry, utc_now())])
            committed[(run_id, n)] = time.monotonic()
        rounds += 1
        pause = start + rounds * period - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    engine.dispose()
    return sum(seq.values())


# -- the followers ---------------------------------------------------------------------------------


async def follow(client: httpx.AsyncClient, run_id: str, got: list[tuple[str, int, float]],
                 ready: asyncio.Event) -> None:  # fmt: skip
    """One follower, until cancelled: the position of each entry and when it came."""
    async with client.stream("GET", f"/api/runs/{run_id}/events") as response:
        assert response.status_code == 200, response.status_code
        ready.set()
        async for line in response.aiter_lines():
            if line.startswith("id: "):
                got.append((run_id, int(line[4:]), time.monotonic()))


def measure(name: str, url: str, folder: Path, options: Any, polling: bool) -> dict[str, Any]:
    runs = live_runs(url, options.runs)
    server = Server(url, folder, polling)
    committed: dict[tuple[str, int], float] = {}
    got: list[tuple[str, int, float]] = []
    phases: dict[str, Any] = {}
    try:

        async def main() -> None:
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
            async with httpx.AsyncClient(base_url=server.base, timeout=None, limits=limits) as c:
                readies = [asyncio.Event() for _ in runs]
                tasks = [
                    asyncio.create_task(follow(c, run_id, got, ready))
                    for (run_id, _), ready in zip(runs, readies, strict=True)
                ]
                await asyncio.gather(*(ready.wait() for ready in readies))
                while len(got) < len(runs):  # every task entry arrived
                    await asyncio.sleep(0.05)
                for phase, seconds, rate in (
                    ("live", options.seconds, options.rate),
                    ("idle", options.idle_seconds, 0.0),
                ):
                    before = (time.monotonic(), server.cpu_seconds(), server.statements(),
                              len(got))  # fmt: skip
                    if rate:
                        written = await asyncio.to_thread(
                            write, url, runs, rate, seconds, committed
                        )
                        # The last entries reach their followers within a poll or two.
                        deadline = time.monotonic() + 10
                        while len(got) < len(runs) + written and time.monotonic() < deadline:
                            await asyncio.sleep(0.05)
                    else:
                        await asyncio.sleep(seconds)
                    after = (time.monotonic(), server.cpu_seconds(), server.statements(),
                             len(got))  # fmt: skip
                    wall = after[0] - before[0]
                    phases[phase] = {
                        "seconds": round(wall, 1),
                        "events_per_second": round((after[3] - before[3]) / wall, 1),
                        "server_cpu_percent_of_a_core": round(
                            100 * (after[1] - before[1]) / wall, 1
                        ),
                        "server_rss_mib": round(server.rss_mib(), 1),
                        "statements_per_second": round((after[2][0] - before[2][0]) / wall, 1),
                        "statements_per_follower_second": round(
                            (after[2][0] - before[2][0]) / wall / len(runs), 2
                        ),
                        "checkouts_per_follower_second": round(
                            (after[2][1] - before[2][1]) / wall / len(runs), 2
                        ),
                        "watcher_statements_per_second": round(
                            (after[2][2] - before[2][2]) / wall, 2
                        ),
                    }
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run(main())
    finally:
        server.close()
    delays = [
        (seen - committed[(run_id, position)]) * 1000
        for run_id, position, seen in got
        if (run_id, position) in committed
    ]
    positions: dict[str, list[int]] = {}
    for run_id, position, _ in got:
        positions.setdefault(run_id, []).append(position)
    exact = all(p == list(range(len(p))) for p in positions.values())
    delays.sort()
    return {
        "database": f"{name}, {'polling' if polling else 'watcher'}",
        "runs": options.runs,
        "every_event_once_in_order": exact,
        "delivery_ms_median": round(statistics.median(delays), 1) if delays else None,
        "delivery_ms_p99": round(delays[int(0.99 * (len(delays) - 1))], 1) if delays else None,
        **{f"{phase}_{k}": v for phase, figures in phases.items() for k, v in figures.items()},
    }


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--serve":
        serve(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return
    p = common.parser(__doc__)
    p.add_argument("--runs", type=int, default=200, help="live runs, one follower each")
    p.add_argument("--rate", type=float, default=1.0, help="entries a second per run")
    p.add_argument("--seconds", type=float, default=20.0, help="how long entries are written")
    p.add_argument("--idle-seconds", type=float, default=10.0, help="then how long none is")
    p.add_argument("--no-polling", action="store_true", help="leave out the polling baseline")
    options = p.parse_args()
    modes = [False] if options.no_polling else [True, False]
    results = []
    with common.scratch_folder(options.dir) as folder:
        for polling in modes:
            url = common.sqlite_url(folder, f"api-{polling}")
            results.append(measure("SQLite", url, folder, options, polling))
        if not options.no_postgres:
            for polling in modes:
                with common.scratch_postgres(options.postgres) as pg:
                    results.append(measure("PostgreSQL", pg, folder, options, polling))
    expected = 2 / EVENT_POLL_SECONDS
    common.print_table(
        f"{options.runs} followers of {options.runs} live runs, one server "
        f"({options.rate:g} entries a second per run for {options.seconds:g} s, then "
        f"{options.idle_seconds:g} s idle)",
        ["", *[r["database"] for r in results]],
        [[key, *[r[key] for r in results]] for key in results[0] if key != "database"],
    )
    print(f"\npolling, an idle follower's documented cost: 2 reads every {EVENT_POLL_SECONDS} s"
          f" = {expected:g} statements a second; with the watcher, none")  # fmt: skip
    common.write_json(options.json, "api_followers", options, results)


if __name__ == "__main__":
    main()
