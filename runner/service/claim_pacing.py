"""When a worker with free slots claims: at once, or after a short wait that saves claims.

A claim transaction costs about ten statements whatever it takes, so a worker does not
claim for each slot that frees: while its queue is backed up it lets a few slots free first
(CLAIM_GATHER_*), and after a claim that found nothing it does not claim again at each of
its runs' ends (EMPTY_CLAIM_PAUSE, longer after several such claims in a row). The serving
loop (runner.service.worker) asks before each claim and tells it what each claim took.
"""

from __future__ import annotations

import time

# Most runs claimed in one transaction: enough that a worker fills a thousand slots in a
# second or two (50 left PostgreSQL at 600-770 in flight of 1,000), few enough that the claim
# holds its locks (SQLite's file) for tens of milliseconds at most (~0.5 ms a claim).
CLAIMS_PER_TRANSACTION = 100
# A worker whose last claim took every slot it asked for (runs wait in the queue) lets a
# few slots free up before claiming again, for at most this long: a claim transaction costs
# it about ten statements whatever it takes, and at saturation one a run ended was half its
# CPU (docs/performance/workers.md, Saturation). A slot waits at most this, a twentieth of a poll.
CLAIM_GATHER_SECONDS = 0.02
# How many slots it waits for: an eighth of its concurrency (none below 16 runs at once).
CLAIM_GATHER_SHARE = 8
# A claim that took nothing is followed by another that a run's end prompts no sooner than
# this: when a worker's queue runs dry, each of its runs' ends woke it to claim again (115
# claims of nothing in the last second of a drain of a thousand runs, each several
# statements). Any other wake-up (a NOTIFY, the poll) claims at once; a run's end can free a
# full queue's slot, whose next run waits this long at most.
EMPTY_CLAIM_PAUSE = 0.05
# Each claim of nothing in a row doubles that pause, up to this: a drain whose queue ran dry
# still claimed every 50 ms while its last runs ran, 70 to 80 claims of nothing in the last
# four seconds of a thousand runs, each 3 to 5 ms of the CPU those runs' steps wait for. A
# run's end that frees a full queue's slot has its next run claimed within this at most.
EMPTY_CLAIM_PAUSE_MOST = 0.2


class ClaimPacing:
    """What the last claims of a worker of `concurrency` slots took, and so when it claims
    next."""

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        # Whether the last claim took every slot it asked for (more runs wait), and since
        # when slots have been free without a claim (see CLAIM_GATHER_SECONDS).
        self.backed_up = False
        self.free_since: float | None = None
        # When the last claim took nothing (monotonic time; None: it took runs), and the
        # pause after it (see EMPTY_CLAIM_PAUSE_MOST).
        self.found_none_at: float | None = None
        self.pause_after_none = 0.0

    def claimed(self, took: int, free: int) -> None:
        """A claim for `free` slots took `took` runs."""
        self.free_since = None
        if took:
            self.found_none_at, self.pause_after_none = None, 0.0
        else:
            self.found_none_at = time.monotonic()
            doubled = min(2 * self.pause_after_none, EMPTY_CLAIM_PAUSE_MOST)
            self.pause_after_none = max(doubled, EMPTY_CLAIM_PAUSE)
        self.backed_up = took >= min(free, CLAIMS_PER_TRANSACTION)

    def gathering(self, running: int, stopping: bool) -> float:
        """Seconds to wait for more slots to free before claiming (0: claim now), with
        `running` runs in the slots. Only while the queue is backed up and fewer than an
        eighth of the slots are free."""
        if not self.backed_up or stopping:
            return 0.0
        free = self.concurrency - running
        if free >= max(1, self.concurrency // CLAIM_GATHER_SHARE):
            return 0.0
        now = time.monotonic()
        if self.free_since is None:
            self.free_since = now
        return max(0.0, self.free_since + CLAIM_GATHER_SECONDS - now)

    def pausing(self, ended: int, running: int, stopping: bool) -> float:
        """Seconds to wait before claiming again (0: claim now): only after a claim that
        took nothing, when what woke the worker was `ended` runs' ends and others (`running`)
        still run (see EMPTY_CLAIM_PAUSE, doubled for each claim of nothing before it in a
        row, up to EMPTY_CLAIM_PAUSE_MOST). A worker left with no run claims at once: a
        drain then ends, and a suspect is claimed only by an idle worker."""
        if self.found_none_at is None or not ended or not running or stopping:
            return 0.0
        return max(0.0, self.found_none_at + self.pause_after_none - time.monotonic())
