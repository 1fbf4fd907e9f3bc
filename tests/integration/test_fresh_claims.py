"""A run that `Runner.run` starts is inserted claimed, its task journaled, in one commit, and
its claim is made of what was written: the same run a read gives back, the same claim a
claim of the queued run would have given."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from runner import Agent, Runner
from runner.core.clock import utc_now
from runner.core.journal import EntryKind
from runner.core.status import RunStatus
from runner.sql import fresh_claims, leases
from runner.sql import runs as store
from runner.store.rows import new_run


@pytest.fixture
def runner(db_url: str) -> Iterator[Runner]:
    with Runner(db_url) as opened:
        yield opened


def fresh(run_id: str, task: str, **budgets: object) -> dict[str, object]:
    return new_run(
        run_id=run_id,
        agent="pkg.mod:agent",
        agent_name="agent",
        release="r1",
        task=task,
        budgets={"max_steps": 5, **budgets},
        at=utc_now(),
        queue="q",
        priority=3,
    )


@pytest.mark.parametrize("budgets", [{}, {"max_seconds": 30}])
def test_the_claim_is_the_run_as_read_back_and_as_a_claim_of_it_queued_gives(
    runner: Runner, budgets: dict[str, object]
) -> None:
    task = "a task with ✓ and\nlines"
    claim = fresh_claims.create_claimed(
        runner.engine, fresh("made", task, **budgets), owner="w:1", lease_seconds=60, max_resumes=3
    )
    assert claim is not None
    assert claim.run == store.get_run(runner.engine, "made")
    assert claim.run.status is RunStatus.RUNNING and claim.run.task == task
    assert (claim.epoch, claim.next_seq, claim.crash_loop, claim.stalled) == (1, 1, False, 0)
    assert (claim.run.deadline is None) is ("max_seconds" not in budgets)
    # Its task is entry 0 of its journal, written under the claim's epoch.
    [(entry, epoch)] = store.load_entries(runner.engine, "made")
    assert (entry.kind, entry.content, epoch) == (EntryKind.TASK, task, 1)
    assert claim.task is not None and claim.task.content == task

    # The same run created queued and claimed the long way: the same row but for the
    # moments each was written at.
    assert store.create_run(
        runner.engine, **{"run_id": "queued", **_args(fresh("x", task, **budgets))}
    )
    other = leases.claim_run(runner.engine, "queued", owner="w:1", lease_seconds=60, max_resumes=3)
    moments = (
        "created_at",
        "updated_at",
        "lease_expires_at",
        "leased_at",
        "last_seen_at",
        "deadline",
    )
    same = {name: getattr(claim.run, name) for name in moments}
    assert replace(other.run, id="made", root_id="made", **same) == claim.run
    assert (other.epoch, other.next_seq) == (claim.epoch, 0)  # it journals its task itself


def _args(row: dict[str, object]) -> dict[str, object]:
    return {
        "agent": row["agent"],
        "agent_name": row["agent_name"],
        "release": row["release"],
        "task": row["task"],
        "budgets": row["budgets"],
        "queue": row["queue"],
        "priority": row["priority"],
    }


def test_an_id_that_exists_writes_nothing(runner: Runner) -> None:
    first = fresh_claims.create_claimed(
        runner.engine, fresh("twice", "one"), owner="w:1", lease_seconds=60, max_resumes=3
    )
    assert first is not None
    again = fresh_claims.create_claimed(
        runner.engine, fresh("twice", "two"), owner="w:2", lease_seconds=60, max_resumes=3
    )
    assert again is None
    assert store.get_run(runner.engine, "twice").lease_owner == "w:1"
    assert [e.content for e, _ in store.load_entries(runner.engine, "twice")] == ["one"]


def test_a_run_started_here_commits_its_start_and_task_once(runner: Runner) -> None:
    from sqlalchemy import event

    commits: list[int] = []
    event.listen(runner.engine, "commit", lambda _c: commits.append(1))

    def answer(_transcript: object) -> dict[str, str]:
        return {"type": "final", "content": "done"}

    result = runner.run(Agent(answer, {}), "go", id="once", max_steps=3)
    assert result.stop_reason == "final"
    # The start (the run, claimed, and its task), then the final answer with the run's end.
    assert len(commits) == 2
    kinds = [e.kind for e, _ in store.load_entries(runner.engine, "once")]
    assert kinds == [EntryKind.TASK, EntryKind.FINAL]


def test_a_runner_that_allows_no_resume_at_all_gives_the_run_up_as_any_claim_would(
    runner: Runner,
) -> None:
    claim = fresh_claims.create_claimed(
        runner.engine, fresh("never", "t"), owner="w:1", lease_seconds=60, max_resumes=-1
    )
    assert claim is not None and claim.crash_loop
    assert store.get_run(runner.engine, "never").stop_reason == "crash_loop"
