"""Steps with several tool calls, in memory: run at once, capped, shown in call order."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from runner import current_call, run_agent, tool
from runner.core.budgets import Budgets
from runner.core.calls import Together
from runner.core.journal import EntryKind, MemoryJournal
from runner.core.loop import drive
from runner.core.tools import as_tools

Transcript = list[dict[str, Any]]
WAIT = 60.0  # seconds a test waits for another call before it calls the test failed


def batch_then_answer(*calls: dict[str, Any], text: str | None = None) -> Callable[..., Any]:
    """A model that asks for `calls` in one step, then answers with what they gave."""

    def model(transcript: Transcript) -> dict[str, Any]:
        if len(transcript) == 1:
            action: dict[str, Any] = {"type": "tool", "calls": list(calls), "usage": 10}
            if text is not None:
                action["text"] = text
            return action
        results = [m["content"] for m in transcript if m["role"] == "tool"]
        return {"type": "final", "content": results, "usage": 1}

    return model


def call(tool_name: str, /, **args: Any) -> dict[str, Any]:
    return {"name": tool_name, "args": args}


def test_the_calls_of_a_step_run_at_once() -> None:
    together = threading.Barrier(3, timeout=WAIT)

    def meet(n: int) -> int:
        together.wait()  # raises BrokenBarrierError unless all three run at the same time
        return n

    model = batch_then_answer(call("meet", n=1), call("meet", n=2), call("meet", n=3))
    result = run_agent(model, {"meet": meet}, "task")
    assert result.output == ["1", "2", "3"]
    assert result.steps == 2 and result.tokens == 11  # one step, its usage counted once


def test_max_parallel_tools_caps_how_many_run_at_once() -> None:
    lock = threading.Lock()
    running, peak = 0, 0
    pair = threading.Barrier(2, timeout=WAIT)

    def work(n: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        if n < 2:
            pair.wait()  # the first two overlap for sure
        time.sleep(0.01)
        with lock:
            running -= 1
        return n

    model = batch_then_answer(*(call("work", n=n) for n in range(5)))
    result = run_agent(model, {"work": work}, "task", max_parallel_tools=2)
    assert result.output == ["0", "1", "2", "3", "4"]
    assert peak == 2


def test_max_parallel_tools_1_runs_the_calls_in_order_on_the_loops_thread() -> None:
    seen: list[tuple[str, int, str]] = []

    def work(n: int) -> int:
        seen.append(("start", n, threading.current_thread().name))
        seen.append(("end", n, threading.current_thread().name))
        return n

    answer = batch_then_answer(*(call("work", n=n) for n in range(3)))
    loops: list[str] = []

    def model(transcript: Transcript) -> dict[str, Any]:
        loops.append(threading.current_thread().name)  # run_agent calls it on its loop's
        return answer(transcript)

    run_agent(model, {"work": work}, "task", max_parallel_tools=1)
    loop = loops[0]
    assert loops == [loop, loop]
    assert seen == [(edge, n, loop) for n in range(3) for edge in ("start", "end")]


def test_observations_are_shown_in_call_order_and_journaled_as_they_end() -> None:
    second_done = threading.Event()

    def first() -> str:
        assert second_done.wait(WAIT)
        return "one"

    def second() -> str:
        second_done.set()
        return "two"

    model = batch_then_answer(
        {"id": "c1", "name": "first", "args": {}},
        {"id": "c2", "name": "second", "args": {}},
        text="Both at once.",
    )
    journal = MemoryJournal(run_id="r")
    tools = as_tools({"first": first, "second": second})
    result = drive(model, tools, "task", Budgets(), journal)
    assert result.transcript[1:4] == [
        {
            "role": "assistant",
            "calls": [
                {"id": "c1", "name": "first", "args": {}},
                {"id": "c2", "name": "second", "args": {}},
            ],
            "text": "Both at once.",
        },
        {"role": "tool", "name": "first", "content": "one", "is_error": False, "id": "c1"},
        {"role": "tool", "name": "second", "content": "two", "is_error": False, "id": "c2"},
    ]
    rows = [(e.kind, e.tool, e.idempotency_key, e.call_id) for e in journal.entries[1:5]]
    assert rows == [
        (EntryKind.ACTION, "first", "r-1.1", "c1"),
        (EntryKind.ACTION, "second", "r-1.2", "c2"),
        (EntryKind.OBSERVATION, "second", "r-1.2", "c2"),  # it ended first
        (EntryKind.OBSERVATION, "first", "r-1.1", "c1"),
    ]
    first_action, second_action = journal.entries[1:3]
    assert (first_action.content, first_action.tokens) == ("Both at once.", 10)
    assert (second_action.content, second_action.tokens) == (None, 0)


def test_a_single_call_keeps_seed_shapes_plus_the_id_and_text_it_was_given() -> None:
    def model(transcript: Transcript) -> dict[str, Any]:
        if len(transcript) == 1:
            return {"type": "tool", "name": "add", "args": {"a": 1}, "id": "c9", "text": "Hm."}
        return {"type": "final", "content": "done"}

    result = run_agent(model, {"add": lambda a: a + 1}, "task")
    assert result.transcript[1:3] == [
        {"role": "assistant", "tool": "add", "args": {"a": 1}, "id": "c9", "text": "Hm."},
        {"role": "tool", "name": "add", "content": "2", "is_error": False, "id": "c9"},
    ]


def test_each_call_gets_its_own_key_and_current_call() -> None:
    seen: dict[int, tuple[str, str | None]] = {}

    def keyed(n: int, idempotency_key: str) -> str:
        now = current_call()
        seen[n] = (idempotency_key, now.idempotency_key if now else None)
        return idempotency_key

    journal = MemoryJournal(run_id="run")
    model = batch_then_answer(call("keyed", n=1), call("keyed", n=2))
    result = drive(model, as_tools({"keyed": keyed}), "task", Budgets(), journal)
    assert seen == {1: ("run-1.1", "run-1.1"), 2: ("run-1.2", "run-1.2")}
    assert result.output == ["run-1.1", "run-1.2"]
    assert current_call() is None


def test_an_unknown_tool_fails_its_own_call_only() -> None:
    model = batch_then_answer(call("add", a=1), call("nope", a=1))
    result = run_agent(model, {"add": lambda a: a + 1}, "task", max_consecutive_errors=0)
    assert result.stop_reason == "final"  # one call succeeded: not a failed step
    assert result.output == ["2", "LookupError: unknown tool nope"]
    errors = [m["is_error"] for m in result.transcript if m["role"] == "tool"]
    assert errors == [False, True]


def broken(n: int) -> int:
    raise ValueError(f"broken {n}")


def failing_batches(width: int, good: int | None = None) -> Callable[..., Any]:
    """A model whose every step is `width` calls of `broken` (call `good` calls `fine`)."""

    def model(transcript: Transcript) -> dict[str, Any]:
        step = sum(1 for m in transcript if m["role"] == "assistant")
        shapes = [call("fine" if n == good else "broken", n=step * width + n) for n in range(width)]
        return {"type": "tool", "calls": shapes}

    return model


def test_a_step_is_a_failed_step_only_when_every_call_failed() -> None:
    tools = {"broken": broken, "fine": lambda n: n}
    all_failing = run_agent(failing_batches(3), tools, "task", max_consecutive_errors=1)
    assert (all_failing.stop_reason, all_failing.steps) == ("tool_errors", 2)
    one_fine = run_agent(failing_batches(3, good=2), tools, "task", max_steps=4)
    assert (one_fine.stop_reason, one_fine.steps) == ("max_steps", 4)


def test_repeat_detection_counts_each_call() -> None:
    def model(transcript: Transcript) -> dict[str, Any]:
        return {"type": "tool", "calls": [call("look", q=1), call("look", q=1), call("look", q=2)]}

    first = run_agent(model, {"look": lambda q: q}, "task", max_repeats=1)
    assert (first.stop_reason, first.steps) == ("repeated_call", 1)
    assert [m["role"] for m in first.transcript] == ["user"]  # refused: never shown
    later = run_agent(model, {"look": lambda q: q}, "task", max_repeats=2)
    assert (later.stop_reason, later.steps) == ("repeated_call", 2)


def test_a_refused_step_of_several_calls_journals_every_call_for_audit() -> None:
    model = batch_then_answer(call("a"), call("b"))
    journal = MemoryJournal(run_id="r")
    result = drive(model, as_tools({}), "task", Budgets(max_tokens=5), journal)
    assert result.stop_reason == "token_budget"
    refused = [(e.kind, e.tool, e.tokens) for e in journal.entries[1:]]
    assert refused == [(EntryKind.REFUSED, "a", 10), (EntryKind.REFUSED, "b", 0)]


def test_a_step_of_several_calls_is_one_step_for_the_step_cap_and_wrap_up() -> None:
    def model(transcript: Transcript) -> dict[str, Any]:
        if transcript[-1]["role"] == "user" and len(transcript) > 1:
            return {"type": "final", "content": "wrapped"}
        return {"type": "tool", "calls": [call("a"), call("a", x=1)]}

    result = run_agent(model, {"a": lambda **kw: "ok"}, "task", max_steps=1, wrap_up=True)
    assert (result.stop_reason, result.output, result.wrapped_up) == ("max_steps", "wrapped", True)
    assert result.steps == 1
    assert [m["role"] for m in result.transcript] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
        "assistant",
    ]


def test_a_slow_call_times_out_alone() -> None:
    release = threading.Event()

    @tool(timeout=0.05)
    def slow() -> str:
        release.wait(WAIT)
        return "late"

    try:
        result = run_agent(
            batch_then_answer(call("slow"), call("quick")),
            {
                "slow": slow,
                "quick": lambda: "quick",
            },
            "task",
        )
    finally:
        release.set()
    assert result.output == ["TimeoutError: slow took longer than 0.05s", "quick"]


def test_async_tools_of_one_step_run_as_tasks_side_by_side() -> None:
    started: dict[str, asyncio.Event] = {}

    async def ping(name: str, other: str) -> str:
        started.setdefault(name, asyncio.Event()).set()
        await asyncio.wait_for(started.setdefault(other, asyncio.Event()).wait(), WAIT)
        return name

    model = batch_then_answer(call("ping", name="a", other="b"), call("ping", name="b", other="a"))
    assert run_agent(model, {"ping": ping}, "task").output == ["a", "b"]


def test_tools_see_the_callers_context_variables() -> None:
    tenant: contextvars.ContextVar[str] = contextvars.ContextVar("tenant", default="none")

    def who() -> str:
        return tenant.get()

    tenant.set("acme")
    model = batch_then_answer(call("who"), call("who"))
    assert run_agent(model, {"who": who}, "task").output == ["acme", "acme"]


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, None])
def test_max_parallel_tools_must_be_a_whole_number_of_at_least_one(bad: Any) -> None:
    with pytest.raises(ValueError, match="max_parallel_tools"):
        run_agent(batch_then_answer(), {}, "task", max_parallel_tools=bad)


def test_together_waits_for_started_jobs_skips_the_rest_and_raises_the_first() -> None:
    ran: list[str] = []
    slow_started, slow_may_end = threading.Event(), threading.Event()

    def failing() -> None:
        assert slow_started.wait(WAIT)
        ran.append("failing")
        threading.Timer(0.05, slow_may_end.set).start()
        raise OSError("the journal is gone")

    def slow() -> None:
        slow_started.set()
        assert slow_may_end.wait(WAIT)
        ran.append("slow")

    def later() -> None:
        ran.append("later")  # queued behind the two others, after one failed: never started

    together = Together(limit=2)
    with pytest.raises(OSError, match="the journal is gone"):
        together.run([failing, slow, later])
    assert ran == ["failing", "slow"]  # slow was waited for before the error came out
    together.run([lambda: ran.append("next step")])  # the next step's jobs run as ever
    together.close()
    assert ran[-1] == "next step"
