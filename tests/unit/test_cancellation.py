"""Cancellation: a callable or an event stops the run before its next step."""

from __future__ import annotations

import threading

from runner import run_agent
from tests.unit.scripted_models import TOOLS, Model, pairs


def test_cancel_callable_stops_before_the_next_step() -> None:
    cancelled = False

    def search_then_cancel(q: object) -> str:
        nonlocal cancelled
        if q == 2:
            cancelled = True
        return "r"

    model = Model()
    r = run_agent(model, {"search": search_then_cancel}, "t", cancel=lambda: cancelled)
    assert (r.stop_reason, r.output, r.steps) == ("cancelled", None, 2)
    assert model.calls == 2
    assert pairs(r.transcript) == 2
    assert r.transcript[-1]["content"] == "r"


def test_cancel_event_stops_before_the_next_step() -> None:
    event = threading.Event()

    def search_then_cancel(q: object) -> str:
        event.set()
        return "r"

    model = Model()
    r = run_agent(model, {"search": search_then_cancel}, "t", cancel=event)
    assert (r.stop_reason, r.steps) == ("cancelled", 1)
    assert model.calls == 1
    assert [m["role"] for m in r.transcript] == ["user", "assistant", "tool"]


def test_cancelled_before_the_start_takes_no_steps() -> None:
    event = threading.Event()
    event.set()
    model = Model(final_after=0)
    r = run_agent(model, TOOLS, "t", cancel=event)
    assert (r.stop_reason, r.steps, model.calls) == ("cancelled", 0, 0)
    assert r.transcript == [{"role": "user", "content": "t"}]


def test_an_unset_cancel_changes_nothing() -> None:
    r = run_agent(Model(final_after=1), TOOLS, "t", cancel=threading.Event())
    assert (r.stop_reason, r.steps) == ("final", 2)
    r = run_agent(Model(final_after=1), TOOLS, "t", cancel=lambda: False)
    assert (r.stop_reason, r.steps) == ("final", 2)


def test_cancel_keeps_tokens_and_cost_spent() -> None:
    event = threading.Event()

    def search_then_cancel(q: object) -> str:
        event.set()
        return "r"

    r = run_agent(
        Model(usage={"tokens": 7, "cost": 0.5}), {"search": search_then_cancel}, "t", cancel=event
    )
    assert (r.stop_reason, r.tokens, r.cost) == ("cancelled", 7, 0.5)
