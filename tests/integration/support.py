"""Helpers shared by the integration tests: models, tools, a simulated crash, raw table reads."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine, text, update

from runner import Runner
from runner.core.budgets import Budgets
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind
from runner.core.result import AgentResult
from runner.sql import fencing, leases
from runner.sql import runs as store
from runner.sql.schema import runs
from runner.store.owner import owner_name

Transcript = list[dict[str, Any]]
Model = Callable[[Transcript], Any]

# A process of this host that does not exist: its pid is unused and its start time wrong,
# so `runner.owner.is_dead` calls its lease free at once, whatever the expiry says.
DEAD_OWNER = owner_name(999999, "1")


class Crash(BaseException):
    """Stands in for SIGKILL: the loop catches Exception, so this escapes the whole run."""


def observations(transcript: Transcript) -> Transcript:
    return [m for m in transcript if m["role"] == "tool"]


def solver(transcript: Transcript) -> dict[str, Any]:
    """Seed 000's solver: add 2 and 3, then answer with the observation."""
    seen = observations(transcript)
    if not seen:
        return {"type": "tool", "name": "add", "args": {"b": 3, "a": 2}}
    return {"type": "final", "content": seen[-1]["content"]}


def wander(usage: Any = None) -> Model:
    """A model that never repeats itself: it searches for the transcript's length."""

    def model(transcript: Transcript) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "tool", "name": "search", "args": {"q": len(transcript)}}
        if usage is not None:
            out["usage"] = usage
        return out

    return model


def search(q: object) -> str:
    return f"results for {q}"


def add(a: float, b: float) -> float:
    return a + b


def div(a: float, b: float) -> float:
    return a / b


TOOLS: dict[str, Callable[..., Any]] = {"add": add, "div": div, "search": search}


def failing_division(transcript: Transcript) -> dict[str, Any]:
    return {"type": "tool", "name": "div", "args": {"a": len(transcript), "b": 0}}


def same_search(transcript: Transcript) -> dict[str, Any]:
    return {"type": "tool", "name": "search", "args": {"q": "x"}}


def recovers(transcript: Transcript) -> dict[str, Any]:
    seen = observations(transcript)
    if not seen:
        return {"type": "tool", "name": "nope", "args": {}}
    if seen[-1]["is_error"]:
        return {"type": "tool", "name": "div", "args": {"a": 6, "b": 3}}
    return {"type": "final", "content": seen[-1]["content"]}


def malformed_then_json(transcript: Transcript) -> Any:
    """Two malformed outputs (shown back as errors), then an answer that is not a string."""
    usage = {"tokens": 7, "cost": 0.25}
    if len(transcript) == 1:
        return "not a dict"
    if len(transcript) == 3:
        return {"type": "tool", "name": "search", "args": [1], "usage": usage}
    return {"type": "final", "content": {"answer": [1, 2.5], "ok": True}, "usage": usage}


def wraps_up(transcript: Transcript) -> dict[str, Any]:
    last = transcript[-1]
    if last["role"] == "user" and "budget is spent" in str(last["content"]):
        return {"type": "final", "content": "best guess", "usage": 3}
    return {"type": "tool", "name": "search", "args": {"q": len(transcript)}, "usage": 5}


def crashes_on_call(n: int, model: Callable[[Transcript], Any]) -> Callable[[Transcript], Any]:
    """`model`, except that its n-th call kills the run (as SIGKILL would, mid model call)."""
    calls = 0

    def wrapped(transcript: Transcript) -> Any:
        nonlocal calls
        calls += 1
        if calls == n:
            raise Crash
        return model(transcript)

    return wrapped


# -- results ----------------------------------------------------------------------------------


def fields(result: AgentResult) -> dict[str, Any]:
    """What must agree between run_agent and a durable run (not the run id)."""
    return {
        "stop_reason": result.stop_reason,
        "output": result.output,
        "steps": result.steps,
        "transcript": result.transcript,
        "tokens": result.tokens,
        "cost": result.cost,
        "error": result.error,
        "wrapped_up": result.wrapped_up,
    }


# -- the database, read and bent directly ---------------------------------------------------


def entry_rows(engine: Engine, run_id: str) -> list[dict[str, Any]]:
    """The run's rows of the entries table, as plain dicts in seq order."""
    with engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT seq, step, kind, tool, idempotency_key, attempt, is_error, content,"
                " lease_epoch FROM entries WHERE run_id = :run_id ORDER BY seq"
            ),
            {"run_id": run_id},
        )
        return [dict(row._mapping) for row in rows]


def count_entries(engine: Engine, run_id: str | None = None) -> int:
    query = "SELECT count(*) FROM entries"
    params: dict[str, Any] = {}
    if run_id is not None:
        query += " WHERE run_id = :run_id"
        params["run_id"] = run_id
    with engine.connect() as connection:
        return int(connection.execute(text(query), params).scalar_one())


def count_runs(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.execute(text("SELECT count(*) FROM runs")).scalar_one())


def crash(engine: Engine, run_id: str) -> None:
    """Make the run's current holder look like a process that died: its lease is free."""
    with engine.begin() as connection:
        connection.execute(update(runs).where(runs.c.id == run_id).values(lease_owner=DEAD_OWNER))


# -- a journal left by a worker that died -----------------------------------------------------


def task_entry(task: str) -> Entry:
    return Entry(EntryKind.TASK, 0, Counters(), content=task)


def tool_action(
    run_id: str, step: int, tool: str, args: dict[str, Any], before: Counters, tokens: int = 0
) -> Entry:
    """The action row the loop writes for a tool call, committed before the tool runs."""
    counters = replace(before, steps=step, tokens=before.tokens + tokens)
    return Entry(
        EntryKind.ACTION,
        step,
        counters,
        content=None,
        action_type="tool",
        tool=tool,
        args=args,
        idempotency_key=f"{run_id}-{step}",
        tokens=tokens,
    )


def observation(action: Entry, content: str, *, is_error: bool = False) -> Entry:
    streak = action.counters.error_streak + 1 if is_error else 0
    return Entry(
        EntryKind.OBSERVATION,
        action.step,
        replace(action.counters, error_streak=streak),
        content=content,
        tool=action.tool,
        is_error=is_error,
        idempotency_key=action.idempotency_key,
    )


def died_with(
    engine: Engine,
    run_id: str,
    task: str,
    entries: Sequence[Entry],
    budgets: Budgets | None = None,
    *,
    agent: str | None = None,
) -> int:
    """A run whose worker wrote `entries` (after the task) and then died; its lease epoch."""
    assert store.create_run(
        engine,
        run_id=run_id,
        agent=agent,
        agent_name=None,
        release=None,
        task=task,
        budgets=(budgets or Budgets()).as_dict(),
    )
    claim = leases.claim_run(engine, run_id, owner=DEAD_OWNER, lease_seconds=3600, max_resumes=3)
    for seq, entry in enumerate([task_entry(task), *entries]):
        fencing.append_entry(engine, run_id, claim.epoch, seq, entry, None, 3600)
    return claim.epoch


def expire(runner: Runner, run_id: str) -> None:
    """The run's worker died on another machine: its lease ran out five seconds ago."""
    with runner.engine.begin() as connection:
        connection.execute(
            update(runs)
            .where(runs.c.id == run_id)
            .values(lease_expires_at=runner.now() - timedelta(seconds=5))
        )
