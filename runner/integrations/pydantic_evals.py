"""Pydantic AI's evaluators (`pydantic-evals`) as scorers of runs: `scorer(evaluator)`.

    from pydantic_evals.evaluators import Contains
    from runner.integrations.pydantic_evals import scorer

    agent = Agent(model, tools, scorers=[scorer(Contains("refund"))])

The evaluator is shown the run as an `EvaluatorContext`: `inputs` the task, `output` the
answer, `expected_output` what `expected(run)` gives (None without it), `metadata` the
run's agent, release and stop reason, `metrics` its steps, tokens and cost, `duration` 0
(a run's time is in the history, not here); a span tree is not recorded. What it returns
becomes the score: a bool (1 or 0), a number, or an `EvaluationReason` (its reason the
note); an evaluator that returns several named results is scored by the one `key` names.
pydantic-evals (`pip install "runner[pydantic-evals]"`) is imported when this module is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic_evals.evaluators import EvaluationReason, Evaluator, EvaluatorContext
from pydantic_evals.otel._errors import SpanTreeRecordingError

from runner.core.scoring import Score, ScoredRun, Scorer, check_value, cut_note
from runner.errors import BadScore


def scorer(
    evaluator: Evaluator[Any, Any, Any],
    *,
    name: str | None = None,
    key: str | None = None,
    expected: Callable[[ScoredRun], Any] | None = None,
) -> Scorer:
    """A scorer that runs a pydantic-evals `evaluator` on a finished run.

    `name`: the score's name (default the evaluator's evaluation name, e.g. `Contains`);
    `key`: which of several named results to keep; `expected`: the expected output of a run,
    for evaluators that compare with one (`EqualsExpected`).
    """

    def evaluate(run: ScoredRun) -> Score:
        context: EvaluatorContext[Any, Any, Any] = EvaluatorContext(
            name=run.id,
            inputs=run.task,
            metadata={
                "agent_name": run.agent_name,
                "release": run.release,
                "stop_reason": run.stop_reason,
            },
            expected_output=None if expected is None else expected(run),
            output=run.output,
            duration=0.0,
            _span_tree=SpanTreeRecordingError("runner does not record a run's spans here"),
            attributes={},
            metrics={"steps": run.steps, "tokens": run.tokens, "cost": run.cost},
        )
        return _score(evaluator.evaluate_sync(context), key)

    return Scorer(name or evaluator.get_default_evaluation_name(), evaluate)


def _score(result: Any, key: str | None) -> Score:
    if isinstance(result, Mapping):
        if key is None and len(result) == 1:
            key = next(iter(result))
        if key not in result:
            raise BadScore(
                f"the evaluator returned {', '.join(map(str, result))}: name one with key="
            )
        result = result[key]
    if isinstance(result, EvaluationReason):
        return Score(check_value(result.value), cut_note(result.reason))
    return Score(check_value(result))
