"""Property: a durable run, crashed at a random model call and resumed, ends exactly as the
same run in memory (hypothesis, on SQLite and PostgreSQL)."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from unit.test_properties import OUTPUTS, TOOLS, Scripted, budgets

from runner import Agent, Runner, run_agent

from .support import Crash, crash, crashes_on_call, fields

_ids = itertools.count()


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(outputs=OUTPUTS, limits=budgets(), crash_at=st.integers(1, 8))
def test_a_crashed_and_resumed_run_ends_as_in_memory(
    db_url: str, outputs: list[Any], limits: dict[str, Any], crash_at: int
) -> None:
    in_memory = Scripted(list(outputs))
    memory = run_agent(in_memory, TOOLS, "task", retry_backoff=0, **limits)

    scripted = Scripted(list(outputs))
    agent = Agent(crashes_on_call(crash_at, scripted), TOOLS, retry_backoff=0, **limits)
    run_id = f"prop{next(_ids)}"
    with Runner(db_url) as runner:
        try:
            durable = runner.run(agent, "task", id=run_id)
        except Crash:
            event("crashed and resumed")
            crash(runner.engine, run_id)
            durable = runner.resume(run_id, agent=agent)
        stored = runner.get(run_id)
    assert fields(durable) == fields(memory)
    assert fields(stored) == fields(memory)
    # The model answered exactly the calls it answered in memory: a step it had answered
    # before the crash was never asked again (the crashed call itself never answered).
    assert scripted.calls == in_memory.calls
    assert scripted.seen == in_memory.seen
