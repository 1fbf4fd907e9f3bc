"""runner: a durable, resumable runner for LLM agent loops."""

from __future__ import annotations

from runner.budgets import Budgets, StopReason
from runner.errors import (
    AgentLoadError,
    AmbiguousRunId,
    DatabaseUnavailable,
    LeaseHeld,
    LeaseLost,
    ReplayMismatch,
    RunnerError,
    RunNotFound,
    SchemaOutOfDate,
)
from runner.result import AgentResult
from runner.run import run_agent
from runner.scripted import agent_loop
from runner.tools import NOT_APPLIED, Tool, ToolCall, current_call, tool

__all__ = [
    "NOT_APPLIED",
    "AgentLoadError",
    "AgentResult",
    "AmbiguousRunId",
    "Budgets",
    "DatabaseUnavailable",
    "LeaseHeld",
    "LeaseLost",
    "ReplayMismatch",
    "RunNotFound",
    "RunnerError",
    "SchemaOutOfDate",
    "StopReason",
    "Tool",
    "ToolCall",
    "agent_loop",
    "current_call",
    "run_agent",
    "tool",
]
