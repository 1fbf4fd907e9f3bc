"""Claims in batches (`leases.claim_some`), on both databases: batches taken at once never
share a run nor pass a limit (SKIP LOCKED, BEGIN IMMEDIATE, the queue's lock).

The rules each batch obeys (priority then age, delays, queue limits counted with the runs
the batch took before, suspects alone) are tested on the in-memory store
(tests/unit/test_memory_claims.py, test_memory_queues.py) and, on both databases alike, by
tests/integration/test_store_contract.py.
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Text, cast, event, select, update

from runner import Runner
from runner.core.agent import load_agent
from runner.core.clock import ManualClock
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind
from runner.sql import leases
from runner.sql.schema import entries, runs

from .payload_agents import Hide
from .support import entry_rows

AGENTS = Path(__file__).resolve().with_name("agents.py")
AGENT = f"{AGENTS}:solver_agent"


def batch(runner: Runner, limit: int, owner: str = "tester:1:1", **kwargs: Any) -> list[str]:
    kwargs.setdefault("clock", runner.clock)
    taken = leases.claim_some(
        runner.engine, limit=limit, owner=owner, lease_seconds=30, max_resumes=3, **kwargs
    )
    return [claim.run.id for claim in taken]


def test_batches_taken_at_once_never_share_a_run_nor_pass_a_limit(db_url: str) -> None:
    """Four threads claim batches at once, each batch its own transaction: SKIP LOCKED on
    PostgreSQL, BEGIN IMMEDIATE on SQLite keep every run to one claimer; the queue's lock
    keeps the limited queue to its limit."""
    with Runner(db_url) as runner:
        runner.set_queue_limit("tight", 4)
        runner.submit_many(AGENT, [{"task": f"o{i}", "queue": "open"} for i in range(60)])
        runner.submit_many(AGENT, [{"task": f"t{i}", "queue": "tight"} for i in range(20)])
    start = threading.Barrier(4)
    taken: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def claimer(n: int) -> None:
        try:
            with Runner(db_url) as mine:
                start.wait(60)
                while got := batch(mine, 7, owner=f"claimer:{n}:1"):
                    with lock:
                        taken.extend(got)
        except BaseException as exc:  # told to the test below
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    assert len(taken) == len(set(taken)) == 64
    with Runner(db_url) as runner:
        by_queue = Counter(runner.row(run_id).queue for run_id in taken)
    assert by_queue == {"open": 60, "tight": 4}


def test_a_batch_reads_its_queued_runs_in_one_select(db_url: str) -> None:
    """The queued runs a batch takes are read (and locked) ahead in one SELECT, not one per
    run; taken in claim order, a full queue's runs passed over as before."""
    with Runner(db_url) as runner:
        runner.set_queue_limit("tight", 2)
        ids = runner.submit_many(
            AGENT, [{"task": f"t{i}", "queue": "tight" if i % 2 else "open"} for i in range(12)]
        ).ids
        selects: list[str] = []

        def seen(_c: Any, _cursor: Any, statement: str, *_: Any) -> None:
            if statement.lstrip().upper().startswith("SELECT RUNS.ID, RUNS.AGENT"):
                selects.append(statement)

        event.listen(runner.engine, "before_cursor_execute", seen)
        try:
            taken = batch(runner, 8)
        finally:
            event.remove(runner.engine, "before_cursor_execute", seen)
    expected = [ids[i] for i in range(12) if i % 2 == 0] + [ids[1], ids[3]]
    assert sorted(taken) == sorted(expected[:8])
    assert taken == [run_id for run_id in ids if run_id in taken]  # claim order: oldest first
    # The queued runs once, the running and waiting ways once each: not one SELECT a run.
    assert len(selects) <= 4


def test_a_claim_asks_once_whether_a_holder_of_many_runs_here_is_dead(
    db_url: str, monkeypatch: Any
) -> None:
    """A busy worker's orphan scan finds its own live runs, one holder fifty times: whether
    that holder is dead is asked once a scan, not once a run."""
    from runner.sql import runnable

    asked: Counter[str] = Counter()
    is_dead = runnable.is_dead

    def counted(owner: str) -> bool:
        asked[owner] += 1
        return is_dead(owner)

    with Runner(db_url) as runner:
        ids = runner.submit_many(AGENT, [f"t{i}" for i in range(5)]).ids
        assert sorted(batch(runner, 5, owner=runner.owner)) == sorted(ids)
        monkeypatch.setattr(runnable, "is_dead", counted)
        assert batch(runner, 5) == []  # all five held by a live holder on this host
    assert asked == Counter({runner.owner: 1})


def test_fresh_runs_are_taken_by_one_update_as_a_claim_of_one_takes_them(db_url: str) -> None:
    """The fresh runs of a batch (nobody held them) are taken by ONE UPDATE for each new
    deadline among them, each row left as a claim of it alone leaves it: status, owner,
    epoch, lease, journal length, deadline from its budget, counters of resumes."""
    with Runner(db_url) as runner:
        alone = runner.submit(AGENT, "alone", max_seconds=60)
        timed = [runner.submit(AGENT, f"t{i}", max_seconds=60) for i in range(3)]
        plain = [runner.submit(AGENT, f"p{i}") for i in range(2)]
        clock = runner.clock
        leases.claim_run(
            runner.engine, alone, owner="tester:1:1", lease_seconds=30, max_resumes=3, clock=clock
        )
        updates: list[str] = []

        def seen(_c: Any, _cursor: Any, statement: str, *_: Any) -> None:
            if statement.lstrip().upper().startswith("UPDATE RUNS"):
                updates.append(statement)

        event.listen(runner.engine, "before_cursor_execute", seen)
        try:
            taken = leases.claim_some(
                runner.engine,
                limit=10,
                owner="tester:1:1",
                lease_seconds=30,
                max_resumes=3,
                clock=clock,
            )
        finally:
            event.remove(runner.engine, "before_cursor_execute", seen)
        assert [claim.run.id for claim in taken] == [*timed, *plain]  # in claim order
        assert len(updates) == 2  # the runs given a deadline, then the others
        with runner.engine.connect() as connection:
            rows = {
                row.id: row._mapping
                for row in connection.execute(select(runs).where(runs.c.id.in_(timed + plain)))
            }
            mine = connection.execute(select(runs).where(runs.c.id == alone)).one()._mapping

    def claimed(row: Any) -> dict[str, Any]:
        """What a claim sets, its times less the claim's own time."""
        at = row["leased_at"]
        values = {name: row[name] for name in CLAIM_SETS}
        values["lease_expires_at"] -= at
        values["last_seen_at"] -= at
        values["updated_at"] -= at
        if values["deadline"] is not None:
            values["deadline"] -= at
        return values

    for claim in taken:
        # Its task journaled by the claim (entry 0): its journal is one entry long.
        assert (claim.epoch, claim.next_seq, claim.stalled) == (1, 1, 0)
        assert claim.task is not None and claim.task.content == claim.run.task
        assert claim.run.lease_epoch == 1 and claim.run.status == "running"
        expected = claimed(mine)
        if claim.run.id in plain:
            expected["deadline"] = None
        assert claimed(rows[claim.run.id]) == expected


def test_a_batch_reading_its_queue_again_finds_none_it_took(db_url: str) -> None:
    """A batch whose runs read ahead ran out on a full queue's run reads the queued runs
    again: those it took (updated together, later) are updated first, not found again."""
    with Runner(db_url) as runner:
        runner.set_queue_limit("tight", 1)
        ids = [
            runner.submit(AGENT, task, queue=queue)
            for task, queue in (("o0", "open"), ("o1", "open"), ("t0", "tight"), ("t1", "tight"))
        ]
        later = runner.submit(AGENT, "o2", queue="open")
        taken = batch(runner, 4)
    assert taken == [ids[0], ids[1], ids[2], later]


# The columns a claim sets (leases.take).
CLAIM_SETS = (
    "status", "lease_owner", "lease_epoch", "lease_expires_at", "last_seen_at", "resumes",
    "stalled_resumes", "progress_seq", "deadline", "updated_at",
)  # fmt: skip


def test_a_fresh_runs_task_is_journaled_by_its_claim_as_its_journal_would(db_url: str) -> None:
    """A batch journals each fresh run's task in its own transaction (its journal then writes
    nothing for it): the run's journal, once it ran, is the one a run claimed alone writes
    (its task written by its journal), entry for entry."""
    agent = load_agent(AGENT)
    with Runner(db_url) as runner:
        alone = runner.submit(AGENT, "what is 2 + 3?")
        together = runner.submit(AGENT, "what is 2 + 3?")
        one = leases.claim_run(
            runner.engine, alone, owner="tester:1:1", lease_seconds=30, max_resumes=3
        )
        assert one is not None and one.task is None and one.next_seq == 0
        (claim,) = leases.claim_some(
            runner.engine, limit=10, owner="tester:1:1", lease_seconds=30, max_resumes=3
        )
        assert claim.run.id == together and claim.task is not None
        written = entry_rows(runner.engine, together)
        assert [(r["seq"], r["kind"], r["content"], r["lease_epoch"]) for r in written] == [
            (0, "task", "what is 2 + 3?", 1)
        ]
        # Its journal is not read: the claim hands the task over (a row changed behind its
        # back shows it was not read).
        with runner.engine.begin() as connection:
            connection.execute(
                update(entries).where(entries.c.run_id == together).values(content="unread")
            )
        with runner.store.open_journal(claim, lease_seconds=30) as journal:
            assert [e.content for e in journal.recorded()] == ["what is 2 + 3?"]
        with runner.engine.begin() as connection:
            connection.execute(
                update(entries).where(entries.c.run_id == together).values(content="what is 2 + 3?")
            )
        first = runner.execute(one, agent)
        second = runner.execute(claim, agent)
        assert first.output == second.output and first.steps == second.steps
        kept = ("seq", "step", "kind", "tool", "attempt", "is_error", "content", "lease_epoch")

        def journal(run_id: str) -> list[tuple[object, ...]]:
            return [tuple(r[k] for k in kept) for r in entry_rows(runner.engine, run_id)]

        assert journal(together) == journal(alone)
        assert [r["kind"] for r in entry_rows(runner.engine, together)].count("task") == 1


# Tasks as they come: plain, non-ASCII, and what a JSON text escapes (quotes, a backslash,
# a new line, a tab).
TASKS = ("what is 2 + 3?", "déjà vu ✓ 🙂", 'say "hi"\\ then\n\tstop')


@pytest.mark.parametrize("codec", [False, True], ids=["plain", "codec"])
def test_a_batchs_tasks_are_the_rows_a_runs_own_journal_writes(db_url: str, codec: bool) -> None:
    """The rows a batch claim writes for its fresh runs' tasks (PostgreSQL: one statement, one
    JSON parameter) are, column by column and byte for byte (each as its text), the rows
    each run's own journal writes for its task, with a user's codec sealing the content or
    not."""
    clock = ManualClock()
    codecs = [Hide()] if codec else None
    with Runner(db_url, clock=clock, codecs=codecs) as runner:
        alone = [runner.submit(AGENT, task) for task in TASKS]
        together = [runner.submit(AGENT, task) for task in TASKS]
        for run_id in alone:
            claim = leases.claim_run(
                runner.engine, run_id, owner="t:1:1", lease_seconds=30, max_resumes=3, clock=clock
            )
            with runner.store.open_journal(claim, lease_seconds=30) as journal:
                journal.append(Entry(EntryKind.TASK, 0, Counters(), content=claim.run.task))
        taken = leases.claim_some(
            runner.engine, limit=10, owner="t:1:1", lease_seconds=30, max_resumes=3, clock=clock
        )
        # Submitted in the same instant of the manual clock: claimed in the order of their
        # ids, whose tails are random within a millisecond, not in the order submitted.
        assert sorted(claim.run.id for claim in taken) == sorted(together)
        assert all(claim.task is not None for claim in taken)
        columns = [cast(column, Text) for column in entries.c if column.name != "run_id"]
        with runner.engine.connect() as connection:

            def row(run_id: str) -> tuple[object, ...]:
                found = select(*columns).where(entries.c.run_id == run_id)
                return tuple(connection.execute(found).one())

            written = [row(run_id) for run_id in together]
            expected = [row(run_id) for run_id in alone]
    assert written == expected
    content = [c.name for c in entries.c if c.name != "run_id"].index("content")
    assert (written[0][content] == TASKS[0]) is not codec  # the codec sealed what it was given


def test_a_run_whose_claimer_died_after_the_claim_is_taken_over_with_its_task_once(
    db_url: str,
) -> None:
    """The claim's transaction journaled the task; its claimer died before writing anything
    more (its lease lapses): the next claim takes the run over from that journal, and the
    run ends with its task journaled once."""
    clock = ManualClock()
    agent = load_agent(AGENT)
    with Runner(db_url, clock=clock) as runner:
        run_id = runner.submit(AGENT, "what is 2 + 3?")
        (dead,) = leases.claim_some(
            runner.engine, limit=1, owner="dead:1:1", lease_seconds=30, max_resumes=3, clock=clock
        )
        assert dead.task is not None
        clock.advance(31)
        (taken,) = leases.claim_some(
            runner.engine, limit=1, owner="alive:2:1", lease_seconds=30, max_resumes=3, clock=clock
        )
        assert (taken.run.id, taken.epoch, taken.next_seq, taken.task) == (run_id, 2, 1, None)
        assert taken.stalled == 0  # the task was progress since the claim before
        done = runner.execute(taken, agent)
        kinds = [r["kind"] for r in entry_rows(runner.engine, run_id)]
    assert done.stop_reason == "final"
    assert kinds[0] == "task" and kinds.count("task") == 1 and kinds[-1] == "final"
