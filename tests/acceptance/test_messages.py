"""Acceptance: a message reaches a run exactly once with real processes SIGKILLed around its
delivery, on SQLite and PostgreSQL (`db_url`).

- The worker: a `runner resume` process executes the run, held in its step-1 tool while the
  test sends a message with `runner send`; opened, the worker reaches the step boundary
  and is killed just before the delivery's commit, or just after it. Another process
  resumes the run: the journal holds the message once, the `messages` row points at that
  entry, and the model (its own ledger, outside the database) saw it once, before step 2.
- The sender: `runner send --key K` killed inside its transaction (nothing sent) or right
  after its commit (sent, never reported), then run again with the same key: one message,
  read once. A finished run refuses a message (exit 1, one line) and takes it with
  --revive.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conditions import scaled

from .harness import (
    KILLED,
    TIMEOUT,
    cli,
    cli_env,
    described,
    journal,
    one_line_error,
    run_row,
    start,
    wait_for,
)

AGENT = f"{Path(__file__).with_name('message_agents.py')}:listener"


def messages_of(db_url: str, run_id: str) -> list[dict[str, object]]:
    from sqlalchemy import select

    from runner.sql.database import open_engine
    from runner.sql.schema import messages

    engine = open_engine(db_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                select(messages).where(messages.c.run_id == run_id).order_by(messages.c.number)
            )
            return [dict(row._mapping) for row in rows]
    finally:
        engine.dispose()


def delivered(db_url: str, run_id: str) -> list[dict[str, object]]:
    """The run's `message` entries."""
    return [row for row in journal(db_url, run_id) if row["kind"] == "message"]


def views(ledger: Path) -> list[list[str]]:
    """The user turns the model was shown, one list per model call."""
    log = ledger / "seen.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.parametrize("fault", ["before_message_commit", "after_message_commit"])
def test_a_worker_killed_around_the_delivery_delivers_the_message_once(
    db_url: str, ledger: Path, fault: str
) -> None:
    gate = ledger / "gate"
    submitted = cli("submit", AGENT, "task", "--id", "m1", db_url=db_url, ledger=ledger)
    assert submitted.returncode == 0, described(submitted)
    worker = start("resume", "m1", env=cli_env(db_url, ledger, fault=fault, gate=gate), cwd=ledger)
    try:
        wait_for(lambda: (ledger / "held").exists(), what="the step-1 tool to start")
        sent = cli("send", "m1", "hello", "--key", "k1", db_url=db_url, ledger=ledger)
        assert sent.returncode == 0, described(sent)
        assert "sent message 1 (key k1) to run m1 (running)" in sent.stdout
        gate.touch()
        _, said = worker.communicate(timeout=scaled(TIMEOUT))
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert worker.returncode == KILLED, said

    inbox = messages_of(db_url, "m1")
    assert [(m["idempotency_key"], m["body"]) for m in inbox] == [("k1", "hello")]
    if fault == "before_message_commit":
        # Killed before the commit: nothing of the delivery is anywhere, the message waits.
        assert delivered(db_url, "m1") == [] and inbox[0]["delivered_seq"] is None
        assert run_row(db_url, "m1")["undelivered_messages"] == 1
    else:
        # Killed after it: the entry and its mark, together; nothing waits any more.
        [entry] = delivered(db_url, "m1")
        assert inbox[0]["delivered_seq"] == entry["seq"]
        assert run_row(db_url, "m1")["undelivered_messages"] == 0
    assert views(ledger) == [["task"]]  # the model was asked once, before the message

    resumed = cli(
        "resume", "m1", db_url=db_url, ledger=ledger, env=cli_env(db_url, ledger, gate=gate)
    )
    assert resumed.returncode == 0, described(resumed)
    assert resumed.stdout.strip() == "hello"

    rows = journal(db_url, "m1")
    assert [(r["kind"], r["step"]) for r in rows] == [
        ("task", 0),
        ("action", 1),
        ("observation", 1),
        ("message", 2),
        ("final", 2),
    ]
    [entry] = delivered(db_url, "m1")
    assert (entry["idempotency_key"], entry["content"], entry["role"]) == ("k1", "hello", "user")
    assert [m["delivered_seq"] for m in messages_of(db_url, "m1")] == [entry["seq"]]
    assert run_row(db_url, "m1")["undelivered_messages"] == 0
    # What the model really saw: the message once, at the step after the one it came in.
    assert views(ledger) == [["task"], ["task", "hello"]]
    shown = cli("show", "m1", db_url=db_url, ledger=ledger)
    assert "  <- hold [ok]  held\nmessage   hello  (key k1)\nanswer    hello" in shown.stdout


@pytest.mark.parametrize("fault", ["before_message_sent", "after_message_sent"])
def test_a_sender_killed_and_retried_with_its_key_sends_once(
    db_url: str, ledger: Path, fault: str
) -> None:
    gate = ledger / "gate"
    gate.touch()
    submitted = cli("submit", AGENT, "task", "--id", "m2", db_url=db_url, ledger=ledger)
    assert submitted.returncode == 0, described(submitted)

    killed = cli("send", "m2", "hello", "--key", "k1", db_url=db_url, ledger=ledger, fault=fault)
    assert killed.returncode == KILLED, described(killed)
    assert killed.stdout == ""  # it never said whether the message went
    sent_before = fault == "after_message_sent"
    assert len(messages_of(db_url, "m2")) == (1 if sent_before else 0)

    again = cli("send", "m2", "hello", "--key", "k1", db_url=db_url, ledger=ledger)
    assert again.returncode == 0, described(again)
    if sent_before:
        assert "message 1 (key k1) was sent to run m2 before: sent once" in again.stdout
    else:
        assert "sent message 1 (key k1) to run m2 (queued)" in again.stdout
    assert [m["idempotency_key"] for m in messages_of(db_url, "m2")] == ["k1"]
    assert run_row(db_url, "m2")["undelivered_messages"] == 1
    waiting = cli("show", "m2", db_url=db_url, ledger=ledger)
    assert "messages  1 message sent, read before the run's next step" in waiting.stdout

    done = cli("resume", "m2", db_url=db_url, ledger=ledger, env=cli_env(db_url, ledger, gate=gate))
    assert done.returncode == 0, described(done)
    assert done.stdout.strip() == "hello"
    assert [r["idempotency_key"] for r in delivered(db_url, "m2")] == ["k1"]
    assert views(ledger) == [["task", "hello"], ["task", "hello"]]

    # Finished now: a message is refused in one line, exit 1, and nothing is sent.
    refused = cli("send", "m2", "more", db_url=db_url, ledger=ledger)
    assert refused.returncode == 1
    assert "run m2 is finished (final)" in one_line_error(refused.stderr)
    assert len(messages_of(db_url, "m2")) == 1
    revived = cli("send", "m2", "more", "--revive", "--key", "k2", db_url=db_url, ledger=ledger)
    assert revived.returncode == 0, described(revived)
    assert run_row(db_url, "m2")["status"] == "queued"
    finished = cli(
        "resume", "m2", db_url=db_url, ledger=ledger, env=cli_env(db_url, ledger, gate=gate)
    )
    assert finished.stdout.strip() == "hello | more"
    assert [r["idempotency_key"] for r in delivered(db_url, "m2")] == ["k1", "k2"]
