"""Messages sent into runs (`Runner.send`), on the in-memory store and on both databases:
a message reaches a queued, running, waiting (or parked for a sub-agent) or finished
(revived) run as a user turn before its next model call, exactly once per key, in the
journal and the `messages` table alike; a run sent nothing journals exactly what it did
before.

Crashes of the worker and of the sender around the delivery are tested with real processes
in tests/acceptance/test_messages.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

from runner import Agent, Runner, ask_human, tool
from runner.core.clock import ManualClock
from runner.core.status import RunStatus
from runner.errors import CannotContinue, MessageRefused, RunFinished
from runner.testing import FunctionModel, InMemoryStore, ScriptedModel, call, final

from .message_agents import TEXT_REF, TYPED_REF

Transcript = list[dict[str, Any]]


@pytest.fixture(params=["memory", "database"])
def runner(request: pytest.FixtureRequest, db_url: str) -> Iterator[Runner]:
    """A runner on the in-memory store, or on the database of `db_url`."""
    if request.param == "memory":
        with Runner(store=InMemoryStore(clock=ManualClock(1_800_000_000.0))) as memory:
            yield memory
        return
    with Runner(db_url) as database:
        yield database


def users(transcript: Transcript) -> list[str]:
    return [m["content"] for m in transcript if m["role"] == "user"]


def echo(transcript: Transcript) -> dict[str, Any]:
    return {"type": "final", "content": " | ".join(users(transcript)[1:]) or "nothing said"}


def message_rows(runner: Runner, run_id: str) -> list[tuple[Any, ...]]:
    """The journal's message entries: (seq, step, key, content)."""
    return [
        (seq, entry.step, entry.idempotency_key, entry.content)
        for seq, entry in enumerate(runner.journal(run_id))
        if entry.kind == "message"
    ]


def inbox_table(runner: Runner, run_id: str) -> list[tuple[Any, ...]] | None:
    """The `messages` table's rows of the run (None on the in-memory store)."""
    if isinstance(runner.store, InMemoryStore):
        return None
    with runner.engine.connect() as connection:
        found = connection.execute(
            text(
                "SELECT number, idempotency_key, body, delivered_seq FROM messages"
                " WHERE run_id = :id ORDER BY number"
            ),
            {"id": run_id},
        )
        return [tuple(row) for row in found]


def test_a_queued_run_reads_its_messages_before_its_first_step(runner: Runner) -> None:
    run_id = runner.submit(TEXT_REF, "the task", id="queued")
    first = runner.send(run_id, "first", key="k1")
    second = runner.send(run_id, "second")
    assert (first.number, first.status, first.duplicate) == (1, RunStatus.QUEUED, False)
    assert second.number == 2 and second.key.startswith("m-")  # a new key, given back
    assert [m.key for m in runner.inbox(run_id)] == ["k1", second.key]
    assert runner.row(run_id).undelivered_messages == 2

    result = runner.resume(run_id)
    assert result.output == "first | second"
    assert users(result.transcript) == ["the task", "first", "second"]
    assert message_rows(runner, run_id) == [(1, 1, "k1", "first"), (2, 1, second.key, "second")]
    assert runner.inbox(run_id) == [] and runner.row(run_id).undelivered_messages == 0
    table = inbox_table(runner, run_id)
    assert table in (None, [(1, "k1", "first", 1), (2, second.key, "second", 2)])
    # What the model was shown is the journal's transcript, read back.
    assert runner.get(run_id).transcript == result.transcript


def test_a_running_run_reads_a_message_before_its_next_step(runner: Runner) -> None:
    sent: list[str] = []

    @tool
    def look(q: str) -> str:
        """Looks; meanwhile somebody sends the run a message."""
        sent.append(runner.send("running", "stop looking, answer now", key="hurry").key)
        assert runner.row("running").status is RunStatus.RUNNING
        return "nothing yet"

    def model(transcript: Transcript) -> dict[str, Any]:
        if transcript[-1]["role"] == "user" and len(transcript) > 1:
            return {"type": "final", "content": f"heard: {transcript[-1]['content']}"}
        return {"type": "tool", "name": "look", "args": {"q": str(len(transcript))}}

    result = runner.run(Agent(FunctionModel(model), {"look": look}), "look around", id="running")
    assert result.output == "heard: stop looking, answer now" and result.steps == 2
    roles = [m["role"] for m in result.transcript]
    assert roles == ["user", "assistant", "tool", "user", "assistant"]
    assert message_rows(runner, "running") == [(3, 2, "hurry", "stop looking, answer now")]
    assert inbox_table(runner, "running") in (None, [(1, "hurry", "stop looking, answer now", 3)])


def test_a_waiting_run_waits_for_its_answer_and_reads_the_message_after(runner: Runner) -> None:
    @tool(approval=True)
    def refund(amount: int) -> str:
        """Refunds."""
        return f"refunded {amount}"

    def model(transcript: Transcript) -> dict[str, Any]:
        if not any(m["role"] == "tool" for m in transcript):
            return {"type": "tool", "name": "refund", "args": {"amount": 5}}
        return {"type": "final", "content": " / ".join(str(m["content"]) for m in transcript[2:])}

    agent = Agent(FunctionModel(model), {"refund": refund})
    waiting = runner.run(agent, "refund 5", id="waiting")
    assert waiting.status is RunStatus.WAITING
    sent = runner.send("waiting", "and say sorry", key="sorry")
    assert sent.status is RunStatus.WAITING
    assert runner.row("waiting").status is RunStatus.WAITING  # it still waits for its answer
    assert runner.waiting_for("waiting") is not None
    runner.approve("waiting", by="ann")
    result = runner.resume("waiting", agent=agent)
    # The call's outcome first (the step it waited in), then the message, then the answer.
    assert result.output == "refunded 5 / and say sorry"
    assert message_rows(runner, "waiting")[0][1:] == (2, "sorry", "and say sorry")


def test_a_finished_run_refuses_a_message_unless_revived(runner: Runner) -> None:
    agent = Agent(FunctionModel(echo), name="echo")
    done = runner.run(agent, "say it", id="done")
    assert done.output == "nothing said"
    with pytest.raises(RunFinished, match=r"run done is finished \(final\).*--revive"):
        runner.send("done", "more")
    assert runner.inbox("done") == [] and inbox_table(runner, "done") in (None, [])

    sent = runner.send("done", "more", key="more", revive=True)
    assert (sent.revived, sent.status) == (True, RunStatus.QUEUED)
    # The same send again (a retry) finds the message; the run is revived once.
    again = runner.send("done", "more", key="more", revive=True)
    assert (again.duplicate, again.revived, again.number) == (True, False, 1)
    result = runner.resume("done", agent=agent)
    assert (result.output, result.steps) == ("more", 2)
    kinds = [str(entry.kind) for entry in runner.journal("done")]
    assert kinds == ["task", "final", "revived", "message", "final"]

    # A revival needs room: a run at its step cap is refused, nothing sent.
    capped = runner.run(agent, "one step", id="capped", max_steps=1)
    with pytest.raises(CannotContinue, match="max_steps 1 leaves no step"):
        runner.send("capped", "again", revive=True)
    assert runner.inbox("capped") == []
    sent = runner.send("capped", "again", revive=True, max_steps=2)
    assert runner.resume("capped", agent=agent).output == "again"
    assert capped.output == "nothing said" and sent.revived


def test_the_same_key_is_one_message_and_another_body_under_it_is_refused(
    runner: Runner,
) -> None:
    run_id = runner.submit(TEXT_REF, "task", id="keys")
    first = runner.send(run_id, "hello", key="k")
    again = runner.send(run_id, "hello", key="k")
    assert (again.duplicate, again.number, again.key) == (True, first.number, "k")
    with pytest.raises(MessageRefused, match="key k was sent to run keys with another message"):
        runner.send(run_id, "goodbye", key="k")
    assert runner.resume(run_id).output == "hello"
    delivered = runner.send(run_id, "hello", key="k")  # after delivery: still the one message
    assert delivered.duplicate and delivered.delivered_seq == 1
    assert message_rows(runner, run_id) == [(1, 1, "k", "hello")]


def test_a_message_must_fit_what_the_agent_accepts(runner: Runner) -> None:
    typed = runner.submit(TYPED_REF, "orders", id="typed")
    with pytest.raises(MessageRefused, match="accepts Order messages: quantity: "):
        runner.send(typed, '{"item": "tea"}')
    with pytest.raises(MessageRefused, match="accepts Order messages: message: Invalid JSON"):
        runner.send(typed, "two teas please")
    assert runner.inbox(typed) == []
    runner.send(typed, '{"item": "tea", "quantity": "2"}')  # validated, shown as JSON
    runner.send(typed, {"item": "milk", "quantity": 1})
    result = runner.resume(typed)
    assert result.output == '{"item": "tea", "quantity": 2} | {"item": "milk", "quantity": 1}'

    plain = runner.submit(TEXT_REF, "talk", id="plain")
    with pytest.raises(MessageRefused, match="accepts text messages, not dict"):
        runner.send(plain, {"item": "tea"})
    with pytest.raises(ValueError, match="must not be empty"):
        runner.send(plain, "   ")
    with pytest.raises(ValueError, match="at most 80 characters"):
        runner.send(plain, "hi", key="k" * 81)


def test_a_run_sent_nothing_journals_what_it_did_before(runner: Runner) -> None:
    agent = Agent(FunctionModel(echo))
    result = runner.run(agent, "quiet", id="quiet")
    assert [str(entry.kind) for entry in runner.journal("quiet")] == ["task", "final"]
    assert result.transcript == [
        {"role": "user", "content": "quiet"},
        {"role": "assistant", "content": "nothing said"},
    ]


def test_a_parent_parked_for_its_sub_agent_reads_a_message_after_the_child(db_url: str) -> None:
    """A run parked for a child run (a sub-agent's call) waits like a waiting run: a message
    sent meanwhile is read after the child's end, before the parent's next model call."""
    asking = Agent(
        ScriptedModel([call("ask_human", question="ok?"), final("checked")]),
        {"ask_human": ask_human},
        name="asker",
    )

    def lead(transcript: Transcript) -> dict[str, Any]:
        if not any(m["role"] == "tool" for m in transcript):
            return call("sub", task="check")
        return final(" / ".join(str(m["content"]) for m in transcript[2:]))

    agent = Agent(FunctionModel(lead), {"sub": asking.as_tool("sub")})
    with Runner(db_url) as runner:
        assert runner.run(agent, "t", id="lead-m").status is RunStatus.WAITING
        sent = runner.send("lead-m", "and report the cost", key="cost")
        assert sent.status is RunStatus.WAITING
        (kid,) = runner.store.child_runs("lead-m")
        runner.reply(kid.id, "yes", by="ann")
        runner.resume(kid.id, agent=asking)
        result = runner.resume("lead-m", agent=agent)
        assert message_rows(runner, "lead-m")[0][1:] == (2, "cost", "and report the cost")
    assert result.output == "checked / and report the cost"
