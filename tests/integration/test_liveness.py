"""Stalled runs, last seen, live counters, on SQLite and PostgreSQL.

`stalled` is derived when a run is read: a running run whose lease expired (on the clock
leases are measured on) or whose holder is a dead process on this host. Time is a
ManualClock: no test sleeps for an expiry.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from runner import Agent, Runner
from runner.core.clock import ManualClock
from runner.core.counters import Counters
from runner.core.status import RunStatus
from runner.history import read_only_query
from runner.sql import lease_renewals, leases
from runner.store.liveness import stall_reason

from .operating_agents import ref
from .support import died_with, observation, tool_action

ELSEWHERE = "another-host:4242:1:1.abc"  # a holder on another machine: only its lease tells


def submitted(runner: Runner, run_id: str) -> str:
    return runner.submit(ref("counter"), run_id, id=run_id)


def test_a_running_run_whose_lease_expired_is_stalled(db_url: str) -> None:
    clock = ManualClock()
    with Runner(db_url, clock=clock) as runner:
        submitted(runner, "held")
        claimed_at = runner.now()
        leases.claim_run(
            runner.engine, "held", owner=ELSEWHERE, lease_seconds=30, max_resumes=3, clock=clock
        )
        row = runner.row("held")
        assert (row.status, row.state) == (RunStatus.RUNNING, "running")
        assert row.last_seen_at == claimed_at
        assert [r.id for r in runner.list(state="running")] == ["held"]
        assert runner.list(state="stalled") == []

        clock.advance(20)  # the heartbeat renews the lease, and says when it was seen
        renewed = lease_renewals.renew_leases(runner.engine, {"held": row.lease_epoch}, 30, clock)
        assert renewed == {"held": False}  # renewed, and not asked to cancel
        assert runner.row("held").last_seen_at == claimed_at + timedelta(seconds=20)
        clock.advance(29)
        assert runner.row("held").state == "running"

        clock.advance(2)  # 31 s after the last renewal: nobody holds it any more
        row = runner.row("held")
        assert (row.status, row.state) == (RunStatus.RUNNING, "stalled")
        assert stall_reason(row, runner.now()) == "its lease expired"
        assert row.last_seen_at == claimed_at + timedelta(seconds=20)
        assert [r.id for r in runner.list(state="stalled")] == ["held"]
        assert runner.list(state="running") == []
        assert [r.state for r in runner.list()] == ["stalled"]
        # `status=running` is the stored status: it still includes the stalled run.
        assert [r.id for r in runner.list(status=RunStatus.RUNNING)] == ["held"]


def test_a_run_whose_holder_here_died_is_stalled_at_once(db_url: str) -> None:
    with Runner(db_url) as runner:
        died_with(runner.engine, "orphan", "t", [])  # its lease lasts an hour more
        row = runner.row("orphan")
        assert (row.status, row.state) == (RunStatus.RUNNING, "stalled")
        assert stall_reason(row, runner.now()) == "its holder's process is gone"
        assert [r.id for r in runner.list(state="stalled")] == ["orphan"]
        assert runner.list(state="running") == []
        # A live holder on this host is running, not stalled.
        submitted(runner, "alive")
        runner_owner = runner.owner
        leases.claim_run(
            runner.engine, "alive", owner=runner_owner, lease_seconds=3600, max_resumes=3
        )
        assert runner.row("alive").state == "running"
        assert [r.id for r in runner.list(state="running")] == ["alive"]
        assert [r.id for r in runner.list(state="stalled")] == ["orphan"]


def test_the_view_derives_stalled_from_the_lease_on_the_databases_clock(db_url: str) -> None:
    an_hour_ago = ManualClock(start=time.time() - 3600)
    with Runner(db_url) as runner:
        for run_id in ("expired", "live", "queued", "done"):
            submitted(runner, run_id)
        leases.claim_run(
            runner.engine, "expired", owner=ELSEWHERE, lease_seconds=30, max_resumes=3,
            clock=an_hour_ago,
        )  # fmt: skip
        leases.claim_run(runner.engine, "live", owner=ELSEWHERE, lease_seconds=600, max_resumes=3)
        runner.cancel("done")
        died_with(runner.engine, "dead-here", "t", [])
    with read_only_query(db_url, "SELECT id, status, state, last_seen_at FROM run_summary") as got:
        rows = {row[0]: row[1:] for row in got.rows}
    assert {run_id: row[:2] for run_id, row in rows.items()} == {
        "expired": ("running", "stalled"),
        "live": ("running", "running"),
        "queued": ("queued", "queued"),
        "done": ("finished", "finished"),
        # SQL cannot see a process die: only the lease, which lasts an hour more.
        "dead-here": ("running", "running"),
    }
    assert rows["queued"][2] is None and rows["live"][2] is not None


def test_counters_are_live_for_unfinished_runs_everywhere(db_url: str) -> None:
    with Runner(db_url) as runner:
        first = tool_action("half", 1, "add", {"a": 0, "b": 1}, Counters(), tokens=10)
        second = tool_action("half", 2, "add", {"a": 1, "b": 1}, first.counters, tokens=10)
        died_with(runner.engine, "half", "t", [first, observation(first, "1"), second])
        submitted(runner, "fresh")
        row = runner.row("half")
        assert (row.steps, row.tokens) == (2, 20)
        listed = {r.id: r for r in runner.list()}
        assert (listed["half"].steps, listed["half"].tokens) == (2, 20)
        assert (listed["fresh"].steps, listed["fresh"].tokens) == (0, 0)
        assert runner.get("half").steps == 2
    with read_only_query(db_url, "SELECT steps, tokens FROM run_summary WHERE id = 'half'") as got:
        assert list(got.rows) == [(2, 20)]


def test_last_seen_is_not_written_by_the_steps(db_url: str) -> None:
    clock = ManualClock(start=datetime(2026, 12, 1, tzinfo=UTC).timestamp())

    def slow(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        clock.advance(5)  # each model call takes five seconds
        if len(transcript) > 4:
            return {"type": "final", "content": "done"}
        return {"type": "tool", "name": "echo", "args": {"n": len(transcript)}}

    agent = Agent(slow, {"echo": lambda n: n}, max_repeats=None)
    with Runner(db_url, clock=clock, lease_seconds=600) as runner:
        assert runner.run(agent, "count", id="seen").stop_reason == "final"
        # Taken at the start; the steps wrote 15 seconds of entries, not last_seen_at.
        assert runner.row("seen").last_seen_at == datetime(2026, 12, 1, tzinfo=UTC)
    with read_only_query(db_url, "SELECT MAX(created_at) FROM entries") as got:
        (last,) = next(iter(got.rows))
    assert str(last).startswith("2026-12-01 00:00:15")


def test_ctrl_c_gives_the_run_back_at_once(db_url: str) -> None:
    def interrupted(n: int) -> str:
        raise KeyboardInterrupt  # what SIGINT raises in the main thread

    def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        if any(m["role"] == "tool" for m in transcript):
            return {"type": "final", "content": "after all"}
        return {"type": "tool", "name": "slow", "args": {"n": 1}}

    with Runner(db_url) as runner:
        try:
            runner.run(Agent(model, {"slow": interrupted}), "t", id="ctrl")
        except KeyboardInterrupt:
            pass
        else:
            raise AssertionError("the KeyboardInterrupt was swallowed")
        row = runner.row("ctrl")
        assert (row.status, row.state, row.lease_owner) == ("queued", "queued", None)
        # Not a takeover: resumed at once, with nothing counted against it.
        result = runner.resume("ctrl", agent=Agent(model, {"slow": lambda n: "done"}))
        assert (result.output, runner.row("ctrl").resumes) == ("after all", 0)
