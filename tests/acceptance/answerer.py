"""A person at a keyboard, as a separate process: answers waiting runs in random order.

    python answerer.py DATABASE_URL SEED RUN_ID...

Each run is answered once it waits: approved, except every third (by its position in the
arguments), which is denied. One line per answer on stdout: `approved ID` or `denied ID`.
Exits 0 once every run was answered, 1 if one could not be (after a minute).
"""

from __future__ import annotations

import random
import sys
import time

from runner import Runner
from runner.core.status import RunStatus


def main(url: str, seed: int, ids: list[str]) -> int:
    rng = random.Random(seed)
    deny = {run_id for i, run_id in enumerate(ids) if i % 3 == 0}
    left = set(ids)
    give_up = time.monotonic() + 60
    with Runner(url) as runner:
        while left and time.monotonic() < give_up:
            waiting = [row.id for row in runner.list(status=RunStatus.WAITING, limit=1000)]
            ready = sorted(left.intersection(waiting))
            rng.shuffle(ready)
            for run_id in ready:
                if run_id in deny:
                    runner.deny(run_id, reason=f"not {run_id}", by="answerer")
                    print(f"denied {run_id}", flush=True)
                else:
                    runner.approve(run_id, note="ok", by="answerer")
                    print(f"approved {run_id}", flush=True)
                left.discard(run_id)
            time.sleep(0.05)
    return 0 if not left else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), sys.argv[3:]))
