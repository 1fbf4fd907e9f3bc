"""An interruptible tool's call (an MCP tool's) is given up as soon as its run is cancelled
(the model's observation says so, and the run stops `cancelled`) or paused by a graceful
stop (RunPaused, the call left pending for the resume to settle), as a model call is; any
other tool's call runs to its end."""

from __future__ import annotations

import asyncio
import threading

import pytest

from runner import Budgets, run_agent
from runner.core.journal import EntryKind, MemoryJournal
from runner.core.loop import drive
from runner.core.tools import Tool
from runner.errors import RunPaused
from runner.testing import ScriptedModel, call, final, tool_results


def after(started: threading.Event, *then: threading.Event) -> None:
    """Once the tool has started, set `then` in order (on a thread of its own)."""

    def go() -> None:
        started.wait()
        for event in then:
            event.set()

    threading.Thread(target=go, daemon=True).start()


def endless(started: threading.Event) -> Tool:
    async def wait_for_ever() -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    return Tool(wait_for_ever, interruptible=True)


def test_a_cancel_gives_an_interruptible_call_up_and_the_run_stops_cancelled() -> None:
    started, cancel = threading.Event(), threading.Event()
    after(started, cancel)
    model = ScriptedModel([call("slow"), final("unreached")])
    result = run_agent(model, {"slow": endless(started)}, "task", cancel=cancel)
    assert result.stop_reason == "cancelled"
    (observation,) = tool_results(result.transcript)
    assert observation["is_error"]
    assert observation["content"].startswith("Cancelled: the run was cancelled while slow ran")
    assert model.calls == 1


def test_a_pause_leaves_an_interruptible_call_pending() -> None:
    started, pause = threading.Event(), threading.Event()
    after(started, pause)
    journal = MemoryJournal()
    with pytest.raises(RunPaused, match="paused during its slow call"):
        drive(
            ScriptedModel([call("slow")]), {"slow": endless(started)}, "task", Budgets(),
            journal, pause=pause,
        )  # fmt: skip
    assert journal.entries[-1].kind is EntryKind.ACTION  # no observation: pending


def test_a_plain_tool_runs_to_its_end_and_the_run_stops_after_it() -> None:
    started, cancel, release = threading.Event(), threading.Event(), threading.Event()
    after(started, cancel, release)

    def slow() -> str:
        started.set()
        release.wait()
        return "done anyway"

    result = run_agent(
        ScriptedModel([call("slow"), final("x")]), {"slow": slow}, "t", cancel=cancel
    )
    assert result.stop_reason == "cancelled"
    (observation,) = tool_results(result.transcript)
    assert (observation["is_error"], observation["content"]) == (False, "done anyway")
