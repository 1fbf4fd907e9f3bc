"""The stop-reason distribution of finished runs (`runner stats`), with rises flagged.

Read from the `run_summary` view of migration 0002 (by schedule: joined to `runs.schedule`,
revision 0012; by root: joined to each run's root, revision 0010); by release, with the
scores of the `run_scores` view (revision 0020).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any, Literal

from sqlalchemy import ColumnElement, Engine, func, select

from runner.core.status import RunStatus
from runner.history.score_stats import Drop, ScoreMean, drops, score_means
from runner.history.views import run_summary
from runner.sql.backend import backend_for
from runner.sql.schema import runs

By = Literal["release", "agent", "day", "schedule", "root"]
# A rise is flagged only when chance alone would produce it less than 5% of the time.
P_FLAG = 0.05


@dataclass(frozen=True)
class Share:
    stop_reason: str
    count: int
    percent: float


@dataclass(frozen=True)
class Rise:
    """A non-final stop reason whose share rose against the previous group."""

    stop_reason: str
    percent: float
    previous_percent: float
    points: float
    p_value: float  # one-sided Fisher exact test: the chance of a rise this large by luck


@dataclass
class Group:
    """One release (of one agent), one agent, one day or one schedule, with its finished
    runs' reasons."""

    label: str
    agent_name: str | None
    release: str | None
    day: str | None
    runs: int
    first_run_at: datetime | None
    shares: list[Share]
    previous: str | None = None
    rises: list[Rise] = field(default_factory=list)
    schedule: str | None = None
    # By release: each score's mean and interval, and the drops against the previous release.
    scores: list[ScoreMean] = field(default_factory=list)
    drops: list[Drop] = field(default_factory=list)


def stop_reason_stats(
    engine: Engine,
    *,
    by: By = "release",
    since: datetime | None = None,
    agent_name: str | None = None,
    min_rise: float = 5.0,
) -> list[Group]:
    """The stop-reason distribution of finished runs per group, oldest group first.

    A group is compared with the one before it: the previous release of the same agent,
    or the previous day with runs. A reason other than `final` is flagged when its share
    rose by at least `min_rise` points and chance alone would explain it less than 5% of the
    time (a one-sided Fisher exact test, sound for small groups too). Agents are not
    compared with each other. By release, each group also has its scores' means with a 95%
    interval, and a score whose mean fell beyond chance (one-sided Welch's t-test,
    p < 0.05) is one of its `drops` (runner.history.score_stats).
    """
    v = run_summary.c
    # By root: every run of a tree (the root and its sub-agents' child runs) counts for the
    # agent of its root, so an orchestrator's children's stops are its own to compare.
    root = runs.alias("root")
    by_key: dict[str, Sequence[ColumnElement[Any]]] = {
        "release": [v.agent_name, v.release],
        "agent": [v.agent_name],
        "day": [v.day],
        "schedule": [runs.c.schedule],
        "root": [root.c.agent_name],
    }
    keys = by_key[by]
    query = (
        select(*keys, v.stop_reason, func.count().label("n"), func.min(v.created_at))
        .where(v.status == RunStatus.FINISHED)
        .group_by(*keys, v.stop_reason)
    )
    if by == "schedule":  # the schedule's runs only (the view has no schedule column)
        query = query.join_from(run_summary, runs, runs.c.id == v.id).where(
            runs.c.schedule.is_not(None)
        )
    if by == "root":
        query = query.join_from(run_summary, root, root.c.id == v.root_id)
    if since is not None:
        query = query.where(v.created_at >= since.astimezone(UTC))
    if agent_name is not None:
        query = query.where(v.agent_name == agent_name)
    reads = backend_for(engine.dialect.name).read_options()
    with engine.connect().execution_options(**reads) as connection:
        rows = connection.execute(query).all()

    grouped: dict[tuple[Any, ...], list[Any]] = {}
    for row in rows:
        grouped.setdefault(tuple(row[: len(keys)]), []).append(row)
    groups = [_group(by, key, found) for key, found in grouped.items()]
    if by == "day":
        groups.sort(key=lambda g: g.day or "")
        _compare(groups, min_rise)
    elif by == "release":
        groups.sort(key=lambda g: (g.agent_name or "", g.first_run_at or datetime.min))
        means = score_means(engine, since=since, agent_name=agent_name)
        for g in groups:
            g.scores = means.get((g.agent_name, g.release), [])
        for name in dict.fromkeys(g.agent_name for g in groups):
            releases = [g for g in groups if g.agent_name == name]
            _compare(releases, min_rise)
            for previous, group in pairwise(releases):
                group.drops = drops(previous.scores, group.scores)
    elif by == "schedule":
        groups.sort(key=lambda g: g.schedule or "")
    else:
        groups.sort(key=lambda g: g.agent_name or "")
    return groups


def _group(by: By, key: tuple[Any, ...], rows: list[Any]) -> Group:
    total = sum(row.n for row in rows)
    counts = sorted(((row.stop_reason or "-", row.n) for row in rows), key=lambda c: (-c[1], c[0]))
    firsts = [row[-1] for row in rows if row[-1] is not None]
    agent = key[0] if by in ("release", "agent", "root") else None  # by root: the root's
    release = key[1] if by == "release" else None
    day = key[0] if by == "day" else None
    schedule = key[0] if by == "schedule" else None
    if by == "release":
        label = f"{agent or '-'} {release or '-'}"
    else:
        label = str((agent if by in ("agent", "root") else day or schedule) or "-")
    return Group(
        label=label,
        agent_name=agent,
        release=release,
        day=day,
        runs=total,
        first_run_at=min(firsts) if firsts else None,
        shares=[Share(reason, n, 100.0 * n / total) for reason, n in counts],
        schedule=schedule,
    )


def _compare(ordered: Sequence[Group], min_rise: float) -> None:
    for previous, group in pairwise(ordered):
        group.previous = previous.label
        before = {s.stop_reason: s.count for s in previous.shares}
        for share in group.shares:
            if share.stop_reason == "final":
                continue  # more answers is not a regression
            was = before.get(share.stop_reason, 0)
            points = share.percent - 100.0 * was / previous.runs
            if points < min_rise:
                continue
            p_value = _p_rise(was, previous.runs, share.count, group.runs)
            if p_value < P_FLAG:
                group.rises.append(
                    Rise(share.stop_reason, share.percent, share.percent - points, points, p_value)
                )


def _p_rise(x1: int, n1: int, x2: int, n2: int) -> float:
    """The chance that the second group gets x2 or more of the x1 + x2 cases when both
    groups share one rate (the upper tail of the hypergeometric distribution)."""
    cases, total = x1 + x2, n1 + n2
    base = _log_comb(total, n2)
    tail = 0.0
    for x in range(x2, min(cases, n2) + 1):
        term = math.exp(_log_comb(cases, x) + _log_comb(total - cases, n2 - x) - base)
        tail += term
        if term < tail * 1e-12:  # past the mode the terms only shrink
            break
    return min(1.0, tail)


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
