"""How a worker waits out its database: a jittered backoff, capped low, and the wait it
last gave; a damaged database is not waited out but raised.

One `DatabaseWait` per worker, shared by the parts that ask the database between claims
(the claim itself, a drain's end, the schedules' ticks), so a failure any of them meets
slows the serving loop's next look; start-up waits for a database that is not there yet on
the same backoff (runner.service.worker_process).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner.core.backoff import Backoff

if TYPE_CHECKING:
    from runner.store.protocol import RunStore

# Backoff after a database error, jittered: capped low, so that the first step after an
# outage follows the database's return within about a second (a longer cap left runs
# waiting up to 38 s after PostgreSQL came back), while each worker knocks at most once a
# second or so (one failed connect: no herd a recovering server would notice).
DB_FIRST_BACKOFF = 0.1
DB_MAX_BACKOFF = 1.0


def raise_if_damaged(store: RunStore, exc: Exception) -> None:
    """Raise the store's own error for `exc` if it says the database is damaged (a corrupt
    file is no outage: waiting would not mend it), else return: an outage, to wait out."""
    corrupt = store.damaged(exc)
    if corrupt is not None:
        raise corrupt from None


def database_backoff() -> Backoff:
    """A fresh backoff for waiting out a database."""
    return Backoff(DB_FIRST_BACKOFF, DB_MAX_BACKOFF, jitter=True)


class DatabaseWait:
    """The seconds to wait before asking the database again (0: it answered last)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._backoff = database_backoff()

    def failed(self) -> float:
        """The database failed once more: the next, longer wait."""
        self.seconds = self._backoff.next()
        return self.seconds

    def answered(self) -> None:
        self._backoff.reset()
        self.seconds = 0.0
