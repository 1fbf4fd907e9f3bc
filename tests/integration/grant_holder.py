"""A worker that takes a grant of limit `m`, sends calls from it, and waits to be killed.

    python grant_holder.py URL RUN_ID SENT_FILE

Run by tests/integration/test_limit_grants.py, with the same small grant sizes as the test:
it claims RUN_ID, takes three calls from one grant (each written to SENT_FILE, with the
moment it was sent, as the provider would see it), settles the first two (in memory only:
a grant writes its calls when it closes) and sleeps until SIGKILLed.
"""

from __future__ import annotations

import sys
import time

from runner import Runner
from runner.sql import grants

grants.GRANT_FROM_REQUESTS, grants.GRANT_SHARE = 20, 5  # 20 requests a minute: grants of 4


def main() -> None:
    url, run_id, sent = sys.argv[1:4]
    runner = Runner(url, lease_seconds=30)
    claim = runner.store.claim_run(run_id, lease_seconds=30, max_resumes=5, steal=True)
    limits = runner.store.run_limits(run_id, claim.epoch)
    held = []
    for _ in range(3):
        reservation = limits.reserve("m", 10)
        assert reservation.id in runner.store.grants._by_row, "not from a grant"
        held.append(reservation)
        with open(sent, "a") as log:
            log.write(f"{time.time():.6f}\n")
        time.sleep(0.2)
    for reservation in held[:2]:
        limits.settle(reservation, 10)
    with open(sent, "a") as log:
        log.write("holding\n")
    time.sleep(3600)


if __name__ == "__main__":
    main()
