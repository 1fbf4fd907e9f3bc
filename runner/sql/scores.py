"""Scores of runs: their SQL (the rules are runner.store.scores').

A score's note is a payload (a judge's words): written through the engine's codecs and
opened on read, as a run's task and output are. Each function is one short transaction. A
scorer's claim and its result are conditional UPDATEs of the score's row: the claim bumps
`lease_epoch` and `attempts` only while the row is pending or its lease lapsed, and the
result is written only while the row is `scoring` under that epoch, so a worker that lost
its claim writes nothing and a score is kept once.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, and_, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from runner.core.status import RunStatus
from runner.errors import RunNotFound
from runner.sql.payloads import payloads_of
from runner.sql.runs import reading
from runner.sql.schema import runs, scores
from runner.store.scores import (
    CRASHED_NOTE,
    MAX_SCORER_STARTS,
    DueScore,
    ScoreClaim,
    ScoreRow,
    ScoreSource,
    ScoreStatus,
    score_row,
)

s = scores.c


def record(
    engine: Engine, run_id: str, name: str, value: float, note: str | None, at: datetime
) -> ScoreRow:
    """A person's score of the run: kept as given, replacing one of the same name."""
    values = {
        "status": ScoreStatus.SCORED,
        "value": value,
        "note": note,
        "source": ScoreSource.MANUAL,
        "lease_owner": None,
        "lease_expires_at": None,
        "scored_at": at,
    }
    for _attempt in range(3):
        try:
            with engine.begin() as connection:
                found = connection.execute(select(runs.c.id).where(runs.c.id == run_id)).first()
                if found is None:
                    raise RunNotFound(f"no run with id {run_id}")
                sealed = {**values, "note": payloads_of(connection).seal(note)}
                changed = connection.execute(
                    update(scores).where(s.run_id == run_id, s.name == name).values(**sealed)
                ).rowcount
                if not changed:
                    connection.execute(
                        insert(scores).values(
                            run_id=run_id,
                            name=name,
                            attempts=0,
                            lease_epoch=0,
                            created_at=at,
                            **sealed,
                        )
                    )
            break
        except IntegrityError:
            continue  # the same score inserted at this moment by another: update it
    return score_of(engine, run_id, name)


def plan(engine: Engine, run_id: str, names: Sequence[str], at: datetime) -> None:
    """The run's scorers' rows, `pending`, for those it has none of yet."""
    if not names:
        return
    with engine.begin() as connection:
        have = set(connection.execute(select(s.name).where(s.run_id == run_id)).scalars())
        missing = [name for name in names if name not in have]
        if missing:
            connection.execute(
                insert(scores),
                [
                    {
                        "run_id": run_id,
                        "name": name,
                        "status": ScoreStatus.PENDING,
                        "source": ScoreSource.SCORER,
                        "attempts": 0,
                        "lease_epoch": 0,
                        "created_at": at,
                    }
                    for name in missing
                ],
            )


def _claimable(at: datetime) -> Any:
    return or_(
        s.status == ScoreStatus.PENDING,
        and_(s.status == ScoreStatus.SCORING, s.lease_expires_at < at),
    )


def due(
    engine: Engine, at: datetime, limit: int, skip_agents: Sequence[str] = ()
) -> list[DueScore]:
    """Scorers' rows of ended runs that no live worker runs, oldest first (but those of
    runs of `skip_agents`)."""
    query = (
        select(s.run_id, s.name, runs.c.agent)
        .join_from(scores, runs, runs.c.id == s.run_id)
        .where(
            s.status.in_([ScoreStatus.PENDING, ScoreStatus.SCORING]),
            _claimable(at),
            runs.c.status == RunStatus.FINISHED,
        )
        .order_by(s.created_at, s.run_id, s.name)
        .limit(limit)
    )
    if skip_agents:
        query = query.where(runs.c.agent.not_in(list(skip_agents)))
    with reading(engine) as connection:
        return [DueScore(row.run_id, row.name, row.agent) for row in connection.execute(query)]


def claim(
    engine: Engine, run_id: str, name: str, owner: str, lease_seconds: float, at: datetime
) -> ScoreClaim | None:
    """Start the scorer of this row: its claim, or None if another worker has it (or it is
    done). A row whose scorer was started MAX_SCORER_STARTS times already, each time by a
    worker that died, is failed instead: None."""
    where = [s.run_id == run_id, s.name == name, _claimable(at)]
    with engine.begin() as connection:
        started = connection.execute(
            update(scores)
            .where(*where, s.attempts < MAX_SCORER_STARTS)
            .values(
                status=ScoreStatus.SCORING,
                lease_owner=owner,
                lease_epoch=s.lease_epoch + 1,
                lease_expires_at=at + timedelta(seconds=lease_seconds),
                attempts=s.attempts + 1,
                started_at=at,
            )
        ).rowcount
        if not started:
            connection.execute(
                update(scores)
                .where(*where, s.attempts >= MAX_SCORER_STARTS)
                .values(
                    status=ScoreStatus.FAILED,
                    note=CRASHED_NOTE,
                    lease_owner=None,
                    lease_expires_at=None,
                    scored_at=at,
                )
            )
            return None
        row = connection.execute(
            select(s.lease_epoch, s.attempts).where(s.run_id == run_id, s.name == name)
        ).one()
    return ScoreClaim(run_id, name, int(row.lease_epoch), int(row.attempts))


def renew(engine: Engine, held: ScoreClaim, lease_seconds: float, at: datetime) -> bool:
    """Hold the claim on (False: it was lost)."""
    with engine.begin() as connection:
        return bool(
            connection.execute(
                update(scores)
                .where(*_fenced(held))
                .values(lease_expires_at=at + timedelta(seconds=lease_seconds))
            ).rowcount
        )


def finish(
    engine: Engine,
    held: ScoreClaim,
    value: float | None,
    note: str | None,
    at: datetime,
) -> bool:
    """Keep the scorer's value (None: it failed, `note` says why), fenced by the claim's
    epoch: False, nothing written, if the claim was lost."""
    status = ScoreStatus.FAILED if value is None else ScoreStatus.SCORED
    with engine.begin() as connection:
        return bool(
            connection.execute(
                update(scores)
                .where(*_fenced(held))
                .values(
                    status=status,
                    value=value,
                    note=payloads_of(connection).seal(note),
                    lease_owner=None,
                    lease_expires_at=None,
                    scored_at=at,
                )
            ).rowcount
        )


def _fenced(held: ScoreClaim) -> list[Any]:
    return [
        s.run_id == held.run_id,
        s.name == held.name,
        s.status == ScoreStatus.SCORING,
        s.lease_epoch == held.epoch,
    ]


def run_scores(engine: Engine, run_id: str) -> list[ScoreRow]:
    """The run's scores by name, whatever their status."""
    with reading(engine) as connection:
        rows = connection.execute(select(scores).where(s.run_id == run_id).order_by(s.name))
        return [_row(row) for row in rows]


def score_of(engine: Engine, run_id: str, name: str) -> ScoreRow:
    with reading(engine) as connection:
        row = connection.execute(select(scores).where(s.run_id == run_id, s.name == name)).one()
        return _row(row)


def _row(row: Any) -> ScoreRow:
    return score_row(row._mapping)
