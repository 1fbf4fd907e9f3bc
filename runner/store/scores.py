"""Scores of runs as both stores keep them: the rows and the rules of a scorer's claim.

A scorer's score is one row per (run, name): written `pending` when the run starts, claimed
`scoring` by one worker once the run has ended (a lease and an epoch, as a run's claim), then
`scored` or `failed` in a write fenced by that epoch, so a score is kept once whatever the
crashes. A claim is a start of the scorer: a row started MAX_SCORER_STARTS times whose lease
lapsed again (its worker died each time) is failed, not started again, so a crash re-runs a
scorer at most once. A person's score (`runner score`) is a `manual` row, kept as given (a
later one of the same name replaces it, and a scorer's row not yet scored gives way to it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from runner.store.payloads import open_text


class ScoreStatus(StrEnum):
    """Where a score stands, as stored in `scores.status`."""

    PENDING = "pending"  # its scorer has not started (its run may not have ended yet)
    SCORING = "scoring"  # a worker runs its scorer, under a lease
    SCORED = "scored"  # value is kept
    FAILED = "failed"  # its scorer raised or its workers died: note says why


class ScoreSource(StrEnum):
    SCORER = "scorer"  # a scorer declared on the agent, run by a worker
    MANUAL = "manual"  # given by a person or a program (`runner score`, the API)


# A scorer is started at most this many times for a run: once, and once more after a crash.
MAX_SCORER_STARTS = 2
CRASHED_NOTE = "its worker died while the scorer ran, twice: not started a third time"


@dataclass(frozen=True)
class ScoreRow:
    """A score as stored."""

    run_id: str
    name: str
    status: ScoreStatus
    value: float | None
    note: str | None
    source: ScoreSource
    attempts: int
    created_at: datetime
    scored_at: datetime | None


@dataclass(frozen=True)
class DueScore:
    """A scorer's row whose run has ended and which no live worker runs."""

    run_id: str
    name: str
    agent: str | None  # the run's agent reference: where its scorer is


@dataclass(frozen=True)
class ScoreClaim:
    """A worker's claim of a scorer's row: the epoch its result is fenced by."""

    run_id: str
    name: str
    epoch: int
    attempts: int  # starts so far, this one included


def score_row(m: Mapping[str, Any]) -> ScoreRow:
    """A score from its row's columns (the note opened through the payload codecs; times
    as the reader gives them, aware)."""
    return ScoreRow(
        run_id=m["run_id"],
        name=m["name"],
        status=ScoreStatus(m["status"]),
        value=m["value"],
        note=open_text(m["note"]),
        source=ScoreSource(m["source"]),
        attempts=int(m["attempts"]),
        created_at=m["created_at"],
        scored_at=m["scored_at"],
    )
