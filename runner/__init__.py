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

# For type checkers only (`__all__` is computed, so each name is re-exported as `X as X`);
# tests/unit/test_public_surface.py holds these to `_HOMES`, name for name, home for home.
if TYPE_CHECKING:
    from runner.core.agent import Agent as Agent
    from runner.core.agent_loop import agent_loop as agent_loop
    from runner.core.ask import ask_human as ask_human
    from runner.core.budgets import Budgets as Budgets
    from runner.core.compaction import Compaction as Compaction
    from runner.core.context import cut_observations as cut_observations
    from runner.core.context import last_steps as last_steps
    from runner.core.deltas import Delta as Delta
    from runner.core.result import AgentResult as AgentResult
    from runner.core.scoring import Score as Score
    from runner.core.scoring import ScoredRun as ScoredRun
    from runner.core.scoring import Scorer as Scorer
    from runner.core.scoring import judge as judge
    from runner.core.status import RunStatus as RunStatus
    from runner.core.stop_reasons import StopReason as StopReason
    from runner.core.tools import NOT_APPLIED as NOT_APPLIED
    from runner.core.tools import Tool as Tool
    from runner.core.tools import ToolCall as ToolCall
    from runner.core.tools import current_call as current_call
    from runner.core.tools import tool as tool
    from runner.core.waiting import Answer as Answer
    from runner.core.waiting import Answered as Answered
    from runner.core.waiting import Asks as Asks
    from runner.core.waiting import Wait as Wait
    from runner.errors import AgentLoadError as AgentLoadError
    from runner.errors import AmbiguousRunId as AmbiguousRunId
    from runner.errors import BadAgentReference as BadAgentReference
    from runner.errors import BadScore as BadScore
    from runner.errors import CannotContinue as CannotContinue
    from runner.errors import CannotFork as CannotFork
    from runner.errors import DatabaseCorrupt as DatabaseCorrupt
    from runner.errors import DatabaseRefused as DatabaseRefused
    from runner.errors import DatabaseUnavailable as DatabaseUnavailable
    from runner.errors import KeyMissing as KeyMissing
    from runner.errors import LeaseHeld as LeaseHeld
    from runner.errors import LeaseLost as LeaseLost
    from runner.errors import MissingExtra as MissingExtra
    from runner.errors import ModelFatal as ModelFatal
    from runner.errors import ModelRetryable as ModelRetryable
    from runner.errors import NotWaiting as NotWaiting
    from runner.errors import PayloadError as PayloadError
    from runner.errors import QueryFailed as QueryFailed
    from runner.errors import ReplayMismatch as ReplayMismatch
    from runner.errors import RequestRefused as RequestRefused
    from runner.errors import RunConflict as RunConflict
    from runner.errors import RunnerError as RunnerError
    from runner.errors import RunNotFound as RunNotFound
    from runner.errors import RunWaiting as RunWaiting
    from runner.errors import ScheduleExists as ScheduleExists
    from runner.errors import ScheduleNotFound as ScheduleNotFound
    from runner.errors import SchemaOutOfDate as SchemaOutOfDate
    from runner.errors import SchemaTooNew as SchemaTooNew
    from runner.errors import SubmissionRefused as SubmissionRefused
    from runner.errors import SubmitInterrupted as SubmitInterrupted
    from runner.errors import WrongAnswer as WrongAnswer
    from runner.models import AnthropicMessages as AnthropicMessages
    from runner.models import OpenAIChat as OpenAIChat
    from runner.models import Price as Price
    from runner.service.events import DeltaEvent as DeltaEvent
    from runner.service.events import Event as Event
    from runner.service.run_agent import run_agent as run_agent
    from runner.service.runner import Runner as Runner
    from runner.service.worker import Worker as Worker
    from runner.store.codec import Codec as Codec
    from runner.store.codec import Encoded as Encoded

# The public surface, written once: where each public name lives (`__all__` and `dir()`
# come from here). They are imported on first use (PEP 562), so that `runner --help`
# loads neither the loop nor a provider adapter nor SQLAlchemy, and `run_agent` users
# never load a database library.
_HOMES = {
    "Agent": "runner.core.agent",
    "ask_human": "runner.core.ask",
    "Budgets": "runner.core.budgets",
    "StopReason": "runner.core.stop_reasons",
    "Compaction": "runner.core.compaction",
    "cut_observations": "runner.core.context",
    "last_steps": "runner.core.context",
    "Runner": "runner.service.runner",
    "Worker": "runner.service.worker",
    "Event": "runner.service.events",
    "DeltaEvent": "runner.service.events",
    "Delta": "runner.core.deltas",
    "AgentLoadError": "runner.errors",
    "AmbiguousRunId": "runner.errors",
    "BadAgentReference": "runner.errors",
    "BadScore": "runner.errors",
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
    "KeyMissing": "runner.errors",
    "PayloadError": "runner.errors",
    "Codec": "runner.store.codec",
    "Encoded": "runner.store.codec",
    "ScheduleExists": "runner.errors",
    "ScheduleNotFound": "runner.errors",
    "SchemaOutOfDate": "runner.errors",
    "SchemaTooNew": "runner.errors",
    "SubmissionRefused": "runner.errors",
    "SubmitInterrupted": "runner.errors",
    "WrongAnswer": "runner.errors",
    "AnthropicMessages": "runner.models",
    "OpenAIChat": "runner.models",
    "Price": "runner.models",
    "AgentResult": "runner.core.result",
    "Score": "runner.core.scoring",
    "ScoredRun": "runner.core.scoring",
    "Scorer": "runner.core.scoring",
    "judge": "runner.core.scoring",
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
__all__ = sorted(_HOMES)


def __dir__() -> list[str]:
    return list(__all__)
