"""Leases and fencing: one worker at a time per run, takeovers fence the old holder out, a
dead local owner frees its lease at once, and the heartbeat keeps a slow run's lease."""

from __future__ import annotations

import os
import socket
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, update

from runner import Agent, LeaseHeld, LeaseLost, Runner, StopReason
from runner.core.clock import ManualClock, utc_now
from runner.core.counters import Counters
from runner.core.journal import Stop
from runner.sql import lease_renewals, leases
from runner.sql import runs as store
from runner.sql.journal import SqlJournal
from runner.sql.schema import runs
from runner.store.owner import owner_name, this_process
from runner.testing import FunctionModel

from .support import (
    DEAD_OWNER,
    TOOLS,
    Transcript,
    count_entries,
    died_with,
    entry_rows,
    observations,
    solver,
    task_entry,
    tool_action,
)

ANOTHER_HOST = "another-host.example:4242:123"


def slowly(model: Any, seconds: float) -> Any:
    def slow(transcript: Transcript) -> Any:
        time.sleep(seconds)
        return model(transcript)

    return slow


def queued(engine: Any, run_id: str) -> None:
    assert store.create_run(
        engine, run_id=run_id, agent=None, agent_name=None, release=None, task="2+3?", budgets={}
    )


def expire(engine: Any, run_id: str) -> None:
    set_expiry(engine, run_id, datetime.now(UTC) - timedelta(seconds=5))


def set_expiry(engine: Any, run_id: str, at: datetime) -> None:
    with engine.begin() as connection:
        connection.execute(update(runs).where(runs.c.id == run_id).values(lease_expires_at=at))


# -- one worker at a time -----------------------------------------------------------------------


def test_resumes_started_together_let_exactly_one_proceed(db_url: str) -> None:
    model = FunctionModel(slowly(solver, 0.2))
    agent = Agent(model, TOOLS)
    with Runner(db_url) as setup:
        queued(setup.engine, "race")
    start = threading.Barrier(3)
    outcomes: list[Any] = []
    lock = threading.Lock()

    def resume() -> None:
        with Runner(db_url) as runner:
            start.wait(60)
            try:
                outcome: Any = runner.resume("race", agent=agent)
            except LeaseHeld as exc:
                outcome = exc
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=resume) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    results = [o for o in outcomes if not isinstance(o, LeaseHeld)]
    refused = [o for o in outcomes if isinstance(o, LeaseHeld)]
    assert len(results) == 1 and len(refused) == 2
    assert (results[0].stop_reason, results[0].output, results[0].steps) == ("final", "5", 2)
    assert "steal" in str(refused[0])
    assert model.calls == 2  # nobody else asked the model anything
    with Runner(db_url) as check:
        rows = entry_rows(check.engine, "race")
        run = check.row("race")
    assert [r["kind"] for r in rows] == ["task", "action", "observation", "final"]
    assert {r["lease_epoch"] for r in rows} == {1}
    assert (run.lease_epoch, run.resumes) == (1, 0)


def test_steal_takes_over_and_the_old_holder_is_fenced(db_url: str) -> None:
    in_step_two, go_on = threading.Event(), threading.Event()

    def old_model(transcript: Transcript) -> dict[str, Any]:
        if not observations(transcript):
            return {"type": "tool", "name": "add", "args": {"a": 2, "b": 3}}
        in_step_two.set()
        assert go_on.wait(60)
        return {"type": "final", "content": "from the old holder"}

    def new_model(transcript: Transcript) -> dict[str, Any]:
        return {"type": "final", "content": f"from the thief, after {observations(transcript)}"}

    outcome: list[Any] = []

    def old_holder() -> None:
        with Runner(db_url) as runner:
            try:
                outcome.append(runner.run(Agent(old_model, TOOLS), "2+3?", id="stolen"))
            except LeaseLost as exc:
                outcome.append(exc)

    thread = threading.Thread(target=old_holder)
    thread.start()
    try:
        assert in_step_two.wait(60)
        with Runner(db_url) as thief:
            with pytest.raises(LeaseHeld, match="steal"):
                thief.resume("stolen", agent=Agent(new_model, TOOLS))
            counted = FunctionModel(new_model)
            result = thief.resume("stolen", agent=Agent(counted, TOOLS), steal=True)
            written = count_entries(thief.engine, "stolen")
    finally:
        go_on.set()
        thread.join(60)

    assert not thread.is_alive()
    (old,) = outcome
    assert isinstance(old, LeaseLost)
    assert counted.calls == 1  # step 1 was the old holder's, replayed
    assert result.stop_reason == "final"
    assert str(result.output).startswith("from the thief")
    with Runner(db_url) as check:
        rows = entry_rows(check.engine, "stolen")
        run = check.row("stolen")
    # The old holder's answer was refused: nothing it tried after the steal is in the table.
    assert len(rows) == written == 4
    assert [(r["kind"], r["lease_epoch"]) for r in rows] == [
        ("task", 1),
        ("action", 1),
        ("observation", 1),
        ("final", 2),
    ]
    assert "old holder" not in str([r["content"] for r in rows])
    assert (run.output, run.lease_epoch, run.resumes) == (result.output, 2, 1)


def test_a_zombie_journal_writes_nothing(db_url: str) -> None:
    with Runner(db_url) as runner:
        engine = runner.engine
        queued(engine, "z")
        first = leases.claim_run(engine, "z", owner=ANOTHER_HOST, lease_seconds=30, max_resumes=3)
        with SqlJournal(engine, first, lease_seconds=30) as zombie:
            zombie.append(task_entry("2+3?"))
            # The zombie stalls past its lease: another worker claims the run.
            expire(engine, "z")
            [second] = leases.claim_some(
                engine, limit=1, owner="worker-2:1:1", lease_seconds=30, max_resumes=3
            )
            assert second.run.id == "z"
            assert second.epoch == first.epoch + 1

            before = count_entries(engine, "z")
            action = tool_action("z", 1, "add", {"a": 2, "b": 3}, Counters())
            with pytest.raises(LeaseLost):
                zombie.append(action)
            with pytest.raises(LeaseLost):
                zombie.finish(Stop(StopReason.FINAL, output="zombie"), Counters(steps=1))
            assert count_entries(engine, "z") == before == 1
            run = runner.row("z")
            assert (run.status, run.output, run.lease_owner) == ("running", None, "worker-2:1:1")

        # The new holder writes at the very seq the zombie was refused.
        with SqlJournal(engine, second, lease_seconds=30) as holder:
            holder.append(action)
        rows = entry_rows(engine, "z")
    assert [(r["seq"], r["lease_epoch"]) for r in rows] == [(0, 1), (1, 2)]


def test_the_heartbeat_of_a_fenced_journal_notices(db_url: str) -> None:
    with Runner(db_url) as runner:
        engine = runner.engine
        queued(engine, "hb")
        first = leases.claim_run(engine, "hb", owner=ANOTHER_HOST, lease_seconds=30, max_resumes=3)
        zombie = SqlJournal(engine, first, lease_seconds=30)
        assert zombie.beat() and not zombie.lost.is_set()
        leases.claim_run(
            engine, "hb", owner="thief:1:1", lease_seconds=30, max_resumes=3, steal=True
        )
        assert not zombie.beat()
        assert zombie.lost.is_set()
        with pytest.raises(LeaseLost):
            zombie.append(task_entry("2+3?"))
        assert count_entries(engine, "hb") == 0


# -- whose lease is live --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("owner", "expired", "free"),
    [
        pytest.param(DEAD_OWNER, False, True, id="dead-local-process"),
        pytest.param(owner_name(os.getpid(), "0"), False, True, id="recycled-pid"),
        # A dead-looking pid of another PID namespace (a container sharing this hostname)
        # or of an earlier boot: not ours to judge, so only its lease expiry frees it.
        pytest.param(
            f"{socket.gethostname()}:999999:1:4026530000.000000000000",
            False,
            False,
            id="other-pid-namespace",
        ),
        pytest.param(f"{socket.gethostname()}:999999:1", False, False, id="no-namespace-given"),
        pytest.param(
            f"{socket.gethostname()}:999999:1:4026530000.000000000000",
            True,
            True,
            id="other-pid-namespace-expired",
        ),
        pytest.param(this_process(), False, False, id="live-local-process"),
        pytest.param(ANOTHER_HOST, False, False, id="other-host-live"),
        pytest.param(ANOTHER_HOST, True, True, id="other-host-expired"),
        pytest.param(this_process(), True, True, id="live-local-expired"),
    ],
)
def test_who_may_take_a_lease(db_url: str, owner: str, expired: bool, free: bool) -> None:
    with Runner(db_url) as runner:
        engine = runner.engine
        queued(engine, "l")
        leases.claim_run(engine, "l", owner=owner, lease_seconds=3600, max_resumes=3)
        if expired:
            expire(engine, "l")
        if free:
            claim = leases.claim_run(engine, "l", owner="next:1:1", lease_seconds=60, max_resumes=3)
            assert (claim.epoch, claim.run.lease_owner) == (2, "next:1:1")
        else:
            with pytest.raises(LeaseHeld):
                leases.claim_run(engine, "l", owner="next:1:1", lease_seconds=60, max_resumes=3)
            assert runner.row("l").lease_owner == owner


def test_a_dead_local_owner_frees_the_run_at_once(db_url: str) -> None:
    with Runner(db_url) as runner:
        action = tool_action("dead", 1, "add", {"a": 2, "b": 3}, Counters())
        died_with(runner.engine, "dead", "2+3?", [action])  # its lease runs for an hour
        assert runner.row("dead").lease_expires_at > datetime.now(UTC) + timedelta(minutes=59)
        result = runner.resume("dead", agent=Agent(solver, TOOLS))  # no steal needed
    assert (result.stop_reason, result.steps) == ("final", 2)


def test_a_worker_takes_a_dead_local_workers_run_at_once(db_url: str) -> None:
    """A claim takes a live lease whose holder died on this host, and no other."""
    with Runner(db_url) as runner:
        engine = runner.engine
        for run_id, holder in (("held-here", runner.owner), ("held-away", ANOTHER_HOST)):
            queued(engine, run_id)
            leases.claim_run(engine, run_id, owner=holder, lease_seconds=3600, max_resumes=3)
        action = tool_action("dead", 1, "add", {"a": 2, "b": 3}, Counters())
        died_with(runner.engine, "dead", "2+3?", [action])  # a lease for an hour
        before = runner.row("dead")
        [claim] = leases.claim_some(
            engine, limit=1, owner="sibling:1:1", lease_seconds=30, max_resumes=3
        )
        assert claim.run.id == "dead"
        assert claim.epoch == before.lease_epoch + 1
        assert claim.run.lease_owner == "sibling:1:1" and claim.run.resumes == before.resumes + 1
        # The live holders, here and on another host, keep their runs.
        again = leases.claim_some(
            engine, limit=1, owner="sibling:1:1", lease_seconds=30, max_resumes=3
        )
        assert again == []


# -- the heartbeat ------------------------------------------------------------------------------


def test_the_heartbeat_keeps_the_lease_during_a_slow_tool(db_url: str) -> None:
    """A tool that runs past its lease keeps the run: the heartbeat renewed it. Time is a
    ManualClock that the tool moves on; only the beats run on real (fast) time."""
    clock = ManualClock()
    lease = 30.0
    rival_claims: list[Any] = []

    with Runner(db_url, lease_seconds=lease, clock=clock, heartbeat_seconds=0.01) as runner:

        def renewed_past(moment: datetime) -> bool:
            expiry = runner.row("slow").lease_expires_at
            return expiry is not None and expiry > moment

        def slow_add(a: int, b: int) -> int:
            first_expiry = runner.row("slow").lease_expires_at
            assert first_expiry is not None
            for _ in range(3):  # 3 x 25 s: well past the first 30 s lease
                clock.advance(25)
                now = utc_now(clock)
                # Wait for a beat (an event, not an expiry): the lease moves past now.
                deadline = time.monotonic() + 10
                while not renewed_past(now + timedelta(seconds=lease - 1)):
                    assert time.monotonic() < deadline, "the heartbeat never renewed"
                    time.sleep(0.005)
                rival_claims.append(
                    leases.claim_some(
                        runner.engine,
                        limit=1,
                        owner="rival:1:1",
                        lease_seconds=30,
                        max_resumes=3,
                        clock=clock,
                    )
                )
                with pytest.raises(LeaseHeld):
                    leases.claim_run(
                        runner.engine,
                        "slow",
                        owner="rival:1:1",
                        lease_seconds=30,
                        max_resumes=3,
                        clock=clock,
                    )
            assert utc_now(clock) > first_expiry + timedelta(seconds=40)
            return a + b

        result = runner.run(Agent(solver, {"add": slow_add}), "2+3?", id="slow")
        run = runner.row("slow")
        epochs = {r["lease_epoch"] for r in entry_rows(runner.engine, "slow")}

    assert (result.stop_reason, result.output) == ("final", "5")
    assert rival_claims == [[], [], []]
    assert epochs == {1}
    assert (run.lease_owner, run.lease_expires_at) == (None, None)


def test_a_database_blip_in_the_heartbeat_keeps_the_lease(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first two beats fail with a real driver error (a database file that cannot be
    # opened), well inside the lease; the third renews it. A slow, non-idempotent tool call
    # is in flight throughout: it must end with its own observation, not OutcomeUnknown.
    unreachable = create_engine(f"sqlite:///{tmp_path / 'gone' / 'runner.db'}")
    renew_leases = lease_renewals.renew_leases
    beats: list[str] = []
    recovered = threading.Event()

    def blipping_renew(engine: Any, held: dict[str, int], *rest: Any) -> dict[str, bool]:
        if len(beats) < 2:
            beats.append("failed")
            return renew_leases(unreachable, held, *rest)  # raises
        kept = renew_leases(engine, held, *rest)
        beats.append(f"renewed: {'blip' in kept}")
        recovered.set()
        return kept

    monkeypatch.setattr(lease_renewals, "renew_leases", blipping_renew)

    def transfer(amount: int) -> str:
        # Returns once the heartbeat has come through the blip, however slow the machine.
        if not recovered.wait(60):
            raise RuntimeError(f"the heartbeat never renewed the lease: {beats}")
        return f"sent {amount}"

    def model(transcript: Transcript) -> dict[str, Any]:
        seen = observations(transcript)
        if not seen:
            return {"type": "tool", "name": "transfer", "args": {"amount": 5}}
        return {"type": "final", "content": seen[-1]["content"]}

    try:
        with Runner(db_url, lease_seconds=0.6) as runner:
            result = runner.run(Agent(model, {"transfer": transfer}), "pay", id="blip")
            rows = entry_rows(runner.engine, "blip")
            run = runner.row("blip")
    finally:
        unreachable.dispose()

    assert beats[:3] == ["failed", "failed", "renewed: True"]
    assert (result.stop_reason, result.output) == ("final", "sent 5")
    (observed,) = [r for r in rows if r["kind"] == "observation"]
    assert (observed["content"], bool(observed["is_error"]), observed["attempt"]) == (
        "sent 5",
        False,
        1,
    )
    assert {r["lease_epoch"] for r in rows} == {1}  # never lost, never taken over
    assert (run.lease_epoch, run.resumes) == (1, 0)


@pytest.mark.parametrize(
    "db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_a_journal_write_renews_the_lease_on_postgres(db_url: str) -> None:
    # The fenced insert's CTE renews the lease once a third of it is spent, so a run that
    # writes often needs no heartbeat commit. The journal is not entered: no heartbeat runs.
    with Runner(db_url) as runner:
        engine = runner.engine
        queued(engine, "w")
        claim = leases.claim_run(engine, "w", owner=ANOTHER_HOST, lease_seconds=30, max_resumes=3)
        journal = SqlJournal(engine, claim, lease_seconds=30)
        # 25 s of a 30 s lease spent: this write is due to renew it.
        set_expiry(engine, "w", datetime.now(UTC) + timedelta(seconds=5))
        before_write = datetime.now(UTC)
        journal.append(task_entry("2+3?"))
        renewed = runner.row("w").lease_expires_at

        # Far from spent: the write leaves the expiry as it is (a HOT update).
        far = datetime.now(UTC) + timedelta(hours=1)
        set_expiry(engine, "w", far)
        journal.append(tool_action("w", 1, "add", {"a": 2, "b": 3}, Counters()))
        untouched = runner.row("w").lease_expires_at
    assert renewed is not None and renewed >= before_write + timedelta(seconds=30)
    assert untouched == far


def test_a_heartbeat_never_renews_a_finished_run(db_url: str) -> None:
    with Runner(db_url) as runner:
        result = runner.run(Agent(solver, TOOLS), "2+3?", id="done")
        run = runner.row("done")
        # A heartbeat that fires after the final commit (before the journal closes) finds
        # its epoch still current: it must not give the finished run a lease again.
        renewed = lease_renewals.renew_leases(runner.engine, {"done": run.lease_epoch}, 30)
        after = runner.row("done")
    assert result.stop_reason == "final"
    assert renewed == {}
    assert (after.lease_owner, after.lease_expires_at) == (None, None)


def test_renewing_with_a_stale_epoch_fails(db_url: str) -> None:
    with Runner(db_url) as runner:
        queued(runner.engine, "r")
        first = leases.claim_run(
            runner.engine, "r", owner=ANOTHER_HOST, lease_seconds=30, max_resumes=3
        )
        # Renewed, and not asked to cancel.
        assert lease_renewals.renew_leases(runner.engine, {"r": first.epoch}, 30) == {"r": False}
        leases.claim_run(
            runner.engine, "r", owner="thief:1:1", lease_seconds=30, max_resumes=3, steal=True
        )
        assert lease_renewals.renew_leases(runner.engine, {"r": first.epoch}, 30) == {}
