"""`run_agent`: seed 000's contract, on the one step machine with an in-memory journal."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from runner.core.agent import bind_tools
from runner.core.budgets import Budgets
from runner.core.clock import SYSTEM, Clock
from runner.core.context import Context
from runner.core.journal import MemoryJournal
from runner.core.loop import drive
from runner.core.model_call import Cancel, Model
from runner.core.result import AgentResult
from runner.core.tools import as_tools
from runner.defaults import DEFAULT_MODEL_TIMEOUT
from runner.tracing.run_spans import run_trace


def run_agent(
    model: Model,
    tools: Mapping[str, Callable[..., Any]],
    task: str,
    max_steps: int = 8,
    max_tokens: int | None = 10_000,
    max_consecutive_errors: int | None = 2,
    max_repeats: int | None = 2,
    *,
    max_seconds: float | None = None,
    max_cost: float | None = None,
    cancel: Cancel | None = None,
    model_retries: int = 2,
    retry_backoff: float = 0.5,
    tool_timeout: float | None = None,
    model_timeout: float | None = DEFAULT_MODEL_TIMEOUT,
    wrap_up: bool = False,
    max_parallel_tools: int = 8,
    clock: Clock = SYSTEM,
    context: Context | None = None,
) -> AgentResult:
    """Run an agent loop in memory until it stops, and say why it stopped.

    `model(transcript)` returns `{"type": "final", "content": ...}` or
    `{"type": "tool", "name": ..., "args": {...}}`, optionally with `usage` (an int of tokens,
    or a mapping with `tokens` and `cost`). Tool exceptions and malformed model output become
    error observations. Budgets that are `None` are unlimited; invalid ones raise ValueError
    before anything runs. `clock` measures `max_seconds` and paces the model's retries.
    `context` maps the transcript to what the model is sent (see `runner.context`); the
    result's transcript stays whole. A model may also ask for several calls at once,
    `{"type": "tool", "calls": [{"name": ..., "args": {...}, "id": ...}, ...]}`: they run
    together, at most `max_parallel_tools` at a time (1: one after another, in order).
    One model call may take `model_timeout` seconds in all (None: no limit); past it the
    call is given up and retried like any failure, so a model that never answers cannot
    hold the run.
    """
    budgets = Budgets(
        max_steps=max_steps,
        max_tokens=max_tokens,
        max_consecutive_errors=max_consecutive_errors,
        max_repeats=max_repeats,
        max_seconds=max_seconds,
        max_cost=max_cost,
        model_retries=model_retries,
        retry_backoff=retry_backoff,
        tool_timeout=tool_timeout,
        model_timeout=model_timeout,
        wrap_up=wrap_up,
        max_parallel_tools=max_parallel_tools,
    )
    if not isinstance(task, str):
        raise ValueError(f"task must be a string, not {type(task).__name__}")
    deadline = None if max_seconds is None else clock.time() + max_seconds
    tool_set = as_tools(tools)
    journal = MemoryJournal()
    bound = bind_tools(model, tool_set)
    with run_trace(journal.run_id, model=bound) as spans:
        result = drive(
            bound,
            tool_set,
            task,
            budgets,
            journal,
            deadline=deadline,
            cancel=cancel,
            clock=clock,
            context=context,
            spans=spans,
            own_thread=True,
        )
        spans.finished(result)
    return result
