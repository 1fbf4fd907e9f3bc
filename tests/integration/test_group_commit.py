"""Group commit (runner.sql.group_commit), on both databases: the writes of runs in flight
in one process share a transaction (SQLite) or one statement (PostgreSQL); each run goes on
only once that has committed; fencing holds per run; a failed write fails exactly the runs
whose entries it held.

Each test queues its writes while it holds the writer's turns itself (`Writer.held`: on
SQLite the file's), waits until every write is queued, then lets go: the next thread to get
the turn writes them all, so what shares a commit is decided by the test, not by the
machine's timing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, Text, cast, event, select

from runner import Agent, Runner
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind, Stop
from runner.core.stop_reasons import StopReason
from runner.errors import EntryRefused, LeaseLost
from runner.sql import cancels, driver, leases
from runner.sql import runs as store
from runner.sql.database import open_engine, upgrade
from runner.sql.journal import SqlJournal
from runner.sql.schema import entries
from runner.sql.writer import Writer
from tests.conditions import wait_until

from .support import Transcript, entry_rows, observations, task_entry, tool_action


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    engine = open_engine(db_url)
    upgrade(engine)
    yield engine
    engine.dispose()


def journals(engine: Engine, writer: Writer, count: int) -> list[SqlJournal]:
    """`count` claimed runs `r0`, `r1`, ..., each with its task written (alone)."""
    made = []
    for i in range(count):
        run_id = f"r{i}"
        store.create_run(
            engine, run_id=run_id, agent=None, agent_name=None, release=None, task="t",
            budgets={},
        )  # fmt: skip
        claim = leases.claim_run(engine, run_id, owner="w:1:1", lease_seconds=60, max_resumes=3)
        journal = SqlJournal(engine, claim, lease_seconds=60, writer=writer)
        journal.append(task_entry("t"))
        made.append(journal)
    return made


class Commits:
    """The engine's commits, counted (the journal's writes tell the event: test_write_path)."""

    def __init__(self, engine: Engine) -> None:
        self.count = 0
        self.fail: BaseException | None = None
        event.listen(engine, "commit", self._heard)

    def _heard(self, _connection: Any) -> None:
        self.count += 1
        if self.fail is not None:
            raise self.fail


def together(writer: Writer, engine: Engine, writes: dict[str, Any]) -> dict[str, Any]:
    """Start each write on its own thread while holding the file's turn; let go once all
    are queued; what each returned or raised, by name."""
    outcomes: dict[str, Any] = {}

    def run(name: str, write: Any) -> None:
        try:
            outcomes[name] = write()
        except Exception as exc:
            outcomes[name] = exc

    threads = [threading.Thread(target=run, args=item) for item in writes.items()]
    assert writer.group is not None
    with writer.held():
        for thread in threads:
            thread.start()
        wait_until(lambda: writer.group.queued() == len(writes), what="every write queued")  # type: ignore[union-attr]
    for thread in threads:
        thread.join()
    return outcomes


def action(journal: SqlJournal, step: int = 1) -> Any:
    return tool_action(journal.run_id, step, "add", {"a": step}, Counters(steps=step))


def kinds(engine: Engine, run_id: str) -> list[str]:
    return [row["kind"] for row in entry_rows(engine, run_id)]


def test_writes_queued_together_share_one_commit(engine: Engine) -> None:
    writer = Writer(engine)
    runs = journals(engine, writer, 5)
    commits = Commits(engine)
    group = writer.group
    assert group is not None
    before = (group.transactions, group.writes)
    outcomes = together(writer, engine, {j.run_id: lambda j=j: j.append(action(j)) for j in runs})
    assert outcomes == {j.run_id: None for j in runs}
    assert commits.count == 1  # five runs' entries, one transaction
    assert (group.transactions - before[0], group.writes - before[1]) == (1, 5)
    for journal in runs:
        assert kinds(engine, journal.run_id) == ["task", "action"]
        assert journal.seq == 2
    writer.close()


def test_each_run_hears_its_own_cancel_and_a_step_of_several_goes_in_whole(
    engine: Engine,
) -> None:
    """What each write reads back of its run comes from its own run's row, in the shared
    write too; a step of several calls (several rows of one run) goes in whole beside the
    other runs' entries; so does a run's last write, the run ended with it."""
    writer = Writer(engine)
    runs = journals(engine, writer, 4)
    cancels.request_cancel(engine, "r1")
    group = writer.group
    assert group is not None
    before = (group.transactions, group.writes)
    calls = [
        replace(tool_action("r2", 1, "add", {"a": i}, Counters()), call_id=f"c{i}") for i in (1, 2)
    ]
    writes = {j.run_id: lambda j=j: j.append(action(j)) for j in runs[:2]}
    writes["r2"] = lambda: runs[2].append_many(calls)
    writes["r3"] = lambda: runs[3].append_many(
        [Entry(EntryKind.FINAL, 1, Counters(steps=1), content="done", action_type="final")],
        Stop(StopReason.FINAL, output="done"),
    )
    outcomes = together(writer, engine, writes)
    assert outcomes == {"r0": None, "r1": None, "r2": None, "r3": None}
    # SQLite: all four in one transaction. PostgreSQL: in one statement, r3's end in it.
    assert (group.transactions - before[0], group.writes - before[1]) == (1, 4)
    assert [j.cancel_requested() for j in runs[:3]] == [False, True, False]
    assert kinds(engine, "r2") == ["task", "action", "action"]
    assert kinds(engine, "r3") == ["task", "final"]
    ended = store.find_run(engine, "r3")
    assert (ended.status, ended.stop_reason, ended.output) == ("finished", "final", "done")
    assert (ended.lease_owner, ended.lease_expires_at) == (None, None)
    assert {store.find_run(engine, j.run_id).status for j in runs[:3]} == {"running"}
    assert {store.find_run(engine, j.run_id).lease_owner for j in runs[:3]} == {"w:1:1"}
    writer.close()


def test_runs_ended_together_end_as_a_run_ended_alone(engine: Engine) -> None:
    # Every column a run's end sets (text past ASCII, a float, a flag, timestamps), beside
    # another run's entry: the shared write (PostgreSQL: one statement, its ends a JSON
    # parameter of their own) leaves each run's row as its own write leaves it.
    writer = Writer(engine)
    runs = journals(engine, writer, 4)
    counters = Counters(steps=1, tokens=2**40, cost=0.1)

    def ending(journal: SqlJournal) -> Any:
        final = Entry(EntryKind.FINAL, 1, counters, content="fini", action_type="final")
        stop = Stop(
            StopReason.MAX_STEPS, output='caf\u00e9 \u2014 "r\u00e9sum\u00e9"', error="\u26a0 cut",
            wrapped_up=True,
        )  # fmt: skip
        return lambda: journal.append_many([final], stop)

    alone = runs.pop()
    ending(alone)()
    group = writer.group
    assert group is not None
    before = (group.transactions, group.writes)
    writes = {j.run_id: ending(j) for j in runs[:2]}
    writes["r2"] = lambda: runs[2].append(action(runs[2]))
    outcomes = together(writer, engine, writes)
    assert outcomes == {"r0": None, "r1": None, "r2": None}
    assert (group.transactions - before[0], group.writes - before[1]) == (1, 3)  # shared
    ignored = ("id", "root_id", "created_at", "updated_at", "finished_at", "leased_at")
    ignored += ("last_seen_at", "lease_epoch")

    def row(run_id: str) -> dict[str, Any]:
        found = store.find_run(engine, run_id)
        return {k: v for k, v in vars(found).items() if k not in ignored and k[0] != "_"}

    mine = row(alone.run_id)
    assert mine["status"] == "finished" and mine["lease_owner"] is None
    assert (mine["stop_reason"], mine["wrapped_up"], mine["tokens"]) == ("max_steps", True, 2**40)
    for journal in runs[:2]:
        assert row(journal.run_id) == mine
        ended = store.find_run(engine, journal.run_id)
        assert ended.finished_at is not None and ended.updated_at == ended.finished_at
        assert kinds(engine, journal.run_id) == ["task", "final"]
    assert row("r2")["status"] == "running" and kinds(engine, "r2") == ["task", "action"]
    writer.close()


def test_a_fenced_out_run_ending_together_neither_writes_nor_ends(engine: Engine) -> None:
    writer = Writer(engine)
    runs = journals(engine, writer, 3)
    leases.claim_run(engine, "r1", owner="w:2:1", lease_seconds=60, max_resumes=3, steal=True)
    final = Entry(EntryKind.FINAL, 1, Counters(steps=1), content="done", action_type="final")
    writes = {
        j.run_id: lambda j=j: j.append_many([final], Stop(StopReason.FINAL, output="done"))
        for j in runs
    }
    outcomes = together(writer, engine, writes)
    assert outcomes["r0"] is None and outcomes["r2"] is None
    assert isinstance(outcomes["r1"], LeaseLost)
    assert kinds(engine, "r1") == ["task"]
    taken = store.find_run(engine, "r1")
    assert (taken.status, taken.lease_owner) == ("running", "w:2:1")
    assert store.find_run(engine, "r0").status == store.find_run(engine, "r2").status == "finished"
    writer.close()


@pytest.mark.parametrize(
    "db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_the_shared_statement_renews_only_the_leases_a_third_spent(engine: Engine) -> None:
    """PostgreSQL's one statement for several runs renews each run's lease as a run's own
    write does: once a third of it is spent, and not before (a lease far from its end is
    left as it is, and a longer one is never cut back to the write's)."""
    from datetime import UTC, datetime, timedelta

    from sqlalchemy import update

    from runner.sql.schema import runs as runs_table

    writer = Writer(engine)
    runs = journals(engine, writer, 3)
    far = datetime.now(UTC) + timedelta(hours=1)
    near = datetime.now(UTC) + timedelta(seconds=5)  # 55 s of the 60 s lease spent
    with engine.begin() as connection:
        for run_id, at in (("r0", far), ("r1", near), ("r2", near)):
            connection.execute(
                update(runs_table).where(runs_table.c.id == run_id).values(lease_expires_at=at)
            )
    group = writer.group
    assert group is not None
    before = (group.transactions, group.writes)
    written = datetime.now(UTC)
    outcomes = together(writer, engine, {j.run_id: lambda j=j: j.append(action(j)) for j in runs})
    assert outcomes == {"r0": None, "r1": None, "r2": None}
    assert (group.transactions - before[0], group.writes - before[1]) == (1, 3)  # shared
    expiry = {j.run_id: store.find_run(engine, j.run_id).lease_expires_at for j in runs}
    assert expiry["r0"] == far
    for run_id in ("r1", "r2"):
        renewed = expiry[run_id]
        assert renewed is not None and renewed >= written + timedelta(seconds=59), run_id
    writer.close()


@pytest.mark.parametrize(
    "db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_the_shared_statement_and_the_heartbeat_lock_runs_in_one_order(
    db_url: str, engine: Engine
) -> None:
    """A forced race: another transaction holds the middle run's row (r08 of 16); the
    shared statement of the 16 runs' writes starts, then a heartbeat renewing the same 16
    leases, both waiting for a lock. Let go, they finish one after the other: both lock
    in id order, so neither holds a row the other wants while it waits (in opposite orders
    each would hold one side of r08, and PostgreSQL would abort one: the heartbeat, whose
    session is set to detect a deadlock first)."""
    from sqlalchemy import text

    from runner.sql import lease_renewals

    writer = Writer(engine)
    runs = journals(engine, writer, 16)  # r0..r15: r10..r15 sort between r1 and r2
    ordered = sorted(j.run_id for j in runs)
    middle = ordered[8]
    epochs = {j.run_id: store.find_run(engine, j.run_id).lease_epoch for j in runs}
    beats = open_engine(db_url)

    @event.listens_for(beats, "connect")
    def quick_to_detect(dbapi_connection: Any, _record: Any) -> None:
        autocommit = dbapi_connection.autocommit
        dbapi_connection.autocommit = True
        dbapi_connection.execute("SET deadlock_timeout = '20ms'")
        dbapi_connection.autocommit = autocommit

    def waiting_for_locks() -> int:
        with engine.connect() as connection:
            return int(
                connection.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND datname = current_database()"
                    )
                ).scalar_one()
            )

    outcomes: dict[str, Any] = {}

    def write() -> None:
        writes = {j.run_id: lambda j=j: j.append(action(j)) for j in runs}
        outcomes.update(together(writer, engine, writes))

    def beat() -> None:
        try:
            outcomes["heartbeat"] = lease_renewals.renew_leases(beats, epochs, 60)
        except Exception as exc:
            outcomes["heartbeat"] = exc

    blocker = engine.connect()
    try:
        with blocker.begin():
            blocker.execute(text("SELECT id FROM runs WHERE id = :id FOR UPDATE"), {"id": middle})
            writing = threading.Thread(target=write)
            writing.start()
            wait_until(lambda: waiting_for_locks() == 1, what="the shared statement to wait")
            beating = threading.Thread(target=beat)
            beating.start()
            wait_until(lambda: waiting_for_locks() == 2, what="the heartbeat to wait too")
        writing.join(60)
        beating.join(60)
    finally:
        blocker.close()
        beats.dispose()
        writer.close()
    assert outcomes.pop("heartbeat") == {run_id: False for run_id in ordered}
    assert outcomes == {run_id: None for run_id in ordered}
    assert writer.group is not None and writer.group.transactions >= 1


def test_a_delivery_of_messages_by_a_worker_that_lost_the_run_is_fenced(db_url: str) -> None:
    """A worker whose run was taken over (it has not heard yet) goes to journal the message
    its last write heard of: refused (LeaseLost), nothing written, the message left for
    the worker that holds the run now."""
    with Runner(db_url) as runner:
        engine = runner.engine
        (journal,) = journals(engine, Writer(engine), 1)
        runner.send("r0", "change of plan", key="m1")
        journal.append(action(journal))  # its write hears of the message
        leases.claim_run(engine, "r0", owner="w:2:1", lease_seconds=60, max_resumes=3, steal=True)
        before = kinds(engine, "r0")
        with pytest.raises(LeaseLost):
            journal.messages(2, Counters(steps=1))
        assert kinds(engine, "r0") == before == ["task", "action"]
        assert [m.key for m in runner.inbox("r0")] == ["m1"]  # still unread
        journal.writer.close()


def test_a_write_alone_is_its_own_transaction(engine: Engine) -> None:
    writer = Writer(engine)
    (journal,) = journals(engine, writer, 1)
    commits = Commits(engine)
    journal.append(action(journal))
    assert commits.count == 1
    assert kinds(engine, "r0") == ["task", "action"]
    writer.close()


def test_entries_written_together_are_those_a_write_alone_makes(engine: Engine) -> None:
    # Every column, a JSON argument's text byte for byte (JSON keeps 1.5e17 and a NUL as
    # given), timestamps, a float and text past ASCII: the shared write (PostgreSQL: one
    # JSON batch) stores what each run's own write stores.
    writer = Writer(engine)
    runs = journals(engine, writer, 3)
    args = {"n": 1.5e17, "s": "caf\u00e9 \u0000 \U0001f600", "l": [1, None, True], "f": 0.1}
    made = {
        j.run_id: replace(
            tool_action(j.run_id, 1, "add", args, Counters(steps=1, cost=0.3), tokens=7),
            content='l\u00e0 \u2014 "quoted"',
            cost=0.1,
            error="not an error, a text",
        )
        for j in runs
    }
    alone = runs.pop()
    alone.append(made[alone.run_id])
    group = writer.group
    assert group is not None
    before = (group.transactions, group.writes)
    outcomes = together(
        writer, engine, {j.run_id: lambda j=j: j.append(made[j.run_id]) for j in runs}
    )
    assert outcomes == {j.run_id: None for j in runs}
    assert (group.transactions - before[0], group.writes - before[1]) == (1, 2)  # shared

    def row(run_id: str) -> dict[str, Any]:
        with engine.connect() as connection:
            found = connection.execute(
                select(entries, cast(entries.c.args, Text).label("args_text")).where(
                    entries.c.run_id == run_id, entries.c.seq == 1
                )
            ).one()
        values = dict(found._mapping)
        del values["run_id"], values["idempotency_key"], values["created_at"]
        return values

    mine = row(alone.run_id)
    assert mine["args"] == args and mine["tool"] == "add"
    for journal in runs:
        assert row(journal.run_id) == mine
    writer.close()


def test_a_fenced_out_run_fails_alone_and_the_others_commit(engine: Engine) -> None:
    writer = Writer(engine)
    runs = journals(engine, writer, 3)
    # Another worker takes r1 over: its epoch moves on, r1's journal is fenced out.
    leases.claim_run(engine, "r1", owner="w:2:1", lease_seconds=60, max_resumes=3, steal=True)
    outcomes = together(writer, engine, {j.run_id: lambda j=j: j.append(action(j)) for j in runs})
    assert outcomes["r0"] is None and outcomes["r2"] is None
    assert isinstance(outcomes["r1"], LeaseLost)
    assert kinds(engine, "r0") == kinds(engine, "r2") == ["task", "action"]
    assert kinds(engine, "r1") == ["task"]
    writer.close()


def test_a_value_the_database_refuses_fails_its_own_run_alone(engine: Engine) -> None:
    writer = Writer(engine)
    runs = journals(engine, writer, 3)
    refused = replace(action(runs[1]), attempt=2**64)  # no column holds it
    writes = {j.run_id: lambda j=j: j.append(action(j)) for j in runs}
    writes["r1"] = lambda: runs[1].append(refused)
    outcomes = together(writer, engine, writes)
    assert outcomes["r0"] is None and outcomes["r2"] is None
    assert isinstance(outcomes["r1"], EntryRefused)
    assert kinds(engine, "r0") == kinds(engine, "r2") == ["task", "action"]
    assert kinds(engine, "r1") == ["task"]
    assert store.find_run(engine, "r1").stop_reason == "model_error"
    writer.close()


# SQLite alone: PostgreSQL's shared write is one statement in autocommit, with no COMMIT of
# its own to fail.
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_failed_commit_fails_every_run_it_held_and_no_other(engine: Engine) -> None:
    writer = Writer(engine)
    runs = journals(engine, writer, 4)
    commits = Commits(engine)
    commits.fail = RuntimeError("the disk is full")
    outcomes = together(
        writer, engine, {j.run_id: lambda j=j: j.append(action(j)) for j in runs[:3]}
    )
    assert all(isinstance(outcomes[j.run_id], RuntimeError) for j in runs[:3]), outcomes
    commits.fail = None
    # A write after it (r3's) is a transaction of its own, and commits.
    runs[3].append(action(runs[3]))
    for journal in runs[:3]:
        assert kinds(engine, journal.run_id) == ["task"]
        assert journal.seq == 1  # not acknowledged: the run has not gone on
    assert kinds(engine, "r3") == ["task", "action"]
    writer.close()


def test_runs_in_flight_on_one_runner_each_keep_their_own_journal(db_url: str) -> None:
    url = db_url

    def model(transcript: Transcript) -> dict[str, Any]:
        seen = observations(transcript)
        if len(seen) < 3:
            return {"type": "tool", "name": "add", "args": {"a": len(seen), "b": 1}}
        return {"type": "final", "content": str(transcript[0]["content"])}

    def add(a: int, b: int) -> int:
        return a + b

    agent = Agent(model, {"add": add})
    results: dict[str, Any] = {}
    with Runner(url) as runner:

        def run(i: int) -> None:
            results[f"g{i}"] = runner.run(agent, f"task {i}", id=f"g{i}")

        threads = [threading.Thread(target=run, args=(i,)) for i in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for i in range(20):
            result = results[f"g{i}"]
            assert (result.stop_reason, result.output) == ("final", f"task {i}")
            rows = entry_rows(runner.engine, f"g{i}")
            assert [row["seq"] for row in rows] == list(range(8))
            assert [row["kind"] for row in rows] == ["task"] + ["action", "observation"] * 3 + [
                "final"
            ]


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Iterator[Engine]:
    engine = open_engine(f"sqlite:///{tmp_path / 'alone.db'}")
    upgrade(engine)
    yield engine
    engine.dispose()


def test_writes_that_come_while_one_is_written_alone_share_the_next_commit(
    sqlite_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite: a write with no company is committed alone, straight away (runner.sql.write_alone)
    # and leads the group meanwhile: the writes that come while it commits queue, and the
    # next leader writes them all in one transaction. (On PostgreSQL a write alone takes a
    # kept connection of its own, and the group's leader another.)
    engine = sqlite_engine
    writer = Writer(engine)
    runs = journals(engine, writer, 4)
    group = writer.group
    assert group is not None
    inside, release = threading.Event(), threading.Event()
    real = driver.commit_if_changed

    def slow(*args: Any) -> bool | None:
        if not inside.is_set():  # the first write alone waits, the file and the lead held
            inside.set()
            release.wait(timeout=60)
        return real(*args)

    monkeypatch.setattr(driver, "commit_if_changed", slow)
    before = (group.transactions, group.writes)
    first = threading.Thread(target=runs[0].append, args=(action(runs[0]),))
    first.start()
    assert inside.wait(timeout=60)
    others = [threading.Thread(target=j.append, args=(action(j),)) for j in runs[1:]]
    for thread in others:
        thread.start()
    wait_until(lambda: group.queued() == 3, what="the other writes queued behind it")
    release.set()
    for thread in (first, *others):
        thread.join()
    # Two transactions: the first write's, alone, then the three queued behind it.
    assert (group.transactions - before[0], group.writes - before[1]) == (2, 4)
    for journal in runs:
        assert kinds(engine, journal.run_id) == ["task", "action"]
    writer.close()
