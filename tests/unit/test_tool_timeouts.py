"""Tool timeouts: per tool and run-wide, as error observations."""

from __future__ import annotations

import math
import threading
import time

from runner import run_agent, tool
from tests.unit.scripted_models import TOOLS, Model


def test_a_tool_timeout_is_an_error_observation(release: threading.Event) -> None:
    @tool(timeout=0.1)
    def slow(q: object) -> str:
        release.wait(10)
        return "late"

    r = run_agent(Model(final_after=1), {"search": slow}, "t")
    assert r.stop_reason == "final"
    assert r.transcript[2] == {
        "role": "tool",
        "name": "search",
        "content": "TimeoutError: search took longer than 0.1s",
        "is_error": True,
    }


def test_run_wide_tool_timeout(release: threading.Event) -> None:
    def slow(q: object) -> str:
        release.wait(10)
        return "late"

    r = run_agent(Model(), {"search": slow}, "t", tool_timeout=0.05)
    # Three timeouts in a row: more than max_consecutive_errors=2. (A tool let run to its
    # end would have returned "late", not an error.)
    assert (r.stop_reason, r.steps) == ("tool_errors", 3)
    assert all(m["is_error"] for m in r.transcript if m["role"] == "tool")
    assert "took longer than 0.05s" in r.transcript[-1]["content"]


def test_tool_timeouts_count_toward_the_error_streak(release: threading.Event) -> None:
    @tool(timeout=0.05)
    def slow(q: object) -> str:
        release.wait(10)
        return "late"

    r = run_agent(Model(), {"search": slow}, "t", max_consecutive_errors=0)
    assert (r.stop_reason, r.steps) == ("tool_errors", 1)


def test_a_tools_own_timeout_wins_over_the_run_wide_one() -> None:
    @tool(timeout=5)
    def patient(q: object) -> str:
        time.sleep(0.15)
        return "done"

    r = run_agent(Model(final_after=1), {"search": patient}, "t", tool_timeout=0.05)
    assert r.transcript[2]["content"] == "done"
    assert r.transcript[2]["is_error"] is False


def test_a_fast_tool_under_a_timeout_returns_normally() -> None:
    r = run_agent(Model(final_after=1), TOOLS, "t", tool_timeout=5)
    assert r.transcript[2] == {
        "role": "tool",
        "name": "search",
        "content": "results for 1",
        "is_error": False,
    }


def test_a_tools_own_timeout_error_keeps_its_message() -> None:
    def flaky(q: object) -> str:
        raise TimeoutError("upstream did not answer")

    r = run_agent(Model(final_after=1), {"search": flaky}, "t", tool_timeout=5)
    assert r.transcript[2]["content"] == "TimeoutError: upstream did not answer"
    r = run_agent(Model(final_after=1), {"search": flaky}, "t", max_seconds=30)
    assert r.transcript[2]["content"] == "TimeoutError: upstream did not answer"


def test_an_async_tools_own_timeout_error_keeps_its_message() -> None:
    async def flaky(q: object) -> str:
        raise TimeoutError("upstream did not answer")

    r = run_agent(Model(final_after=1), {"search": flaky}, "t", tool_timeout=5)
    assert r.transcript[2]["content"] == "TimeoutError: upstream did not answer"


def test_a_huge_tool_timeout_is_no_limit() -> None:
    def sleepy(q: object) -> str:
        time.sleep(0.01)
        return "ok"

    for limit in (math.inf, 1e12):
        r = run_agent(Model(final_after=1), {"search": sleepy}, "t", tool_timeout=limit)
        assert r.transcript[2]["content"] == "ok"
        r = run_agent(Model(final_after=1), {"search": tool(timeout=limit)(sleepy)}, "t")
        assert r.transcript[2]["content"] == "ok"
