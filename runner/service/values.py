"""The values the service hands the faces: a run as stored (`RunRow`), a queue and what it
holds (`QueueInfo`), a release's unfinished runs (`ReleaseInfo`), a schedule (`ScheduleRow`)
and what a tick did (`Fired`), a tree of runs (`RunTree`), a run's score (`ScoreRow`), and
whether a running run has stalled (derived when read, never stored). None of them loads
SQLAlchemy: `runner list` and `show` print them on their fast path."""

from __future__ import annotations

from runner.store.liveness import is_stalled, stall_reason
from runner.store.releases import ReleaseInfo
from runner.store.rows import Fired, LimitInfo, QueueInfo, RunRow, ScheduleRow
from runner.store.run_trees import RunTree
from runner.store.scores import ScoreRow

__all__ = [
    "Fired",
    "LimitInfo",
    "QueueInfo",
    "ReleaseInfo",
    "RunRow",
    "RunTree",
    "ScheduleRow",
    "ScoreRow",
    "is_stalled",
    "stall_reason",
]
