"""A worker whose schedules run on a simulated clock: `python schedule_worker.py URL CLOCK`.

CLOCK is a file holding the simulated time (seconds since the epoch), which the test moves
tick by tick; leases and everything else stay on the database's clock. The worker serves a
queue no run goes to: the test watches the ticks fire, not the runs execute.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from runner.service.worker import Worker


class FileClock:
    """The time the test wrote last (it replaces the file whole: a read never sees half)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def time(self) -> float:
        return float(self.path.read_text())

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def main() -> None:
    url, clock = sys.argv[1], Path(sys.argv[2])
    worker = Worker(url, poll=0.05, queues=["nobody"], schedule_clock=FileClock(clock))
    worker.install_signal_handlers()
    print("serving", flush=True)
    worker.serve()


if __name__ == "__main__":
    main()
