"""A provider limit (`limit=`) for a framework's agent: each model request the framework makes
reserves from it before it goes, its estimate made from the messages the request sends (as a
runner model's is made from its transcript)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import messages as pm
from pydantic_ai.models.function import AgentInfo, FunctionModel

from runner.core.limits import DEFAULT_OUTPUT_TOKENS
from runner.integrations.pydantic_ai import RunnerAgent
from runner.testing.memory_limits import MemoryRunLimits
from tests.unit.store_support import memory_runner

LONG = 4000  # characters of the tool's result: about 1000 tokens at four a token


def answer(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
    if len(messages) == 1:
        return pm.ModelResponse(parts=[pm.ToolCallPart("fetch", {}, "call_1")])
    return pm.ModelResponse(parts=[pm.TextPart("read it")])


def test_a_framework_requests_estimate_sees_the_messages_it_sends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    estimates: list[int] = []
    reserve = MemoryRunLimits.reserve

    def noted(self: MemoryRunLimits, limit: str, estimate: Any) -> Any:
        estimates.append(estimate() if callable(estimate) else estimate)
        return reserve(self, limit, estimate)

    monkeypatch.setattr(MemoryRunLimits, "reserve", noted)
    agent = PydanticAgent(FunctionModel(answer), name="reader")

    @agent.tool_plain
    def fetch() -> str:
        """Fetch the page."""
        return "x" * LONG

    runner, _store, _clock = memory_runner()
    runner.set_limit("pool", tokens_per_minute=10_000_000)
    result = runner.run(RunnerAgent(agent, limit="pool"), "Read the page.")
    assert result.output == "read it"
    first, second = estimates
    assert first > DEFAULT_OUTPUT_TOKENS  # the task, at least
    # The second request carries the page: about a token for each four characters more.
    assert second - first >= LONG // 4
