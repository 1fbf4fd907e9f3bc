"""How the loop treats a model's own verdict on its failure: stop now, or retry after a wait."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from runner import ModelFatal, ModelRetryable, run_agent
from runner.core.clock import SYSTEM

Transcript = list[dict[str, Any]]
ANSWER = {"type": "final", "content": "done"}


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """The loop's waits between retries, recorded instead of slept."""
    taken: list[float] = []
    monkeypatch.setattr(SYSTEM, "sleep", taken.append)  # every default clock sleeps here
    yield taken


def failing(*errors: Exception) -> Any:
    """A model that raises `errors` in turn, then answers; it counts its calls."""
    queue = list(errors)

    def model(transcript: Transcript) -> dict[str, Any]:
        model.calls += 1  # type: ignore[attr-defined]
        if queue:
            raise queue.pop(0)
        return ANSWER

    model.calls = 0  # type: ignore[attr-defined]
    return model


def test_a_fatal_error_stops_at_once_without_retrying(waits: list[float]) -> None:
    model = failing(ModelFatal("bad key"), ModelFatal("bad key"))
    result = run_agent(model, {}, "task", model_retries=5)
    assert result.stop_reason == "model_error"
    assert result.error == "ModelFatal: bad key"
    assert model.calls == 1
    assert waits == []


def test_retry_after_longer_than_the_backoff_is_waited_for(waits: list[float]) -> None:
    model = failing(
        ModelRetryable("slow down", retry_after=7), ModelRetryable("again", retry_after=3)
    )
    result = run_agent(model, {}, "task", model_retries=2, retry_backoff=0.5)
    assert (result.stop_reason, result.output, model.calls) == ("final", "done", 3)
    assert waits == [7, 3]


def test_the_backoff_wins_when_it_is_longer_than_retry_after(waits: list[float]) -> None:
    model = failing(ModelRetryable("busy", retry_after=0.1), ModelRetryable("busy"))
    result = run_agent(model, {}, "task", model_retries=2, retry_backoff=0.5)
    assert result.stop_reason == "final"
    assert waits == [0.5, 1.0]


def test_ordinary_exceptions_keep_the_plain_backoff(waits: list[float]) -> None:
    model = failing(RuntimeError("x"), RuntimeError("y"), RuntimeError("z"))
    result = run_agent(model, {}, "task", model_retries=2, retry_backoff=0.25)
    assert result.stop_reason == "model_error"
    assert result.error == "RuntimeError: z"
    assert waits == [0.25, 0.5]


def test_a_retry_after_past_the_deadline_stops_for_time_without_waiting(
    waits: list[float],
) -> None:
    model = failing(ModelRetryable("quota", retry_after=3600))
    result = run_agent(model, {}, "task", max_seconds=60, model_retries=3)
    assert result.stop_reason == "time_budget"
    assert model.calls == 1
    assert waits == []


def test_the_last_retryable_failure_is_the_runs_error(waits: list[float]) -> None:
    model = failing(*[ModelRetryable("HTTP 500", retry_after=None)] * 3)
    result = run_agent(model, {}, "task", model_retries=2, retry_backoff=0)
    assert (result.stop_reason, result.error) == ("model_error", "ModelRetryable: HTTP 500")
    assert model.calls == 3
