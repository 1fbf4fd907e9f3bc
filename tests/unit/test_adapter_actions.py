"""The action shapes model adapters return, as the loop parses them today."""

from __future__ import annotations

from typing import Any

from runner import run_agent
from runner.core.actions import parse_action

USAGE = {"input_tokens": 10, "output_tokens": 5, "cached_tokens": 4, "cost": 0.25}


def test_an_adapters_invalid_verdict_is_shown_in_its_own_words() -> None:
    action = parse_action({"type": "invalid", "error": "the model refused: no", "usage": USAGE})
    assert (action.kind, action.error, action.tokens, action.cost) == (
        "invalid",
        "the model refused: no",
        15,
        0.25,
    )


def test_an_invalid_type_without_an_error_text_is_still_a_type_complaint() -> None:
    assert "'type' must be" in (parse_action({"type": "invalid"}).error or "")


def test_a_single_call_keeps_its_provider_id_and_text() -> None:
    action = parse_action(
        {"type": "tool", "name": "add", "args": {"a": 1}, "id": "call_abc", "text": "Let me add."}
    )
    assert (action.kind, action.tool, action.args) == ("tool", "add", {"a": 1})
    assert (action.call_id, action.text, action.calls) == ("call_abc", "Let me add.", ())


def test_several_calls_are_one_action_with_every_call() -> None:
    calls = [{"id": "a", "name": "add", "args": {"x": 1}}, {"name": "add", "args": {}}]
    action = parse_action({"type": "tool", "calls": calls, "text": "Both.", "usage": USAGE})
    assert (action.kind, action.tool, action.args, action.text) == ("tool", None, None, "Both.")
    assert action.tokens == 15 and action.cost == 0.25
    assert [(c.tool, c.args, c.id) for c in action.calls] == [
        ("add", {"x": 1}, "a"),
        ("add", {}, None),
    ]
    assert action.signatures == [("add", '{"x": 1}'), ("add", "{}")]


def test_a_refusal_is_an_observation_the_model_sees_not_a_crash() -> None:
    def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        if len(transcript) == 1:
            return {"type": "invalid", "error": "the model refused: I cannot help with that"}
        return {"type": "final", "content": transcript[-1]["content"]}

    result = run_agent(model, {}, "task")
    assert result.stop_reason == "final"
    assert result.output == "InvalidAction: the model refused: I cannot help with that"


class Binding:
    """A model that wants the agent's tools, as the adapters do."""

    def __init__(self, tools: Any = None) -> None:
        self.tools = tools

    def with_tools(self, tools: Any) -> Binding:
        return Binding(tools)

    def __call__(self, transcript: list[dict[str, Any]]) -> dict[str, Any]:
        return {"type": "final", "content": sorted(self.tools or {})}


def test_agent_and_run_agent_hand_their_tools_to_a_model_that_takes_them() -> None:
    from runner import Agent, Tool

    def add(a: int, b: int) -> int:
        return a + b

    model = Binding()
    agent = Agent(model, {"add": add})
    assert isinstance(agent.model, Binding) and agent.model is not model
    assert set(agent.model.tools) == {"add"} and isinstance(agent.model.tools["add"], Tool)
    assert model.tools is None  # the model given is left as it was
    assert run_agent(model, {"add": add, "sub": add}, "task").output == ["add", "sub"]
