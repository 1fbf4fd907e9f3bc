"""A worker's line for a run that stopped says why the model failed, as `runner run` does."""

from __future__ import annotations

import logging

import pytest

from runner.service.worker import Worker

from .failing_agents import NO_KEY
from .store_support import memory_runner


def test_the_finished_line_ends_with_the_first_line_of_the_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runner, store, _ = memory_runner()
    runner.submit(NO_KEY, "hi", id="nokey")
    with caplog.at_level(logging.INFO, logger="runner.worker"):
        Worker(store=store, once=True, poll=0.01).serve()
    said = [r.getMessage() for r in caplog.records if "finished:" in r.getMessage()]
    assert said == [
        "run nokey finished: model_error after 0 steps: ModelFatal: openai: Missing credentials."
    ]
