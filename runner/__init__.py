"""runner: a durable, resumable runner for LLM agent loops.

The map (the README's "Where things live" says more): the step machine (`loop`, `journal`,
`actions`, `tools`, `calls`, `budgets`, `status`, `clock`) knows no SQL and no CLI; the store
(`schema`, `backend`, `database`, `store`, `leases`, `fencing`, `sqljournal`, `history`)
holds all the SQL, with every SQLite/PostgreSQL difference in `backend`; the service
(`durable.Runner`, `agent`, `worker`) drives the one loop on a durable journal; the faces
(`cli`) parse, call the service and print through `cli.output`; `models` adapts providers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runner.agent import Agent
from runner.ask import ask_human
from runner.budgets import Budgets, StopReason
from runner.context import cut_observations, last_steps
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

if TYPE_CHECKING:
    from runner.durable import Runner


def __getattr__(name: str) -> Any:
    # The durable Runner pulls in SQLAlchemy: import it only when asked for, so that
    # `run_agent` users (and the loop) never load a database library.
    if name == "Runner":
        from runner.durable import Runner

        return Runner
    raise AttributeError(f"module 'runner' has no attribute {name!r}")


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
