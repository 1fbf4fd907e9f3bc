"""Retention on both databases: the queues' rules delete finished runs (with their journals)
and nothing else, a small batch at a time, while other runs are being written.

Time is a parameter: each pass is given the moment it runs at (`prune_expired(now)`), so
"thirty days later" is an argument, not a wait.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from runner import Runner
from runner.core.status import RunStatus
from runner.history import prune_runs
from runner.sql import retention
from runner.sql.runs import insert_run
from runner.sql.schema import entries, runs
from runner.store.rows import new_run

AGENTS = Path(__file__).resolve().with_name("agents.py")
AGENT = f"{AGENTS}:solver_agent"
REFUND = f"{Path(__file__).resolve().parents[2] / 'examples' / 'refund.py'}:agent"
DAY = timedelta(days=1)


def finished(runner: Runner, run_id: str, queue: str = "default") -> str:
    runner.submit(AGENT, f"task {run_id}", id=run_id, queue=queue)
    assert runner.resume(run_id).stop_reason == "final"
    return run_id


def ids(runner: Runner) -> set[str]:
    with runner.engine.connect() as connection:
        return set(connection.execute(select(runs.c.id)).scalars())


def orphans(runner: Runner) -> int:
    """Journal entries whose run is gone (the cascade must leave none)."""
    with runner.engine.connect() as connection:
        return int(
            connection.execute(
                select(func.count())
                .select_from(entries)
                .where(~entries.c.run_id.in_(select(runs.c.id)))
            ).scalar_one()
        )


def test_no_rule_deletes_nothing(db_url: str) -> None:
    with Runner(db_url) as runner:
        finished(runner, "old")
        assert runner.prune_expired(runner.now() + 1000 * DAY).runs == 0
        assert ids(runner) == {"old"}


def test_keep_deletes_finished_runs_older_than_it_and_nothing_unfinished(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.set_retention("reports", keep=30 * 86400)
        finished(runner, "done-1", "reports")
        finished(runner, "done-2", "reports")
        finished(runner, "elsewhere")  # another queue, no rule
        runner.submit(AGENT, "queued", id="queued", queue="reports")
        assert runner.run(REFUND, "Refund order 1042", id="waiting").status == "waiting"
        assert runner.prune_expired(runner.now() + 29 * DAY).runs == 0  # not old enough
        expired = runner.prune_expired(runner.now() + 31 * DAY)
        assert (expired.runs, dict(expired.queues)) == (2, {"reports": 2})
        assert ids(runner) == {"elsewhere", "queued", "waiting"}
        assert orphans(runner) == 0
        assert runner.row("queued").status is RunStatus.QUEUED


def test_keep_runs_keeps_the_newest_finished_runs_of_the_queue(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.set_retention("q", keep_runs=2)
        for n in range(5):
            finished(runner, f"r{n}", "q")
        runner.submit(AGENT, "queued", id="queued", queue="q")
        assert runner.prune_expired().runs == 3
        assert ids(runner) == {"r3", "r4", "queued"}
        assert runner.prune_expired().runs == 0


def test_the_default_fills_each_rule_a_queue_leaves_unset(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.set_retention("*", keep=DAY, keep_runs=1)
        runner.set_retention("long", keep=100 * DAY)  # its own age; the default's count
        for queue in ("plain", "long"):
            for n in range(3):
                finished(runner, f"{queue}-{n}", queue)
        # A minute on: the count rules (1 each) apply; no run is a day old.
        assert runner.prune_expired(runner.now() + timedelta(minutes=1)).runs == 4
        assert ids(runner) == {"plain-2", "long-2"}
        # Two days on: the default's day takes plain's last; long keeps it a hundred days.
        assert runner.prune_expired(runner.now() + 2 * DAY).runs == 1
        assert ids(runner) == {"long-2"}
        rules = {info.name: (info.keep_seconds, info.keep_runs) for info in runner.queues()}
        assert rules["*"] == (86400, 1) and rules["long"] == (8640000, None)


def test_a_tree_with_a_run_not_finished_is_kept_whole(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.set_retention("*", keep_runs=0)
        finished(runner, "root")
        child = new_run(
            run_id="child",
            agent=AGENT,
            agent_name="solver",
            release=None,
            task="a sub-task",
            budgets={},
            at=runner.now(),
            parent_id="root",
            root_id="root",
        )
        assert insert_run(runner.engine, child)
        assert runner.prune_expired().runs == 0  # the root's tree still has a queued run
        assert runner.resume("child").stop_reason == "final"
        assert runner.prune_expired().runs == 2
        assert ids(runner) == set()


def test_each_batch_is_a_transaction_of_its_own(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.set_retention("q", keep_runs=0)
        for n in range(5):
            finished(runner, f"r{n}", "q")
        now = runner.now()
        one = retention.prune_expired(runner.engine, now, batch_size=2, batches=1)
        assert one.runs == 2 and len(ids(runner)) == 3  # the oldest first
        assert ids(runner) == {"r2", "r3", "r4"}
        rest = retention.prune_expired(runner.engine, now, batch_size=2, batches=5)
        assert rest.runs == 3 and ids(runner) == set()


@pytest.mark.parametrize(
    ("keep", "keep_runs"), [(-1, None), (None, -1), (None, 1.5), (float("inf"), None)]
)
def test_bad_rules_are_refused(db_url: str, keep: float | None, keep_runs: object) -> None:
    with Runner(db_url) as runner, pytest.raises(ValueError):
        runner.set_retention("q", keep=keep, keep_runs=keep_runs)  # type: ignore[arg-type]


def test_retention_deletes_only_what_it_should_while_runs_are_written(db_url: str) -> None:
    """Writers finish runs, queue runs and park runs waiting for an answer in two queues,
    while a pruner deletes every finished run of one queue and keeps the newest three of
    the other, over and over. No unfinished run, and no run of the other queue but the
    oldest, is ever deleted; no journal entry is left without its run."""
    with Runner(db_url) as runner:
        runner.set_retention("gone", keep_runs=0)
        runner.set_retention("kept", keep_runs=3)
    stop = threading.Event()
    errors: list[BaseException] = []
    made: dict[str, list[str]] = {"finished": [], "queued": [], "waiting": []}
    lock = threading.Lock()

    def writer(n: int) -> None:
        try:
            with Runner(db_url) as mine:
                for i in range(12):
                    queue = ("gone", "kept")[i % 2]
                    run_id = finished(mine, f"w{n}-{i}", queue)
                    mine.submit(AGENT, "later", id=f"q{n}-{i}", queue=queue)
                    with lock:
                        made["finished"].append(run_id)
                        made["queued"].append(f"q{n}-{i}")
                    if i % 4 == 0:
                        waiting = mine.run(REFUND, "Refund order 1042", id=f"a{n}-{i}")
                        assert waiting.status == "waiting"
                        with lock:
                            made["waiting"].append(f"a{n}-{i}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def pruner() -> None:
        try:
            with Runner(db_url) as mine:
                while not stop.is_set():
                    mine.prune_expired()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    writers = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    pruning = threading.Thread(target=pruner)
    pruning.start()
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join(300)
    stop.set()
    pruning.join(300)
    assert not errors, errors
    with Runner(db_url) as runner:
        runner.prune_expired()  # a last pass, with nothing written meanwhile
        left = ids(runner)
        assert set(made["queued"]) <= left and set(made["waiting"]) <= left
        for run_id in made["queued"] + made["waiting"]:
            assert runner.row(run_id).status is not RunStatus.FINISHED
        kept = runner.list(status=RunStatus.FINISHED, limit=1000)
        assert {row.queue for row in kept} == {"kept"}
        newest = sorted(
            (row for row in runner.list(limit=1000) if row.queue == "kept"),
            key=lambda row: row.finished_at or row.created_at,
        )
        assert len([row for row in newest if row.status is RunStatus.FINISHED]) == 3
        # Every journal left is whole (no entry of a deleted run, none missing of a kept one).
        assert orphans(runner) == 0
        with runner.engine.connect() as connection:
            spans = connection.execute(
                select(entries.c.run_id, func.min(entries.c.seq), func.max(entries.c.seq),
                       func.count()).group_by(entries.c.run_id)
            ).all()  # fmt: skip
        assert {run_id for run_id, *_ in spans} == left - set(made["queued"])  # none run yet
        assert all((low, high) == (0, n - 1) for _run_id, low, high, n in spans)


def test_a_worker_applies_the_rules_as_it_serves(db_url: str) -> None:
    from runner.service.worker import Worker

    with Runner(db_url) as runner:
        runner.set_retention("q", keep_runs=1)
        for n in range(3):
            finished(runner, f"r{n}", "q")
        runner.submit(AGENT, "to run", id="next", queue="q")
    Worker(db_url, once=True, queues=["q"]).serve()  # one pass at start, then the queue
    with Runner(db_url) as runner:
        assert ids(runner) == {"r2", "next"}
        assert runner.row("next").status is RunStatus.FINISHED


def test_export_archives_the_selection_a_rule_deletes(db_url: str) -> None:
    import json

    from runner.history import History

    with Runner(db_url) as runner:
        runner.set_retention("reports", keep=30 * 86400)
        for n in range(3):
            finished(runner, f"r{n}", "reports")
        finished(runner, "other")
        runner.submit(AGENT, "queued", id="queued", queue="reports")
        later = runner.now() + 31 * DAY
        lines: list[str] = []
        with History(db_url) as history:
            history.export(
                lines.append, queue="reports", finished_before=later - timedelta(days=30)
            )
        archived = {json.loads(line)["id"] for line in "".join(lines).splitlines()}
        expired = runner.prune_expired(later)
        assert archived == {"r0", "r1", "r2"} and expired.runs == 3
        assert ids(runner) == {"other", "queued"}


def test_prune_keeps_a_finished_child_while_its_parent_runs(db_url: str) -> None:
    """`runner prune` shares retention's tree rule (it deleted the child, whatever its
    tree): a finished sub-agent stays while a run of its tree is not finished."""
    with Runner(db_url) as runner:
        runner.submit(AGENT, "the parent", id="parent")  # queued: its tree goes on
        child = new_run(
            run_id="child",
            agent=AGENT,
            agent_name="solver",
            release=None,
            task="a sub-task",
            budgets={},
            at=runner.now(),
            parent_id="parent",
            root_id="parent",
        )
        assert insert_run(runner.engine, child)
        assert runner.resume("child").stop_reason == "final"
        later = datetime.now(UTC) + 1000 * DAY
        assert prune_runs(runner.engine, later, dry_run=True).runs == 0
        assert prune_runs(runner.engine, later).runs == 0
        assert ids(runner) == {"parent", "child"}
        assert runner.resume("parent").stop_reason == "final"
        pruned = prune_runs(runner.engine, later)
        assert pruned.runs == 2 and pruned.entries > 0
        assert ids(runner) == set() and orphans(runner) == 0


def test_a_queues_own_rules_beat_the_default(db_url: str) -> None:
    """The default (`*`) fills only what a queue leaves unset: a queue's own keep_runs (more
    than the default's) and keep (longer) are what apply to it."""
    with Runner(db_url) as runner:
        runner.set_retention("*", keep=DAY, keep_runs=1)
        runner.set_retention("big", keep=100 * DAY, keep_runs=3)
        for queue in ("plain", "big"):
            for n in range(4):
                finished(runner, f"{queue}-{n}", queue)
        assert runner.prune_expired(runner.now() + timedelta(minutes=1)).runs == 3 + 1
        assert ids(runner) == {"plain-3", "big-1", "big-2", "big-3"}
        assert runner.prune_expired(runner.now() + 2 * DAY).runs == 1  # plain's last: a day
        assert ids(runner) == {"big-1", "big-2", "big-3"}


@pytest.mark.postgres
def test_retention_checks_its_rules_again_in_the_delete(postgres_database: str) -> None:
    """Forced: between retention's pick of a finished child and its DELETE, a run starts
    in the child's tree (another connection, committed). The DELETE, its rules checked
    again, leaves the child (a PostgreSQL pick locks only the rows it picked)."""
    from sqlalchemy import event, text

    with Runner(postgres_database) as runner:
        with runner.engine.begin() as connection:
            connection.execute(text("TRUNCATE runs, entries, queues CASCADE"))
        runner.set_retention("*", keep_runs=0)
        finished(runner, "root")
        child = new_run(
            run_id="child", agent=AGENT, agent_name="solver", release=None, task="sub",
            budgets={}, at=runner.now(), parent_id="root", root_id="root",
        )  # fmt: skip
        assert insert_run(runner.engine, child)
        assert runner.resume("child").stop_reason == "final"
        started: list[str] = []

        def start_in_the_tree(connection, cursor, statement, *args) -> None:  # type: ignore[no-untyped-def]
            if statement.lstrip().upper().startswith("DELETE FROM RUNS") and not started:
                sibling = {**child, "id": "sibling", "parent_call_key": None}
                started.append("sibling")
                assert insert_run(runner.engine, sibling)  # its own connection, committed

        event.listen(runner.engine, "before_cursor_execute", start_in_the_tree)
        try:
            deleted = retention.prune_expired(runner.engine, runner.now(), batch_size=1, batches=1)
        finally:
            event.remove(runner.engine, "before_cursor_execute", start_in_the_tree)
        assert started == ["sibling"]  # the DELETE was reached, the sibling started before it
        assert deleted.runs == 0
        assert ids(runner) == {"root", "child", "sibling"}


def test_prune_picks_runs_by_when_they_finished(db_url: str) -> None:
    """Created long before the cutoff but finished after it: kept. Finished before it:
    pruned. (Neither creation nor last update is the measure.)"""
    from runner.core.clock import ManualClock

    clock = ManualClock()
    with Runner(db_url, clock=clock) as runner:
        start = runner.now()
        runner.submit(AGENT, "early", id="early")
        runner.submit(AGENT, "late", id="late")
        clock.advance(DAY.total_seconds())
        assert runner.resume("early").stop_reason == "final"
        clock.advance(9 * DAY.total_seconds())
        assert runner.resume("late").stop_reason == "final"
        assert runner.row("late").finished_at == start + 10 * DAY
        cutoff = start + 5 * DAY
        assert prune_runs(runner.engine, cutoff, dry_run=True).runs == 1
        assert prune_runs(runner.engine, cutoff).runs == 1
        assert ids(runner) == {"late"}
