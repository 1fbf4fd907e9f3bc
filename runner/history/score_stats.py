"""Scores per release (`runner stats --by release`): each score's mean with its 95% interval,
and a drop against the agent's previous release flagged when chance explains it poorly.

Read from the `run_scores` view of migration 0020, aggregated in SQL (count, mean, mean of
squares): the history is never read row by row. A drop is flagged when the mean fell and a
one-sided Welch's t-test (unequal variances, Welch-Satterthwaite degrees of freedom) gives
p < 0.05: the chance that two groups with one true mean differ this much the wrong way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Engine, func, select

from runner.history.student_t import t_cdf, t_quantile
from runner.history.views import run_scores
from runner.sql import scores
from runner.sql.backend import backend_for
from runner.store.scores import ScoreRow

# A drop is flagged only when chance alone would produce it less than 5% of the time.
P_FLAG = 0.05
CONFIDENCE = 0.95


@dataclass(frozen=True)
class ScoreMean:
    """One score of one release: its runs scored, mean and 95% interval (None for one run)."""

    name: str
    runs: int
    mean: float
    low: float | None
    high: float | None
    variance: float  # the sample variance (0 for one run)


@dataclass(frozen=True)
class Drop:
    """A score whose mean fell against the agent's previous release, beyond chance."""

    name: str
    mean: float
    previous_mean: float
    p_value: float  # one-sided Welch's t-test


def score_means(
    engine: Engine, *, since: datetime | None = None, agent_name: str | None = None
) -> dict[tuple[str | None, str | None], list[ScoreMean]]:
    """Each (agent name, release)'s scores by name, from the runs created since `since`."""
    v = run_scores.c
    query = select(
        v.agent_name,
        v.release,
        v.name,
        func.count().label("n"),
        func.avg(v.value).label("mean"),
        func.avg(v.value * v.value).label("squares"),
    ).group_by(v.agent_name, v.release, v.name)
    if since is not None:
        query = query.where(v.run_created_at >= since.astimezone(UTC))
    if agent_name is not None:
        query = query.where(v.agent_name == agent_name)
    reads = backend_for(engine.dialect.name).read_options()
    with engine.connect().execution_options(**reads) as connection:
        rows = connection.execute(query.order_by(v.name)).all()
    found: dict[tuple[str | None, str | None], list[ScoreMean]] = {}
    for row in rows:
        found.setdefault((row.agent_name, row.release), []).append(
            mean_of(row.name, int(row.n), float(row.mean), float(row.squares))
        )
    return found


def scores_of_run(engine: Engine, run_id: str) -> list[ScoreRow]:
    """The run's scores by name (the page's run view)."""
    return scores.run_scores(engine, run_id)


def mean_of(name: str, n: int, mean: float, squares: float) -> ScoreMean:
    """A score's mean and interval from its count, mean and mean of squares."""
    variance = max(squares - mean * mean, 0.0) * n / (n - 1) if n > 1 else 0.0
    if n < 2:
        return ScoreMean(name, n, mean, None, None, 0.0)
    half = t_quantile(0.5 + CONFIDENCE / 2, n - 1) * math.sqrt(variance / n)
    return ScoreMean(name, n, mean, mean - half, mean + half, variance)


def drops(previous: Sequence[ScoreMean], current: Sequence[ScoreMean]) -> list[Drop]:
    """The scores of `current` whose mean fell from `previous`'s beyond chance."""
    before = {score.name: score for score in previous}
    found = []
    for score in current:
        was = before.get(score.name)
        if was is None or score.mean >= was.mean:
            continue
        p_value = p_drop(was, score)
        if p_value < P_FLAG:
            found.append(Drop(score.name, score.mean, was.mean, p_value))
    return found


def p_drop(was: ScoreMean, now: ScoreMean) -> float:
    """One-sided Welch's t-test: the chance of a fall this large if both share one mean."""
    if was.runs < 2 or now.runs < 2:
        return 1.0  # one run says nothing of the spread
    a, b = was.variance / was.runs, now.variance / now.runs
    if a + b == 0.0:
        return 0.0  # no spread at all, and the means differ
    t = (now.mean - was.mean) / math.sqrt(a + b)
    df = (a + b) ** 2 / (a * a / (was.runs - 1) + b * b / (now.runs - 1))
    return t_cdf(t, df)
