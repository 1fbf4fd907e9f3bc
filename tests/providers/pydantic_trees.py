"""Pydantic AI agents that delegate (tests/providers/test_pydantic_ai.py): `lead` hands a
question to `researcher` through `researcher.delegate("research")`, a child run in a durable
run. Module attributes, so a worker (or a resume) finds the child agent by its reference.
Their models are Pydantic AI's FunctionModel: scripted, no network."""

from __future__ import annotations

from pydantic_ai import Agent, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from runner.integrations.pydantic_ai import RunnerAgent

ASKED: list[str] = []  # the questions the researcher's model was asked, in order


def _returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]


def _research(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    ASKED.append(str(messages[0].parts[-1].content))
    return ModelResponse(parts=[TextPart("coffee is fine in moderation")])


def _lead(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = _returns(messages)
    if not returns:
        return ModelResponse(parts=[ToolCallPart("research", {"task": "Is coffee healthy?"})])
    return ModelResponse(parts=[TextPart(f"Research says: {returns[0].content}")])


researcher = RunnerAgent(Agent(FunctionModel(_research), name="researcher"), max_steps=3)
lead = RunnerAgent(
    Agent(FunctionModel(_lead), name="lead", tools=[researcher.delegate("research")]),
    max_steps=4,
    max_tokens=10_000,
)
