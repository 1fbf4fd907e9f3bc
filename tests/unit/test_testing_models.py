"""runner.testing's models, as a user's tests would use them, on run_agent (in memory)."""

from __future__ import annotations

from typing import Any, Literal

from runner import Agent, run_agent, tool
from runner.testing import FunctionModel, ScriptedModel, TestModel, call, example_args, final


def add(a: int, b: int) -> int:
    return a + b


def greet(name: str, loud: bool, times: float = 1.0, mode: Literal["x", "y"] = "x") -> str:
    return f"{'HELLO' if loud else 'hello'} {name}"


def test_test_model_calls_each_tool_once_with_arguments_of_its_schema_then_answers() -> None:
    model = TestModel()
    agent = Agent(model, {"add": add, "greet": greet})
    result = run_agent(agent.model, agent.tools, "go")
    assert [m.get("tool") for m in result.transcript if m["role"] == "assistant"][:2] == [
        "add",
        "greet",
    ]
    assert result.transcript[1]["args"] == {"a": 0, "b": 0}
    assert result.transcript[3]["args"] == {"name": "a", "loud": False}  # defaults left out
    assert (result.stop_reason, result.output) == ("final", '{"add": "0", "greet": "hello a"}')
    assert model.calls == 3  # the agent's bound copy records into the same `seen`


def test_test_model_takes_given_arguments_and_answer() -> None:
    agent = Agent(TestModel(answer="done", args={"add": {"a": 2}}), {"add": add})
    result = run_agent(agent.model, agent.tools, "go")
    assert result.transcript[1]["args"] == {"a": 2, "b": 0}
    assert result.transcript[2]["content"] == "2"
    assert result.output == "done"


def test_a_scripted_model_plays_its_moves_by_turn_and_stops_when_they_run_out() -> None:
    model = ScriptedModel([call("add", a=1, b=2), lambda t: final(f"got {t[-1]['content']}")])
    result = run_agent(model, {"add": add}, "go")
    assert (result.stop_reason, result.output, model.calls) == ("final", "got 3", 2)
    short = ScriptedModel([call("add", a=1, b=2)])
    stopped = run_agent(short, {"add": add}, "go", model_retries=0)
    assert stopped.stop_reason == "model_error"
    assert "ScriptedModel has 1 moves; turn 2 asked" in str(stopped.error)


def test_a_function_model_returns_what_its_function_returns() -> None:
    model = FunctionModel(lambda t: "not an action")  # malformed output, as given
    result = run_agent(model, {}, "go", max_consecutive_errors=1)
    assert result.stop_reason == "tool_errors"
    assert model.seen[0] == [{"role": "user", "content": "go"}]


def test_example_args_fit_common_schemas() -> None:
    schema: dict[str, Any] = {
        "properties": {
            "s": {"type": "string"},
            "n": {"type": ["integer", "null"]},
            "e": {"enum": ["red", "blue"]},
            "o": {"anyOf": [{"type": "null"}, {"type": "array"}]},
            "d": {"type": "string", "default": "kept"},
        }
    }
    assert example_args(schema) == {"s": "a", "n": 0, "e": "red", "o": []}


def test_an_approval_tool_under_test_model_waits_on_a_durable_runner() -> None:
    from runner import Runner
    from runner.testing import InMemoryStore

    @tool(approval=True)
    def delete(path: str) -> str:
        return f"deleted {path}"

    with Runner(store=InMemoryStore()) as runner:
        waiting = runner.run(Agent(TestModel(), {"delete": delete}), "clean up", id="d")
        assert waiting.waiting is not None and waiting.waiting.args == {"path": "a"}
        runner.deny("d", reason="no")
        assert runner.resume("d", agent=Agent(TestModel(), {"delete": delete})).output == (
            '{"delete": "Denied: no"}'
        )
