"""The in-memory store's scores: the rules of runner.store.scores, on dicts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from runner.core.limits import NO_LIMITS, Limits
from runner.core.status import RunStatus
from runner.store.scores import (
    CRASHED_NOTE,
    MAX_SCORER_STARTS,
    DueScore,
    ScoreClaim,
    ScoreRow,
    ScoreSource,
    ScoreStatus,
)
from runner.testing.memory_rows import MemoryRows


class _Held:
    """A score's row and the claim on it (owner, epoch, expiry)."""

    def __init__(self, row: ScoreRow) -> None:
        self.row = row
        self.epoch = 0
        self.expires_at: datetime | None = None


class MemoryScores(MemoryRows):
    """Scores kept in memory. A scorer's model calls draw from no limit here."""

    _score_rows: dict[tuple[str, str], _Held]

    def _scores(self) -> dict[tuple[str, str], _Held]:
        # Made on first use: the rows' __init__ is shared by every part of the store.
        if not hasattr(self, "_score_rows"):
            self._score_rows = {}
        return self._score_rows

    def record_score(self, run_id: str, name: str, value: float, note: str | None) -> ScoreRow:
        at = self._now()
        with self._lock:
            self._row(run_id)  # RunNotFound
            held = self._scores().get((run_id, name))
            row = ScoreRow(
                run_id, name, ScoreStatus.SCORED, value, note, ScoreSource.MANUAL, 0, at, at
            )
            if held is None:
                self._scores()[(run_id, name)] = _Held(row)
            else:
                held.row = replace(row, attempts=held.row.attempts, created_at=held.row.created_at)
                held.expires_at = None
            return self._scores()[(run_id, name)].row

    def plan_scores(self, run_id: str, names: Sequence[str]) -> None:
        at = self._now()
        with self._lock:
            for name in names:
                self._scores().setdefault(
                    (run_id, name),
                    _Held(
                        ScoreRow(
                            run_id,
                            name,
                            ScoreStatus.PENDING,
                            None,
                            None,
                            ScoreSource.SCORER,
                            0,
                            at,
                            None,
                        )
                    ),
                )

    def _claimable(self, held: _Held, at: datetime) -> bool:
        status = held.row.status
        lapsed = held.expires_at is not None and held.expires_at < at
        return status is ScoreStatus.PENDING or (status is ScoreStatus.SCORING and lapsed)

    def due_scores(self, limit: int, skip_agents: Sequence[str] = ()) -> list[DueScore]:
        at = self._now()
        with self._lock:
            due = []
            for (run_id, name), held in sorted(
                self._scores().items(), key=lambda item: (item[1].row.created_at, item[0])
            ):
                run = self.runs.get(run_id)
                if (
                    run is None
                    or run["status"] != RunStatus.FINISHED
                    or run["agent"] in skip_agents
                ):
                    continue
                if self._claimable(held, at):
                    due.append(DueScore(run_id, name, run["agent"]))
            return due[:limit]

    def claim_score(self, run_id: str, name: str, lease_seconds: float) -> ScoreClaim | None:
        at = self._now()
        with self._lock:
            held = self._scores().get((run_id, name))
            if held is None or not self._claimable(held, at):
                return None
            if held.row.attempts >= MAX_SCORER_STARTS:
                held.row = replace(
                    held.row, status=ScoreStatus.FAILED, note=CRASHED_NOTE, scored_at=at
                )
                held.expires_at = None
                return None
            held.epoch += 1
            held.expires_at = at + timedelta(seconds=lease_seconds)
            held.row = replace(held.row, status=ScoreStatus.SCORING, attempts=held.row.attempts + 1)
            return ScoreClaim(run_id, name, held.epoch, held.row.attempts)

    def _fenced(self, claim: ScoreClaim) -> _Held | None:
        held = self._scores().get((claim.run_id, claim.name))
        if held is None or held.row.status is not ScoreStatus.SCORING:
            return None
        return held if held.epoch == claim.epoch else None

    def renew_score(self, held: ScoreClaim, lease_seconds: float) -> bool:
        at = self._now()
        with self._lock:
            found = self._fenced(held)
            if found is None:
                return False
            found.expires_at = at + timedelta(seconds=lease_seconds)
            return True

    def finish_score(self, held: ScoreClaim, value: float | None, note: str | None) -> bool:
        at = self._now()
        with self._lock:
            found = self._fenced(held)
            if found is None:
                return False
            status = ScoreStatus.FAILED if value is None else ScoreStatus.SCORED
            found.row = replace(found.row, status=status, value=value, note=note, scored_at=at)
            found.expires_at = None
            return True

    def run_scores(self, run_id: str) -> list[ScoreRow]:
        with self._lock:
            rows = [held.row for (run, _), held in self._scores().items() if run == run_id]
            return sorted(rows, key=lambda row: row.name)

    def scorer_limits(self, run_id: str) -> Limits:
        return NO_LIMITS
