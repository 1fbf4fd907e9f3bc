"""Why a model failed, said where a person looks: the stop line of `runner run` ends with the
error's first line, and `show` words a failure that was never retried (a bad key) apart from
one that outlived its retries."""

from __future__ import annotations

import math
from typing import Any

import pytest

from runner import ModelFatal, run_agent
from runner.cli import run_output
from runner.core.budgets import Budgets
from runner.core.result import AgentResult
from runner.core.stop_reasons import StopReason
from tests.unit.scripted_models import TOOLS, Failing
from tests.unit.test_operating_output import NOW, a_row


def no_key(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    raise ModelFatal("openai: Missing credentials.\nSet the OPENAI_API_KEY environment variable.")


def shown_stop(result: AgentResult, **budgets: Any) -> str:
    row = a_row(
        stop_reason=StopReason.MODEL_ERROR,
        error=result.error,
        budgets=Budgets(**budgets).as_dict(),
        steps=0,
    )
    return run_output.render_run(result, row, [], NOW).splitlines()[-1]


def test_the_stop_line_ends_with_the_first_line_of_why(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_agent(no_key, TOOLS, "t")
    run_output.stopped(result, 0.2)
    assert capsys.readouterr().err == (
        f"stopped: model_error after 0 steps, 0 tokens, cost 0, 0.2s (run {result.run_id}): "
        "ModelFatal: openai: Missing credentials.\n"
    )


def test_a_stop_without_an_error_keeps_its_line(capsys: pytest.CaptureFixture[str]) -> None:
    run_output.stopped(AgentResult(StopReason.FINAL, "ok", 1, [], tokens=1, run_id="x"), 1.0)
    assert capsys.readouterr().err.endswith(", 1.0s (run x)\n")


def test_show_says_a_fatal_error_was_not_retried() -> None:
    result = run_agent(no_key, TOOLS, "t", model_retries=2)
    assert shown_stop(result, model_retries=2) == (
        "stopped   model_error: the model failed with an error no retry can fix (not retried)"
    )


def test_show_says_a_failing_context_was_not_retried() -> None:
    def context(transcript: list[dict[str, Any]]) -> list[dict[str, Any]]:
        raise KeyError("content")

    result = run_agent(Failing(0), TOOLS, "t", context=context)
    assert "not retried" in shown_stop(result)


def test_show_says_a_retried_error_kept_failing_after_its_retries() -> None:
    result = run_agent(Failing(math.inf), TOOLS, "t", model_retries=2, retry_backoff=0)
    assert shown_stop(result, model_retries=2) == (
        "stopped   model_error: the model kept failing after its retries (model_retries=2)"
    )
    result = run_agent(Failing(math.inf), TOOLS, "t", model_retries=0, retry_backoff=0)
    assert shown_stop(result, model_retries=0) == (
        "stopped   model_error: the model failed, and no retry was allowed (model_retries=0)"
    )
