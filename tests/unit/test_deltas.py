"""Deltas in memory: how a model call's pieces are numbered and handed on, and a follower
of a run on the in-memory store that gets them before the answer, none left after it."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from runner import Agent, DeltaEvent, Event, Runner, run_agent
from runner.core.clock import utc_now
from runner.core.deltas import Delta, current_stream, streaming
from runner.store.delta_writer import Put
from runner.testing import InMemoryStore
from tests.conditions import wait_until

WAIT = 60.0


class Sink:
    def __init__(self) -> None:
        self.deltas: list[Delta] = []
        self.flushes = 0

    def delta(self, delta: Delta) -> None:
        self.deltas.append(delta)

    def flush(self) -> None:
        self.flushes += 1


def test_each_call_numbers_its_pieces_from_zero_and_drops_any_after_its_end() -> None:
    sink = Sink()
    assert current_stream() is None
    with streaming(sink, 3):
        stream = current_stream()
        assert stream is not None
        stream.emit("a")
        stream.emit("")  # nothing to show: dropped
        stream.emit('{"x"', part="arguments", call=1, tool="add")
    assert current_stream() is None and sink.flushes == 1
    stream.emit("late")  # a reading thread given up on: dropped
    with streaming(sink, 3):  # a retry of the call begins again at 0
        current_stream().emit("b")  # type: ignore[union-attr]
    assert sink.deltas == [
        Delta(3, 0, "a"),
        Delta(3, 1, '{"x"', "arguments", 1, "add"),
        Delta(3, 0, "b"),
    ]
    with streaming(None, 4):  # no sink (run_agent): no stream
        assert current_stream() is None


def test_run_agent_gives_a_streaming_model_no_stream() -> None:
    def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        assert current_stream() is None
        return {"type": "final", "content": "ok"}

    assert run_agent(model, {}, "hi").output == "ok"


def test_a_follower_on_the_memory_store_gets_the_pieces_before_the_answer() -> None:
    gate = threading.Event()

    def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        stream = current_stream()
        assert stream is not None
        stream.emit("4")
        stream.emit("2")
        assert gate.wait(WAIT)
        return {"type": "final", "content": "42"}

    store = InMemoryStore()
    with Runner(store=store) as runner:
        done = threading.Thread(target=runner.run, args=(Agent(model), "?"), kwargs={"id": "m"})
        done.start()
        wait_until(lambda: len(store.deltas.rows) == 2, what="two stored deltas")
        seen: list[Event | DeltaEvent] = []
        stream = runner.events("m", follow=True, deltas=True, poll_seconds=0.01)
        follower = threading.Thread(target=lambda: seen.extend(stream))
        follower.start()
        wait_until(lambda: len(seen) == 3, what="the task and two deltas")
        gate.set()
        done.join(WAIT)
        follower.join(WAIT)
        assert [e.kind for e in seen] == ["entry", "delta", "delta", "entry"]
        assert [e.delta.text for e in seen if isinstance(e, DeltaEvent)] == ["4", "2"]
        wait_until(lambda: store.deltas.rows == [], what="the deltas deleted")


def test_a_reader_resuming_after_a_call_s_action_gets_none_of_its_late_deltas() -> None:
    store = InMemoryStore()
    with Runner(store=store) as runner:
        runner.run(Agent(lambda t: {"type": "final", "content": "hi"}), "?", id="r")
        # Deltas of step 1 not deleted yet (the writer's thread is a moment behind).
        store.deltas.write([Put("r", Delta(1, 0, "h"), utc_now())])
        assert [e.kind for e in runner.events("r", deltas=True)] == ["entry", "delta", "entry"]
        # Resuming after the answer (position 1): that call is over, its pieces are not news.
        assert list(runner.events("r", after=1, deltas=True)) == []
        assert [e.kind for e in runner.events("r", after=0, deltas=True)] == ["delta", "entry"]


def test_async_for_gives_the_same_deltas() -> None:
    store = InMemoryStore()
    with Runner(store=store) as runner:
        runner.run(Agent(lambda t: {"type": "final", "content": "hi"}), "?", id="a")
        store.deltas.write([Put("a", Delta(2, n, str(n)), utc_now()) for n in range(3)])

        async def read() -> list[str]:
            return [
                e.delta.text if isinstance(e, DeltaEvent) else str(e.entry.kind)
                async for e in runner.events("a", deltas=True)
            ]

        assert asyncio.run(read()) == ["task", "final", "0", "1", "2"]
