"""OpenTelemetry traces: every run is a trace of step, model-call and tool-call spans, named
and attributed by the GenAI semantic conventions, read back from the SDK's in-memory
exporter. A SIGKILL and a resume across processes is in tests/acceptance/test_traces.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.trace import StatusCode

from runner import Agent, ModelRetryable, Runner, run_agent, tool
from runner.core.spans import NO_SPANS
from runner.tracing.otel import run_context
from runner.tracing.run_spans import run_trace
from tests.integration.exported_spans import Exported


@pytest.fixture
def exported() -> Iterator[Exported]:
    found = Exported()
    yield found
    found.provider.shutdown()


@pytest.fixture
def global_provider(exported: Exported, monkeypatch: pytest.MonkeyPatch) -> Exported:
    """The SDK provider set as the global one for this test only (the API sets it once per
    process, so the test swaps the module's own slot and puts it back)."""
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", exported.provider)
    return exported


class Model:
    """A scripted model that names itself as an adapter does, and reports usage."""

    model = "gpt-test"
    provider = "openai"

    def __init__(self, plan: list[dict[str, Any]], failures: int = 0) -> None:
        self.plan = plan
        self.failures = failures

    def __call__(self, transcript: list[dict[str, Any]]) -> dict[str, Any]:
        if self.failures:
            self.failures -= 1
            raise ModelRetryable("overloaded")
        step = sum(1 for m in transcript if m["role"] == "assistant")
        return {**self.plan[step], "usage": {"input_tokens": 10 + step, "output_tokens": 3}}


@tool(idempotent=True)
def add(a: int, b: int) -> int:
    return a + b


def fails(n: int) -> int:
    raise ValueError(f"no {n}")


PLAN = [
    {"type": "tool", "name": "add", "args": {"a": 2, "b": 3}},
    {"type": "final", "content": "5"},
]


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def test_a_run_is_one_trace_of_steps_model_calls_and_tool_calls(global_provider: Exported) -> None:
    result = run_agent(Model(PLAN), {"add": add}, "What is 2 + 3?")
    assert result.output == "5"
    spans = global_provider.spans
    assert [s.name for s in spans] == [
        "chat gpt-test",
        "execute_tool add",
        "step 1",
        "chat gpt-test",
        "step 2",
        "invoke_agent",
    ]
    root = run_context(result.run_id)
    assert {s.context.trace_id for s in spans} == {root.trace_id}
    (agent,) = global_provider.named("invoke_agent")
    steps = {attrs(s)["runner.step"]: s for s in global_provider.named("step")}
    assert parent_of(agent) == root.span_id
    assert all(parent_of(s) == agent.context.span_id for s in steps.values())
    chat, tool_span, _, answer, _, _ = spans
    assert parent_of(chat) == parent_of(tool_span) == steps[1].context.span_id
    assert parent_of(answer) == steps[2].context.span_id

    assert attrs(chat) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-test",
        "gen_ai.provider.name": "openai",
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 3,
        "runner.usage.tokens": 13,
        "runner.run_id": result.run_id,
        "runner.step": 1,
    }
    assert chat.kind is trace.SpanKind.CLIENT
    assert attrs(tool_span) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "add",
        "gen_ai.tool.type": "function",
        "gen_ai.tool.call.id": f"{result.run_id}-1",
        "runner.idempotency_key": f"{result.run_id}-1",
        "runner.attempt": 1,
        "runner.run_id": result.run_id,
        "runner.step": 1,
    }
    assert attrs(answer)["gen_ai.usage.input_tokens"] == 11
    assert attrs(agent)["gen_ai.operation.name"] == "invoke_agent"
    assert attrs(agent)["runner.stop_reason"] == "final"
    assert attrs(agent)["runner.tokens"] == result.tokens == 27
    # The step span starts before its model call and ends after its tool call.
    assert steps[1].start_time <= chat.start_time and tool_span.end_time <= steps[1].end_time


def test_two_runs_are_two_traces(global_provider: Exported) -> None:
    first = run_agent(Model(PLAN), {"add": add}, "one")
    second = run_agent(Model(PLAN), {"add": add}, "two")
    traces = {s.context.trace_id for s in global_provider.spans}
    expected = {run_context(first.run_id).trace_id, run_context(second.run_id).trace_id}
    assert traces == expected and len(traces) == 2


def test_failed_tools_and_retried_model_calls_are_error_spans(global_provider: Exported) -> None:
    plan = [{"type": "tool", "name": "fails", "args": {"n": 1}}, {"type": "final", "content": "x"}]
    run_agent(Model(plan, failures=1), {"fails": fails}, "task", retry_backoff=0.0)
    chats = global_provider.named("chat")
    assert [c.status.status_code for c in chats] == [
        StatusCode.ERROR,
        StatusCode.UNSET,
        StatusCode.UNSET,
    ]
    assert attrs(chats[0])["error.type"] == "ModelRetryable"
    assert [e.name for e in chats[0].events] == ["exception"]
    (failed,) = global_provider.named("execute_tool")
    assert failed.status.status_code is StatusCode.ERROR
    assert attrs(failed)["error.type"] == "ValueError"


def test_plain_usage_and_unknown_models_leave_out_what_is_not_known(
    global_provider: Exported,
) -> None:
    def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        return {"type": "final", "content": "hi", "usage": 7}

    run_agent(model, {}, "task")
    (chat,) = global_provider.named("chat")
    assert chat.name == "chat"
    assert "gen_ai.request.model" not in attrs(chat)
    assert "gen_ai.usage.input_tokens" not in attrs(chat)
    assert attrs(chat)["runner.usage.tokens"] == 7


def test_without_a_provider_runs_make_no_spans() -> None:
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)
    with run_trace("some-run", model=None) as spans:
        assert spans is NO_SPANS


def test_durable_runs_are_traced_with_the_runner_s_provider(
    db_url: str, exported: Exported
) -> None:
    agent = Agent(Model(PLAN), {"add": add}, name="adder", release="r7")
    with Runner(db_url, tracer_provider=exported.provider) as runner:
        result = runner.run(agent, "What is 2 + 3?", id="traced-1")
    assert result.output == "5"
    (invoked,) = exported.named("invoke_agent")
    assert invoked.name == "invoke_agent adder"
    assert attrs(invoked) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "adder",
        "gen_ai.conversation.id": "traced-1",
        "runner.run_id": "traced-1",
        "runner.release": "r7",
        "runner.resumes": 0,
        "runner.stop_reason": "final",
        "runner.steps": 2,
        "runner.tokens": 27,
        "runner.cost": 0.0,
    }
    assert {s.context.trace_id for s in exported.spans} == {run_context("traced-1").trace_id}
    (tool_span,) = exported.named("execute_tool")
    assert attrs(tool_span)["runner.idempotency_key"] == "traced-1-1"


def test_a_caller_s_span_is_linked_not_made_the_parent(exported: Exported) -> None:
    tracer = exported.provider.get_tracer("caller")
    with (
        tracer.start_as_current_span("request") as request,
        run_trace("linked-run", model=None, tracer_provider=exported.provider),
    ):
        pass
    (invoked,) = exported.named("invoke_agent")
    assert invoked.context.trace_id == run_context("linked-run").trace_id
    assert [link.context.span_id for link in invoked.links] == [request.get_span_context().span_id]
