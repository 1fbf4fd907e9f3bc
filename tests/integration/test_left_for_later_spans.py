"""What a trace shows of a run left for later without failing, on SQLite and PostgreSQL: parked
(its next model call found no room in its provider limit: it is queued again until there is)
or waiting (for its sub-agents, or for a person's answer). Its step's and its `invoke_agent`
spans carry no error and no exception, an attribute says what happened (`runner.parked`:
until when; `runner.waiting`: for what), and every span ends once."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from runner import Agent, ModelRetryable, Runner, run_agent, tool
from runner.core.clock import ManualClock
from runner.errors import RunWaiting
from runner.testing import FunctionModel, call, final, turns
from tests.integration.exported_spans import Exported

Transcript = list[dict[str, Any]]


@pytest.fixture
def exported(caplog: pytest.LogCaptureFixture) -> Iterator[Exported]:
    """An in-memory exporter; the SDK's complaints (a span ended twice, an attribute set on
    an ended span) are logged warnings, so none may be logged."""
    caplog.set_level(logging.WARNING, logger="opentelemetry")
    found = Exported()
    yield found
    found.provider.shutdown()
    assert [r.getMessage() for r in caplog.records if r.name.startswith("opentelemetry")] == []


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def assert_not_failed(span: ReadableSpan) -> None:
    assert span.status.status_code is StatusCode.UNSET, span.name
    assert "error.type" not in attrs(span)
    assert [event.name for event in span.events] == []


def test_a_parked_run_s_spans_say_until_when_not_an_error(db_url: str, exported: Exported) -> None:
    """Step 1's first call fails (retried) and takes the limit's one request of the minute:
    the retry finds no room, and the run parks until the minute has passed."""
    failed = False

    def model(transcript: Transcript) -> dict[str, Any]:
        nonlocal failed
        if not failed:
            failed = True
            raise ModelRetryable("overloaded")
        return final("done")

    clock = ManualClock(time.time())
    started = clock.time()
    agent = Agent(FunctionModel(model), name="limited", limit="m", retry_backoff=0)
    with Runner(db_url, clock=clock, tracer_provider=exported.provider) as runner:
        runner.set_limit("m", requests_per_minute=1)
        result = runner.run(agent, "go", id="parked")  # waits for room, then goes on
    assert (result.stop_reason, result.output) == ("final", "done")

    assert exported.names() == [
        "chat",  # failed: retried
        "step 1",  # parked
        "invoke_agent limited",  # parked
        "chat",
        "step 1",
        "invoke_agent limited",
    ]
    chat, parked_step, parked_run, _, step, run = exported.spans
    assert chat.status.status_code is StatusCode.ERROR  # a real failure, as before
    for span in (parked_step, parked_run):
        assert_not_failed(span)
        assert attrs(span)["runner.parked.limit"] == "m"
        until = datetime.fromisoformat(attrs(span)["runner.parked"]).timestamp()
        assert started + 59 <= until <= started + 61  # the minute of its one request
        assert "runner.stop_reason" not in attrs(span)
    assert attrs(run)["runner.stop_reason"] == "final"
    for span in (step, run):
        assert_not_failed(span)
        assert "runner.parked" not in attrs(span)


@tool(approval=True)
def refund(amount: int) -> str:
    return f"refunded {amount}"


def test_a_run_waiting_for_an_answer_is_marked_waiting_not_failed(
    db_url: str, exported: Exported
) -> None:
    def model(transcript: Transcript) -> dict[str, Any]:
        return call("refund", amount=5) if turns(transcript) == 0 else final("ok")

    agent = Agent(FunctionModel(model), {"refund": refund}, name="shop")
    with Runner(db_url, tracer_provider=exported.provider) as runner:
        waiting = runner.run(agent, "refund me", id="asks")
        assert waiting.status == "waiting"
        assert exported.names() == ["chat", "step 1", "invoke_agent shop"]
        _, step, run = exported.spans
        for span in (step, run):
            assert_not_failed(span)
            assert attrs(span)["runner.waiting"] == ("answer",)

        runner.approve("asks")
        result = runner.resume("asks", agent=agent)
    assert result.output == "ok"
    after = exported.spans[3:]
    assert [s.name for s in after] == [
        "execute_tool refund",
        "step 1",
        "chat",
        "step 2",
        "invoke_agent shop",
    ]
    assert all("runner.waiting" not in attrs(s) for s in after)


def test_a_run_waiting_for_its_sub_agents_is_marked_waiting_not_failed(
    db_url: str, exported: Exported
) -> None:
    helper = Agent(FunctionModel(lambda transcript: final("found")), name="helper")

    def lead(transcript: Transcript) -> dict[str, Any]:
        return call("find", task="look") if turns(transcript) == 0 else final("done")

    agent = Agent(FunctionModel(lead), {"find": helper.as_tool("find")}, name="lead")
    with Runner(db_url, tracer_provider=exported.provider) as runner:
        result = runner.run(agent, "go", id="tree")  # runs the child, then the parent on
    assert result.output == "done"

    leads = [s for s in exported.spans if s.name == "invoke_agent lead"]
    assert len(leads) == 2
    parked, finished = leads
    assert_not_failed(parked)
    assert attrs(parked)["runner.waiting"] == ("sub-agents",)
    assert attrs(finished)["runner.stop_reason"] == "final"
    under_parked = [s for s in exported.spans if s.parent == parked.context]
    (waited_step,) = [s for s in under_parked if s.name == "step 1"]
    assert_not_failed(waited_step)
    assert attrs(waited_step)["runner.waiting"] == ("sub-agents",)
    assert all(s.status.status_code is StatusCode.UNSET for s in exported.spans)


def test_an_in_memory_run_that_needs_an_answer_is_marked_waiting(
    exported: Exported, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run_agent has nobody to ask, and lets RunWaiting out: the trace says what it waits
    for, as a durable run's does."""
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", exported.provider)

    def model(transcript: Transcript) -> dict[str, Any]:
        return call("refund", amount=5)

    with pytest.raises(RunWaiting):
        run_agent(FunctionModel(model), {"refund": refund}, "refund me")
    assert exported.names() == ["chat", "step 1", "invoke_agent"]
    for span in exported.spans[1:]:
        assert_not_failed(span)
        assert attrs(span)["runner.waiting"] == ("answer",)
