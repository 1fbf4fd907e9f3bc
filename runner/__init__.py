"""runner: a durable, resumable runner for LLM agent loops.

The map (the README's "Where things live" says more): the step machine (`loop`, `journal`,
`actions`, `tools`, `calls`, `budgets`, `status`, `clock`) knows no SQL and no CLI; the store
(`schema`, `backend`, `database`, `store`, `rows`, `reads`, `direct`, `leases`, `fencing`,
`sqljournal`, `history`) holds all the SQL, with every SQLite/PostgreSQL difference in
`backend` (and in `reads`, how the two drivers bind and give values back); the service
(`durable.Runner`, `listing`, `overview`, `agent`, `worker`) drives the one loop on a durable
journal and says what `list` and `show` show; the faces (`cli`) parse, call the service and print
through `cli.output`; `models` adapts providers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner.lazy import exports

if TYPE_CHECKING:
    from runner.agent import Agent
    from runner.ask import ask_human
    from runner.budgets import Budgets, StopReason
    from runner.context import cut_observations, last_steps
    from runner.durable import Runner
    from runner.errors import (
        AgentLoadError,
        AmbiguousRunId,
        BadAgentReference,
        CannotContinue,
        CannotFork,
        DatabaseCorrupt,
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
    from runner.result import AgentResult
    from runner.run import run_agent
    from runner.scripted import agent_loop
    from runner.status import RunStatus
    from runner.tools import NOT_APPLIED, Tool, ToolCall, current_call, tool
    from runner.waiting import Answer, Answered, Asks, Wait

# Where each public name lives. They are imported on first use (PEP 562), so that
# `runner --help` loads neither the loop nor a provider adapter nor SQLAlchemy, and
# `run_agent` users never load a database library.
_HOMES = {
    "Agent": "runner.agent",
    "ask_human": "runner.ask",
    "Budgets": "runner.budgets",
    "StopReason": "runner.budgets",
    "cut_observations": "runner.context",
    "last_steps": "runner.context",
    "Runner": "runner.durable",
    "AgentLoadError": "runner.errors",
    "AmbiguousRunId": "runner.errors",
    "BadAgentReference": "runner.errors",
    "CannotContinue": "runner.errors",
    "CannotFork": "runner.errors",
    "DatabaseCorrupt": "runner.errors",
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
    "AgentResult": "runner.result",
    "run_agent": "runner.run",
    "agent_loop": "runner.scripted",
    "RunStatus": "runner.status",
    "NOT_APPLIED": "runner.tools",
    "Tool": "runner.tools",
    "ToolCall": "runner.tools",
    "current_call": "runner.tools",
    "tool": "runner.tools",
    "Answer": "runner.waiting",
    "Answered": "runner.waiting",
    "Asks": "runner.waiting",
    "Wait": "runner.waiting",
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
