"""Scorers and the statistics of scores, with no database: what a scorer may return, a
model-judged scorer reading its grade and drawing from its limit, Pydantic AI evaluators as
scorers, a worker on the in-memory store scoring each ended run once, and Student's t
against SciPy's values."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_evals.evaluators import Contains, EqualsExpected, EvaluationReason, Evaluator

from runner import Agent, BadScore, Runner, Score, ScoredRun, judge
from runner.core.limits import Reservation
from runner.core.scoring import as_score, as_scorers
from runner.history.score_stats import drops, mean_of
from runner.history.student_t import t_cdf, t_quantile
from runner.integrations.pydantic_evals import scorer
from runner.service.worker import Worker
from runner.testing import FunctionModel, InMemoryStore, final

RUN = ScoredRun(
    "r1", "Can I return shoes?", "Yes, within 30 days.", "final", "shop", "2", 2, 90, 0.0
)


def test_a_scorer_returns_a_number_a_bool_or_a_score() -> None:
    assert as_score(True) == Score(1.0) and as_score(3) == Score(3.0)
    assert as_score(Score(0.5, "why")) == Score(0.5, "why")
    for bad in (float("nan"), "good", None):
        with pytest.raises(BadScore):
            as_score(bad)
    with pytest.raises(ValueError, match="two scorers are named"):
        as_scorers([judge(FunctionModel(lambda t: final("1")), "x"), judge(len, "y")])


class Recorded:
    """Limits that record what the judge reserved and settled."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def reserve(self, limit: str, tokens: Any) -> Reservation:
        estimate = tokens() if callable(tokens) else tokens
        self.seen.append(("reserve", limit, estimate > 0))
        return Reservation(limit, "id-1", estimate)

    def settle(self, reservation: Reservation, tokens: int) -> None:
        self.seen.append(("settle", reservation.limit, tokens))

    def back_off(self, limit: str, seconds: float) -> None:
        raise AssertionError("not asked")


def test_a_judge_reads_its_grade_and_draws_from_its_limit() -> None:
    shown: list[str] = []

    def grader(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        shown.append(transcript[0]["content"])
        return {"type": "final", "content": "0.75\nclear enough", "usage": {"tokens": 42}}

    limits = Recorded()
    graded = judge(grader, "Is it right?", name="right", limit="judge")
    run = ScoredRun(**{**RUN.__dict__, "limits": limits})
    assert graded(run) == Score(0.75, "clear enough")
    assert "Is it right?" in shown[0] and "Yes, within 30 days." in shown[0]
    assert limits.seen == [("reserve", "judge", True), ("settle", "judge", 42)]
    with pytest.raises(BadScore, match="no grade"):
        judge(lambda t: final("I cannot say"), "x")(RUN)


class Twofold(Evaluator[Any, Any, Any]):
    def evaluate(self, ctx: Any) -> dict[str, Any]:
        return {"short": len(ctx.output) < 40, "why": EvaluationReason(0.25, "because")}


def test_pydantic_evals_evaluators_score_runs() -> None:
    assert scorer(Contains("30 days"))(RUN) == Score(1.0)
    assert scorer(Contains("30 days")).name == "Contains"
    assert scorer(EqualsExpected(), expected=lambda run: "no")(RUN) == Score(0.0)
    assert scorer(Twofold(), key="why", name="twofold")(RUN) == Score(0.25, "because")
    with pytest.raises(BadScore, match="name one with key="):
        scorer(Twofold())(RUN)


CALLS: list[str] = []


def counted(run: ScoredRun) -> float:
    CALLS.append(run.id)
    return 1.0


AGENT = Agent(FunctionModel(lambda t: final("ok")), name="a", scorers=[counted])


def test_a_worker_scores_each_ended_run_once() -> None:
    store = InMemoryStore()
    with Runner(store=store) as runner:
        for n in range(3):
            runner.submit(AGENT, "task", id=f"w{n}")
        Worker(store=store, once=True, concurrency=2).serve()
        Worker(store=store, once=True).serve()  # nothing left: nothing runs twice
        assert sorted(CALLS) == ["w0", "w1", "w2"]
        assert [(s.name, s.value) for s in runner.scores("w1")] == [("counted", 1.0)]


def test_students_t_matches_scipy() -> None:
    # scipy.stats.t.cdf(2.0, 5), t.cdf(-1.5, 30.5), t.ppf(0.975, 9), t.ppf(0.975, 1)
    assert t_cdf(2.0, 5) == pytest.approx(0.9490302605850709, abs=1e-12)
    assert t_cdf(-1.5, 30.5) == pytest.approx(0.07194789011708, abs=1e-9)
    assert t_quantile(0.975, 9) == pytest.approx(2.2621571627409915, abs=1e-7)
    assert t_quantile(0.975, 1) == pytest.approx(12.706204736174698, abs=1e-6)


def test_a_drop_is_flagged_beyond_chance_only() -> None:
    before = mean_of("q", 30, 0.8, 0.8**2 + 0.01)  # sd 0.1
    assert [d.name for d in drops([before], [mean_of("q", 30, 0.7, 0.7**2 + 0.01)])] == ["q"]
    assert drops([before], [mean_of("q", 30, 0.78, 0.78**2 + 0.01)]) == []  # noise
    assert drops([before], [mean_of("q", 1, 0.0, 0.0)]) == []  # one run says nothing
