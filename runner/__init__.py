"""runner: a durable, resumable runner for LLM agent loops.

The map, one package a layer, each importing only those below it (`tests/unit/test_layers.py`
holds every import to what each package's docstring allows): `core` (the step machine: no
SQL, no CLI, no provider), `models` (provider adapters) and `tracing` (OpenTelemetry), `store`
(all the SQL, both dialects), `history` (the read side: `runner sql`, stats, export, prune),
`service` (`run_agent`, the `Runner`, the worker and the operations on runs), and the faces
`cli` and `ui`. `errors`, `defaults` and `lazy` are leaves every layer may use. This module
is the public surface: every name below, loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner.lazy import exports

if TYPE_CHECKING:
    from runner.core.agent import Agent
    from runner.core.agent_loop import agent_loop
    from runner.core.ask import ask_human
    from runner.core.budgets import Budgets
    from runner.core.context import cut_observations, last_steps
    from runner.core.result import AgentResult
    from runner.core.status import RunStatus
    from runner.core.stop_reasons import StopReason
    from runner.core.tools import NOT_APPLIED, Tool, ToolCall, current_call, tool
    from runner.core.waiting import Answer, Answered, Asks, Wait
    from runner.errors import (
        AgentLoadError,
        AmbiguousRunId,
        BadAgentReference,
        CannotContinue,
        CannotFork,
        DatabaseCorrupt,
        DatabaseRefused,
        DatabaseUnavailable,
        LeaseHeld,
        LeaseLost,
        MissingExtra,
        ModelFatal,
        ModelRetryable,
        NotWaiting,
        QueryFailed,
        ReplayMismatch,
        RequestRefused,
        RunConflict,
        RunnerError,
        RunNotFound,
        RunWaiting,
        SchemaOutOfDate,
        SchemaTooNew,
        SubmissionRefused,
        SubmitInterrupted,
        WrongAnswer,
    )
    from runner.models import AnthropicMessages, OpenAIChat, Price
    from runner.service.run_agent import run_agent
    from runner.service.runner import Runner

# Where each public name lives. They are imported on first use (PEP 562), so that
# `runner --help` loads neither the loop nor a provider adapter nor SQLAlchemy, and
# `run_agent` users never load a database library.
_HOMES = {
    "Agent": "runner.core.agent",
    "ask_human": "runner.core.ask",
    "Budgets": "runner.core.budgets",
    "StopReason": "runner.core.stop_reasons",
    "cut_observations": "runner.core.context",
    "last_steps": "runner.core.context",
    "Runner": "runner.service.runner",
    "AgentLoadError": "runner.errors",
    "AmbiguousRunId": "runner.errors",
    "BadAgentReference": "runner.errors",
    "CannotContinue": "runner.errors",
    "CannotFork": "runner.errors",
    "DatabaseCorrupt": "runner.errors",
    "DatabaseRefused": "runner.errors",
    "DatabaseUnavailable": "runner.errors",
    "LeaseHeld": "runner.errors",
    "LeaseLost": "runner.errors",
    "MissingExtra": "runner.errors",
    "ModelFatal": "runner.errors",
    "ModelRetryable": "runner.errors",
    "NotWaiting": "runner.errors",
    "QueryFailed": "runner.errors",
    "ReplayMismatch": "runner.errors",
    "RequestRefused": "runner.errors",
    "RunConflict": "runner.errors",
    "RunNotFound": "runner.errors",
    "RunWaiting": "runner.errors",
    "RunnerError": "runner.errors",
    "SchemaOutOfDate": "runner.errors",
    "SchemaTooNew": "runner.errors",
    "SubmissionRefused": "runner.errors",
    "SubmitInterrupted": "runner.errors",
    "WrongAnswer": "runner.errors",
    "AnthropicMessages": "runner.models",
    "OpenAIChat": "runner.models",
    "Price": "runner.models",
    "AgentResult": "runner.core.result",
    "run_agent": "runner.service.run_agent",
    "agent_loop": "runner.core.agent_loop",
    "RunStatus": "runner.core.status",
    "NOT_APPLIED": "runner.core.tools",
    "Tool": "runner.core.tools",
    "ToolCall": "runner.core.tools",
    "current_call": "runner.core.tools",
    "tool": "runner.core.tools",
    "Answer": "runner.core.waiting",
    "Answered": "runner.core.waiting",
    "Asks": "runner.core.waiting",
    "Wait": "runner.core.waiting",
}


__getattr__ = exports(__name__, _HOMES)


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "NOT_APPLIED",
    "Agent",
    "AgentLoadError",
    "AgentResult",
    "AmbiguousRunId",
    "Answer",
    "Answered",
    "AnthropicMessages",
    "Asks",
    "BadAgentReference",
    "Budgets",
    "CannotContinue",
    "CannotFork",
    "DatabaseCorrupt",
    "DatabaseRefused",
    "DatabaseUnavailable",
    "LeaseHeld",
    "LeaseLost",
    "MissingExtra",
    "ModelFatal",
    "ModelRetryable",
    "NotWaiting",
    "OpenAIChat",
    "Price",
    "QueryFailed",
    "ReplayMismatch",
    "RequestRefused",
    "RunConflict",
    "RunNotFound",
    "RunStatus",
    "RunWaiting",
    "Runner",
    "RunnerError",
    "SchemaOutOfDate",
    "SchemaTooNew",
    "StopReason",
    "SubmissionRefused",
    "SubmitInterrupted",
    "Tool",
    "ToolCall",
    "Wait",
    "WrongAnswer",
    "agent_loop",
    "ask_human",
    "current_call",
    "cut_observations",
    "last_steps",
    "run_agent",
    "tool",
]
