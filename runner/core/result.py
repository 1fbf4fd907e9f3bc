"""The result every run returns, in memory or durable."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runner.core.status import RunStatus
from runner.core.stop_reasons import StopReason
from runner.core.waiting import Wait


@dataclass
class AgentResult:
    """How a run ended. The first four fields are seed 000's, in its order."""

    stop_reason: StopReason | None  # None only for a durable run that has not stopped yet
    output: Any
    steps: int
    transcript: list[dict[str, Any]] = field(default_factory=list)
    tokens: int = 0
    cost: float = 0.0
    error: str | None = None  # the model's last exception text on a `model_error` stop
    wrapped_up: bool = False  # the output came from the opt-in last call after a budget stop
    run_id: str | None = None
    status: RunStatus = RunStatus.FINISHED  # a durable run not stopped yet: queued/running/waiting
    waiting: Wait | None = None  # what a `waiting` run waits for: the call and its question
    # Every call it waits for (a step of several calls may wait for several), `waiting` first.
    waits: list[Wait] = field(default_factory=list)
