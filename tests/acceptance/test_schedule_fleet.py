"""Acceptance: worker processes fire a schedule's ticks on a simulated clock, exactly one
run per tick for 100 ticks, while the test SIGKILLs them at random (three workers on
PostgreSQL, two processes on one SQLite file).

The clock is a file the test moves a tick at a time (tests/acceptance/schedule_worker.py
reads it); a tick is moved past only once its run exists, so every tick is fired by some
worker, whichever died meanwhile, and any second run of a tick would be seen at the end.
Kills land at random moments: while a worker looks, fires, commits, or sleeps.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from runner import Runner
from tests.conditions import scaled, wait_until

WORKER = Path(__file__).resolve().with_name("schedule_worker.py")
AGENT = f"{Path(__file__).resolve().with_name('queue_agents.py')}:agent"
TICKS = 100
MINUTE = timedelta(minutes=1)


class Fleet:
    """Worker processes on one database, all on the clock file."""

    def __init__(self, url: str, clock: Path, logs: Path) -> None:
        self.url, self.clock, self.logs = url, clock, logs
        self.processes: list[subprocess.Popen[bytes]] = []
        self.started = 0
        self.killed = 0

    def start(self) -> subprocess.Popen[bytes]:
        self.started += 1
        with (self.logs / f"worker-{self.started}.log").open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, str(WORKER), self.url, str(self.clock)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            )
        self.processes.append(process)
        return process

    def kill(self, process: subprocess.Popen[bytes]) -> None:
        process.send_signal(signal.SIGKILL)
        assert process.wait(scaled(60)) == -signal.SIGKILL
        self.processes.remove(process)
        self.killed += 1

    def close(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait(scaled(60))

    def said(self) -> str:
        return "\n".join(path.read_text()[-2000:] for path in sorted(self.logs.glob("*.log")))


def set_clock(clock: Path, seconds: float) -> None:
    scratch = clock.with_suffix(".new")
    scratch.write_text(repr(seconds))
    scratch.replace(clock)  # whole or not at all: a worker never reads half a time


def test_workers_killed_at_random_fire_each_tick_exactly_once(db_url: str, tmp_path: Path) -> None:
    workers = 3 if db_url.startswith("postgresql") else 2
    chance = random.Random(os.environ.get("PYTEST_XDIST_WORKER", "") + db_url[:8])
    with Runner(db_url) as runner:
        # `allow`: the runs stay queued (no worker serves their queue), and every tick runs.
        first = runner.add_schedule(
            "fleet", AGENT, "tick", cron="* * * * *", queue="ticks", overlap="allow"
        ).next_tick_at
    clock = tmp_path / "clock"
    set_clock(clock, (first - MINUTE).timestamp())
    logs = tmp_path / "logs"
    logs.mkdir()
    fleet = Fleet(db_url, clock, logs)
    try:
        for _ in range(workers):
            fleet.start()
        with Runner(db_url) as runner:
            for n in range(TICKS):
                tick = first + n * MINUTE
                # Within the tick's minute, well inside its on-time window.
                set_clock(clock, (tick + timedelta(seconds=chance.uniform(0, 20))).timestamp())
                run_id = f"fleet-{tick:%Y%m%dT%H%M}"
                # Some workers die the moment the clock moves (as one looks, fires or
                # commits), others once the tick's run exists; then the fleet is made whole.
                doomed = [p for p in fleet.processes if chance.random() < 0.2]
                early = [p for p in doomed if chance.random() < 0.5]
                for process in early:
                    fleet.kill(process)
                if not fleet.processes:
                    fleet.start()
                wait_until(
                    lambda run_id=run_id: runner.store.existing_runs([run_id]),
                    what=lambda run_id=run_id: f"{run_id} to fire\n{fleet.said()}",
                )
                for process in doomed:
                    if process not in early:
                        fleet.kill(process)
                while len(fleet.processes) < workers:
                    fleet.start()
            runs = runner.list(schedule="fleet", limit=10 * TICKS)
            expected = {f"fleet-{first + n * MINUTE:%Y%m%dT%H%M}" for n in range(TICKS)}
            assert sorted(run.id for run in runs) == sorted(expected)
            after = runner.schedule("fleet")
            assert after.last_tick_at == first + (TICKS - 1) * MINUTE
            assert after.last_skip is None and after.next_tick_at == first + TICKS * MINUTE
        assert fleet.killed >= 10, fleet.killed  # the kills really happened
    finally:
        fleet.close()
