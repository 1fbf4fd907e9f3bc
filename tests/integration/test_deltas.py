"""Deltas on both databases: the pieces of a model call in flight reach a follower in
another thread through the `deltas` table, a reader who connects mid-call gets the durable
events and the pieces so far, and none is left once the call's action is journaled, once
a worker takes a crashed run up again, or once it is DELTA_KEEP_SECONDS old."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from runner import Agent, DeltaEvent, Event, ModelFatal, Runner
from runner.core.deltas import Delta, current_stream
from runner.sql import deltas as table
from runner.store.delta_writer import DELTA_KEEP_SECONDS, Put
from tests.conditions import wait_until

WAIT = 60.0


class GatedModel:
    """Streams `pieces` of its answer, then waits for `gate` before returning it whole."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces
        self.gate = threading.Event()
        self.calls = 0

    def __call__(self, transcript: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls += 1
        stream = current_stream()
        assert stream is not None  # the durable runner always gives one
        for piece in self.pieces:
            stream.emit(piece)
        assert self.gate.wait(WAIT)
        return {"type": "final", "content": "".join(self.pieces)}


def _stored(runner: Runner, run_id: str) -> list[Delta]:
    return [delta for _, delta in runner.store.deltas_after(run_id, 0, 1000)]


def test_a_follower_gets_the_pieces_then_the_answer_and_none_is_left(db_url: str) -> None:
    model = GatedModel(["Hel", "lo", " world"])
    with Runner(db_url) as runner:
        done = threading.Thread(target=runner.run, args=(Agent(model), "greet"), kwargs={"id": "g"})
        done.start()
        wait_until(lambda: _stored(runner, "g"), what="the first deltas")
        seen: list[Event | DeltaEvent] = []
        stream = runner.events("g", follow=True, deltas=True)
        follower = threading.Thread(target=lambda: seen.extend(stream))
        follower.start()
        wait_until(lambda: len(_stored(runner, "g")) == 3, what="three stored deltas")
        wait_until(lambda: sum(e.ephemeral for e in seen) == 3, what="three deltas followed")

        # A reader who connects now gets the durable events and the pieces so far.
        late = list(runner.events("g", deltas=True))
        assert [type(e).__name__ for e in late] == ["Event"] + ["DeltaEvent"] * 3
        pieces = [e for e in late if isinstance(e, DeltaEvent)]
        assert [(d.delta.step, d.delta.ordinal, d.delta.text) for d in pieces] == [
            (1, 0, "Hel"),
            (1, 1, "lo"),
            (1, 2, " world"),
        ]
        assert all(d.kind == "delta" and d.after == 0 for d in pieces)  # after the task

        model.gate.set()
        done.join(WAIT)
        follower.join(WAIT)
        kinds = [e.kind if e.ephemeral else str(e.entry.kind) for e in seen]  # type: ignore[union-attr]
        assert kinds[0] == "task" and kinds[-1] == "final"
        assert kinds[1:-1] == ["delta"] * 3
        # Deleted once the answer is journaled (by the writer's thread, just after).
        wait_until(lambda: _stored(runner, "g") == [], what="the deltas deleted")
        assert runner.get("g").output == "Hello world"


def test_what_a_crash_left_is_deleted_when_the_run_streams_again(db_url: str) -> None:
    model = GatedModel(["again"])
    with Runner(db_url) as runner:
        engine = runner.store.engine  # type: ignore[attr-defined]
        runner.run(Agent(model), "greet", id="c", max_steps=0)  # made, no step taken
        # What a worker killed mid-stream leaves: pieces of a call never journaled.
        now = datetime.now(UTC)
        table.write(engine, [Put("c", Delta(1, n, "stale"), now) for n in range(2)])
        assert len(_stored(runner, "c")) == 2
        done = threading.Thread(
            target=runner.resume, args=("c",), kwargs={"agent": Agent(model), "max_steps": 5}
        )
        done.start()
        wait_until(
            lambda: [d.text for d in _stored(runner, "c")] == ["again"], what="a fresh stream"
        )
        model.gate.set()
        done.join(WAIT)
        assert runner.get("c").output == "again"
        wait_until(lambda: _stored(runner, "c") == [], what="the deltas deleted")


def test_deltas_are_swept_once_they_are_older_than_they_are_kept(db_url: str) -> None:
    with Runner(db_url) as runner:
        engine = runner.store.engine  # type: ignore[attr-defined]
        now = datetime.now(UTC)
        old = now - timedelta(seconds=DELTA_KEEP_SECONDS + 1)
        table.write(
            engine,
            [
                Put("old", Delta(1, 0, "left by a crash"), old),
                Put("new", Delta(1, 0, "x"), now),
            ],
        )
        assert table.sweep(engine, now) == 1
        assert _stored(runner, "old") == []
        assert [d.text for d in _stored(runner, "new")] == ["x"]


def test_a_call_that_fails_mid_stream_leaves_no_delta_once_the_run_stops(db_url: str) -> None:
    def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        stream = current_stream()
        assert stream is not None
        stream.emit("half an ans")
        raise ModelFatal("the provider went away")

    with Runner(db_url) as runner:
        result = runner.run(Agent(model), "greet", id="f")
        assert result.stop_reason == "model_error"
        # No action was journaled: the run's end (it left this process) deletes them.
        wait_until(lambda: _stored(runner, "f") == [], what="the deltas deleted")
        assert [str(e.kind) for e, _ in runner.store.load_entries("f")] == ["task"]
