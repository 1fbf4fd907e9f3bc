"""The agent of tests/acceptance/test_scores.py, loaded by path in `runner` processes.

`scored` answers at once; its scorer `graded` appends the run's id to `scored.log` in the
ledger folder (RUNNER_TEST_LEDGER) each time it starts, outside runner's database: how many
times the scorer really ran. It scores 0.7.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from runner import Agent, ScoredRun


def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "final", "content": "done"}


def graded(run: ScoredRun) -> float:
    with (Path(os.environ["RUNNER_TEST_LEDGER"]) / "scored.log").open("a") as log:
        log.write(run.id + "\n")
    return 0.7


scored = Agent(model, name="scored", release="1", scorers=[graded])
