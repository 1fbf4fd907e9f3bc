"""A worker whose look for due ticks meets a database error looks again once the database
answers (after its backoff, on the real clock), not at its next look on the schedules' clock:
20 s later a tick could have left its on-time window, and a simulated clock that stands
still until the tick fires (tests/acceptance/test_schedule_fleet.py) would never come to it.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

from sqlalchemy.exc import OperationalError

from runner import Runner
from runner.core.clock import ManualClock
from runner.service.worker import Worker
from tests.conditions import scaled, wait_until

from .agents import SOLVER_REF


def test_a_tick_a_database_error_kept_from_firing_fires_once_the_database_answers(
    db_url: str,
) -> None:
    with Runner(db_url) as runner:
        # `ticks`: a queue the worker does not serve, so the tick's run stays to be seen.
        tick = runner.add_schedule(
            "minutely", SOLVER_REF, "What is 2 + 3?", cron="* * * * *", queue="ticks"
        ).next_tick_at
    run_id = f"minutely-{tick:%Y%m%dT%H%M}"
    # The schedules' clock stands still inside the tick's minute: only a retry on the real
    # clock can fire it.
    clock = ManualClock((tick + timedelta(seconds=10)).timestamp())
    worker = Worker(db_url, poll=0.05, queues=["nobody"], schedule_clock=clock)
    fire = worker.store.fire_schedules
    failed: list[datetime] = []

    def fails_once(now: datetime) -> list[object]:
        if not failed:
            failed.append(now)
            raise OperationalError("SELECT", {}, ConnectionError("server closed the connection"))
        return list(fire(now))

    worker.store.fire_schedules = fails_once  # type: ignore[method-assign,assignment]
    serving = threading.Thread(target=worker.serve)
    serving.start()
    try:
        with Runner(db_url) as runner:
            wait_until(
                lambda: runner.store.existing_runs([run_id]),
                timeout=30,
                what=f"{run_id} to fire after the error",
            )
    finally:
        worker.stopping.set()
        worker._wake.set()
        serving.join(scaled(60))
    assert not serving.is_alive()
    assert len(failed) == 1  # the error happened, and the tick fired after it
