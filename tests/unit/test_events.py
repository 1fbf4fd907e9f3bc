"""`Runner.events` on the in-memory store: where a stream starts, where a follow ends."""

from __future__ import annotations

import asyncio
import queue
import threading

import pytest

from runner import Agent, Event, Runner, RunNotFound, tool
from runner.testing import InMemoryStore, ScriptedModel, call, final

WAIT = 60.0  # only a broken stream waits this long


@tool(approval=True)
def delete(path: str) -> str:
    return f"deleted {path}"


def _agent() -> Agent:
    return Agent(ScriptedModel([call("delete", path="a"), final("done")]), {"delete": delete})


def test_events_after_a_position_and_the_end_of_a_follow() -> None:
    with Runner(store=InMemoryStore()) as runner:
        assert runner.run(_agent(), "clean up", id="d").waiting is not None
        kinds = ["task", "action", "wait"]
        assert [str(e.entry.kind) for e in runner.events("d")] == kinds
        assert [e.position for e in runner.events("d", after=0)] == [1, 2]
        assert list(runner.events("d", after=2)) == []
        # A waiting run ends a follow only when asked to (the CLI's `tail` asks).
        waited = runner.events("d", follow=True, until_waiting=True)
        assert [e.position for e in waited] == [0, 1, 2]
        assert waited.position == 2
        with pytest.raises(RunNotFound):
            runner.events("nope")


def test_a_follower_goes_through_a_wait_to_the_run_s_end() -> None:
    with Runner(store=InMemoryStore()) as runner:
        runner.run(_agent(), "clean up", id="d")
        seen: queue.Queue[Event | None] = queue.Queue()
        stream = runner.events("d", after=1, follow=True, poll_seconds=0.01)

        def follow() -> None:
            for event in stream:
                seen.put(event)
            seen.put(None)

        follower = threading.Thread(target=follow)
        follower.start()
        assert seen.get(timeout=WAIT).position == 2  # type: ignore[union-attr]
        runner.approve("d")
        assert runner.resume("d", agent=_agent()).output == "done"
        rest = []
        while (event := seen.get(timeout=WAIT)) is not None:
            rest.append(event)
        follower.join(timeout=WAIT)
        assert [str(e.entry.kind) for e in rest] == ["answer", "observation", "final"]
        assert [e.position for e in rest] == [3, 4, 5]


def test_close_ends_a_follow_and_async_for_reads_the_same_events() -> None:
    with Runner(store=InMemoryStore()) as runner:
        runner.run(_agent(), "clean up", id="d")
        stream = runner.events("d", follow=True, poll_seconds=WAIT)
        stream.close()
        assert [e.position for e in stream] == [0, 1, 2]  # what is there, then the end

        async def read() -> list[int]:
            return [e.position async for e in runner.events("d", after=0)]

        assert asyncio.run(read()) == [1, 2]
