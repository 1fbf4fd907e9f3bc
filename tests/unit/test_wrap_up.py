"""The opt-in wrap-up call after a budget stop."""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest

from runner import run_agent
from tests.unit.scripted_models import TOOLS, Failing, Model, Transcript, pairs


class WrapsUp:
    """Calls tools until the runner says the budget is spent, then answers."""

    def __init__(self, usage: Any = None, answer: Any = None) -> None:
        self.usage = usage
        self.answer = answer if answer is not None else {"type": "final", "content": "best"}
        self.calls = 0
        self.saw: Transcript = []

    def __call__(self, tr: Transcript) -> dict[str, Any]:
        self.calls += 1
        if tr[-1]["role"] == "user" and len(tr) > 1:
            self.saw = [dict(m) for m in tr]
            return dict(self.answer)
        out: dict[str, Any] = {"type": "tool", "name": "search", "args": {"q": self.calls}}
        if self.usage is not None:
            out["usage"] = self.usage
        return out


def check_wrapped(r: Any, model: WrapsUp, reason: str) -> None:
    assert r.stop_reason == reason
    assert r.output == "best"
    assert r.wrapped_up is True
    note, final = r.transcript[-2:]
    assert note["role"] == "user" and set(note) == {"role", "content"}
    assert reason in note["content"]
    assert final == {"role": "assistant", "content": "best"}
    assert model.saw[-1] == note


def test_wrap_up_after_max_steps() -> None:
    model = WrapsUp()
    r = run_agent(model, TOOLS, "t", max_steps=2, wrap_up=True)
    check_wrapped(r, model, "max_steps")
    assert r.steps == 2
    assert model.calls == 3


def test_wrap_up_after_token_budget() -> None:
    model = WrapsUp(usage=6)
    r = run_agent(model, TOOLS, "t", max_tokens=10, wrap_up=True)
    check_wrapped(r, model, "token_budget")
    assert r.steps == 2
    assert model.calls == 3
    # The action that broke the budget never ran and is not shown.
    assert pairs(r.transcript) == 1


def test_wrap_up_after_cost_budget() -> None:
    model = WrapsUp(usage={"cost": 0.6})
    r = run_agent(model, TOOLS, "t", max_cost=1.0, wrap_up=True)
    check_wrapped(r, model, "cost_budget")
    assert r.steps == 2


def test_wrap_up_after_time_budget(release: threading.Event) -> None:
    def stuck(q: object) -> str:
        release.wait(10)
        return "late"

    model = WrapsUp()
    r = run_agent(model, {"search": stuck}, "t", max_seconds=0.2, wrap_up=True)
    check_wrapped(r, model, "time_budget")
    assert r.steps == 1


def test_a_zero_step_cap_makes_no_call_even_with_wrap_up() -> None:
    # Zero means zero: the cap is not "about to stop" a run that never started.
    model = WrapsUp()
    r = run_agent(model, TOOLS, "t", max_steps=0, wrap_up=True)
    assert (r.stop_reason, r.output, r.steps, r.wrapped_up) == ("max_steps", None, 0, False)
    assert model.calls == 0
    assert r.transcript == [{"role": "user", "content": "t"}]


@pytest.mark.parametrize(
    ("kwargs", "usage", "reason"),
    [
        ({"max_steps": 2}, None, "max_steps"),
        ({"max_tokens": 10}, 6, "token_budget"),
        ({"max_cost": 1.0}, {"cost": 0.6}, "cost_budget"),
    ],
)
def test_without_wrap_up_there_is_no_last_call(
    kwargs: dict[str, Any], usage: Any, reason: str
) -> None:
    model = WrapsUp(usage=usage)
    r = run_agent(model, TOOLS, "t", **kwargs)
    assert (r.stop_reason, r.output, r.wrapped_up) == (reason, None, False)
    assert model.calls == r.steps
    assert all(m["role"] != "user" for m in r.transcript[1:])


def test_a_wrap_up_answer_that_is_not_final_leaves_no_output() -> None:
    ran: list[object] = []

    def search_logged(q: object) -> str:
        ran.append(q)
        return "r"

    model = WrapsUp(answer={"type": "tool", "name": "search", "args": {"q": "more"}})
    r = run_agent(model, {"search": search_logged}, "t", max_steps=2, wrap_up=True)
    assert (r.stop_reason, r.output, r.wrapped_up, r.steps) == ("max_steps", None, False, 2)
    assert ran == [1, 2]  # the wrap-up's tool call never runs
    assert r.transcript[-1]["role"] == "user"  # the note, with no answer after it


def test_a_wrap_up_model_that_raises_leaves_no_output() -> None:
    calls = 0

    def model(tr: Transcript) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise RuntimeError("gone")
        return {"type": "tool", "name": "search", "args": {"q": 1}}

    r = run_agent(model, TOOLS, "t", max_steps=1, wrap_up=True, retry_backoff=0)
    assert (r.stop_reason, r.output, r.wrapped_up) == ("max_steps", None, False)


def test_wrap_up_tokens_are_counted() -> None:
    model = WrapsUp(usage=6)
    r = run_agent(model, TOOLS, "t", max_steps=1, wrap_up=True)
    assert r.tokens == 6  # the wrap-up answer reported no usage
    model = WrapsUp(usage=6, answer={"type": "final", "content": "best", "usage": 3})
    r = run_agent(model, TOOLS, "t", max_steps=1, wrap_up=True)
    assert (r.tokens, r.output) == (9, "best")


def test_no_wrap_up_after_repeated_call() -> None:
    calls = 0

    def model(tr: Transcript) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if tr[-1]["role"] == "user" and len(tr) > 1:
            return {"type": "final", "content": "wrapped"}
        return {"type": "tool", "name": "search", "args": {"q": "same"}}

    r = run_agent(model, TOOLS, "t", wrap_up=True)
    assert (r.stop_reason, r.output, r.wrapped_up, r.steps) == ("repeated_call", None, False, 3)
    assert calls == 3


def test_no_wrap_up_after_tool_errors() -> None:
    model = WrapsUp()
    r = run_agent(model, {"search": lambda q: 1 / 0}, "t", wrap_up=True)
    assert (r.stop_reason, r.output, r.wrapped_up, r.steps) == ("tool_errors", None, False, 3)
    assert model.calls == 3


def test_no_wrap_up_after_model_error_or_cancel() -> None:
    model = Failing(math.inf)
    r = run_agent(model, TOOLS, "t", wrap_up=True, retry_backoff=0)
    assert (r.stop_reason, r.wrapped_up, model.calls) == ("model_error", False, 3)
    event = threading.Event()
    event.set()
    wraps = WrapsUp()
    r = run_agent(wraps, TOOLS, "t", wrap_up=True, cancel=event)
    assert (r.stop_reason, r.wrapped_up, wraps.calls) == ("cancelled", False, 0)


def test_a_final_with_wrap_up_on_is_just_a_final() -> None:
    model = Model(final_after=1)
    r = run_agent(model, TOOLS, "t", wrap_up=True)
    assert (r.stop_reason, r.output, r.wrapped_up, model.calls) == ("final", "answer", False, 2)
