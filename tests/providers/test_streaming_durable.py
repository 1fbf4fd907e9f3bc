"""A durable run whose adapter streams, on SQLite and PostgreSQL: a follower reads the pieces
while the stream is stopped halfway, the journal has nothing of the call until it ends, and
then records the same rows as the same run unstreamed; no delta is left."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from runner import Agent, DeltaEvent, Event, Runner, tool
from runner.core.journal import EntryKind
from tests.conditions import wait_until
from tests.providers.fake_servers import (
    FakeServer,
    anthropic_message,
    openai_completion,
    text_block,
    tool_use,
)
from tests.providers.test_streaming import MAKERS

WAIT = 60.0


@tool(idempotent=True)
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def _bodies(provider: str) -> list[dict[str, Any]]:
    if provider == "openai":
        return [
            openai_completion("Adding.", calls=[("call_1", "add", '{"a": 2, "b": 3}')]),
            openai_completion("The sum is 5."),
        ]
    return [
        anthropic_message(text_block("Adding."), tool_use("toolu_1", "add", {"a": 2, "b": 3})),
        anthropic_message(text_block("The sum is 5.")),
    ]


def _rows(runner: Runner, run_id: str) -> list[tuple[Any, ...]]:
    return [
        (str(e.kind), e.step, e.content, e.tool, e.args, e.counters)
        for e, _ in runner.store.load_entries(run_id)
    ]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_streamed_run_is_followed_live_and_journals_what_an_unstreamed_one_does(
    server: FakeServer, db_url: str, provider: str
) -> None:
    make, events = MAKERS[provider]
    first, last = _bodies(provider)
    hold = threading.Event()
    server.reply(first).reply(last)  # the run that does not stream
    server.stream(events(first, size=3), hold=hold, hold_after=6).stream(events(last))
    with Runner(db_url) as runner:
        plain = runner.run(Agent(make(server, False), {"add": add}), "2 + 3?", id="plain")
        done = threading.Thread(
            target=runner.run,
            args=(Agent(make(server, True), {"add": add}), "2 + 3?"),
            kwargs={"id": "live"},
        )
        done.start()
        wait_until(lambda: runner.store.deltas_after("live", 0, 100), what="the first deltas")
        seen: list[Event | DeltaEvent] = []
        stream = runner.events("live", follow=True, deltas=True)
        follower = threading.Thread(target=lambda: seen.extend(stream))
        follower.start()
        wait_until(lambda: any(e.ephemeral for e in seen), what="a delta followed")
        # Halfway through the stream: the journal has the task, nothing of the call.
        assert [str(e.kind) for e, _ in runner.store.load_entries("live")] == ["task"]
        hold.set()
        done.join(WAIT)
        follower.join(WAIT)
        assert runner.get("live").output == plain.output == "The sum is 5."
        assert _rows(runner, "live") == _rows(runner, "plain")
        # The follower saw each call's pieces before its action.
        kinds = [e.kind if isinstance(e, DeltaEvent) else str(e.entry.kind) for e in seen]
        action = kinds.index(str(EntryKind.ACTION))
        assert "delta" in kinds[1:action] and kinds[-1] == "final"
        # Each call's pieces in order; a follower slower than a call's end may miss its last
        # pieces (deleted once the action is journaled): the action that follows has them.
        for step, whole in ((1, "Adding."), (2, "The sum is 5.")):
            pieces = [
                e.delta
                for e in seen
                if isinstance(e, DeltaEvent) and e.delta.step == step and e.delta.part == "text"
            ]
            assert whole.startswith("".join(d.text for d in pieces))
            assert [d.ordinal for d in pieces] == sorted(d.ordinal for d in pieces)
        assert any(isinstance(e, DeltaEvent) and e.delta.step == 1 for e in seen)
        wait_until(lambda: not runner.store.deltas_after("live", 0, 100), what="no delta left")
