"""Revision 0007 (call ids) carries a populated 0006 database forward: its journal reads back
unchanged, the views give the rows they gave, and a run left pending by an older worker
resumes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, MetaData, Table, insert, text

from runner import Agent, Runner
from runner.core.actions import ActionKind
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind
from runner.sql.database import current_revision, downgrade, head_revision, upgrade
from runner.store.rows import entry_row, new_run
from tests.integration.support import DEAD_OWNER

START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
VIEW_COLUMNS = (
    "run_id, step, tool, args, idempotency_key, status, attempt, result, agent_name, release,"
    " started_at, finished_at, duration_seconds"
)


def call(step: int, run_id: str, tool: str, args: dict[str, Any], c: Counters) -> Entry:
    return Entry(
        EntryKind.ACTION,
        step,
        c,
        action_type=ActionKind.TOOL,
        tool=tool,
        args=args,
        idempotency_key=f"{run_id}-{step}",
        tokens=10,
    )


def outcome(action: Entry, content: str, *, is_error: bool = False) -> Entry:
    streak = action.counters.error_streak + 1 if is_error else 0
    return Entry(
        EntryKind.OBSERVATION,
        action.step,
        Counters(action.counters.steps, action.counters.tokens, 0.0, streak),
        content=content,
        tool=action.tool,
        is_error=is_error,
        idempotency_key=action.idempotency_key,
    )


def journals() -> dict[str, list[Entry]]:
    """What a 0003 runner wrote: one call per step, no call ids, no text beside a call."""
    done_add = call(1, "done", "add", {"a": 2, "b": 3}, Counters(1, 10))
    failed_div = call(1, "failed", "div", {"a": 1, "b": 0}, Counters(1, 10))
    pending_send = call(1, "pending", "send", {"to": "x"}, Counters(1, 10))
    return {
        "done": [
            Entry(EntryKind.TASK, 0, Counters(), content="2 + 3?"),
            done_add,
            outcome(done_add, "5"),
            Entry(
                EntryKind.FINAL,
                2,
                Counters(2, 20),
                content="5",
                action_type=ActionKind.FINAL,
                tokens=10,
            ),
        ],
        "failed": [
            Entry(EntryKind.TASK, 0, Counters(), content="1 / 0?"),
            failed_div,
            outcome(failed_div, "ZeroDivisionError: division by zero", is_error=True),
        ],
        "pending": [Entry(EntryKind.TASK, 0, Counters(), content="send it"), pending_send],
    }


def populate_at_0003(engine: Engine) -> None:
    entries = Table("entries", MetaData(), autoload_with=engine)  # the table as 0003 has it
    runs = Table("runs", MetaData(), autoload_with=engine)
    assert "call_id" not in entries.c
    for n, (run_id, journal) in enumerate(journals().items()):
        run = new_run(
            run_id=run_id,
            agent=None,
            agent_name="old",
            release="0003",
            task=str(journal[0].content),
            budgets={"max_steps": 8},
            at=START,
        )
        for column in (
            "queue",
            "priority",
            "not_before",
            "parent_id",
            "root_id",
            "parent_call_key",
            "below_steps",
            "below_tokens",
            "below_cost",
        ):
            del run[column]  # revisions 0008's, 0010's, 0013's: this database has not reached them
        # Revision 0010 renamed them.
        run["parent_run_id"], run["parent_step"] = (
            run.pop("forked_from_id"),
            run.pop("forked_at_step"),
        )
        with engine.begin() as connection:
            connection.execute(insert(runs).values(**run))
            for seq, entry in enumerate(journal):
                at = START + timedelta(minutes=n, seconds=seq)
                row = entry_row(run_id, seq, 1, entry, at)
                del row["call_id"]  # the one column a 0003 runner did not write
                connection.execute(insert(entries).values(**row))
            finished = run_id != "pending"
            connection.execute(
                text(
                    "UPDATE runs SET status = :status, stop_reason = :reason, output = :output,"
                    " output_format = 'text', steps = :steps,"
                    " tokens = :tokens, lease_epoch = 1, lease_owner = :owner,"
                    " lease_expires_at = :expiry, finished_at = :finished WHERE id = :id"
                ),
                {
                    "status": "finished" if finished else "running",
                    "reason": {"done": "final", "failed": "tool_errors"}.get(run_id),
                    "output": "5" if run_id == "done" else None,
                    "steps": journal[-1].counters.steps,
                    "tokens": journal[-1].counters.tokens,
                    "owner": None if finished else DEAD_OWNER,
                    "expiry": None if finished else START + timedelta(hours=1),
                    "finished": START + timedelta(minutes=n, seconds=10) if finished else None,
                    "id": run_id,
                },
            )


def view_rows(engine: Engine) -> list[dict[str, Any]]:
    with engine.connect() as connection:
        found = connection.execute(
            text(f"SELECT {VIEW_COLUMNS} FROM tool_calls ORDER BY run_id, step")
        )
        return [dict(row._mapping) for row in found]


def test_a_populated_0003_database_reads_back_after_0004(engine: Engine, empty_url: str) -> None:
    upgrade(engine, "0006")
    populate_at_0003(engine)
    before = view_rows(engine)
    with engine.connect() as connection:
        summaries = connection.execute(text("SELECT * FROM run_summary ORDER BY id")).all()
    assert [(r["run_id"], r["status"]) for r in before] == [
        ("done", "done"),
        ("failed", "failed"),
        ("pending", "pending"),
    ]

    upgrade(engine)
    assert current_revision(engine) == head_revision()
    assert view_rows(engine) == before  # the same rows, paired by key now
    with engine.connect() as connection:
        after = connection.execute(text("SELECT * FROM run_summary ORDER BY id")).all()
        # The same rows; revision 0008 adds queue, priority and not_before at the end, and
        # 0010 parent_id and root_id after them (every run stored before it is a root).
        width = len(summaries[0])
        assert [tuple(row)[:width] for row in after] == [tuple(row) for row in summaries]
        assert [tuple(row)[width:] for row in after] == [
            ("default", 0, None, None, row.id) for row in after
        ]
        ids = connection.execute(text("SELECT call_id FROM tool_calls")).scalars().all()
        assert ids == [None, None, None]

    with Runner(empty_url) as runner:
        done = runner.get("done")
        assert done.transcript == [
            {"role": "user", "content": "2 + 3?"},
            {"role": "assistant", "tool": "add", "args": {"a": 2, "b": 3}},
            {"role": "tool", "name": "add", "content": "5", "is_error": False},
            {"role": "assistant", "content": "5"},
        ]
        assert (done.stop_reason, done.output, done.steps, done.tokens) == ("final", "5", 2, 20)
        # A call a 0003 worker left pending is settled by this runner like any other.
        sent: list[str] = []

        def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
            return {"type": "final", "content": transcript[-1]["content"]}

        agent = Agent(model, {"send": lambda to: sent.append(to) or "sent"})
        resumed = runner.resume("pending", agent=agent)
    assert sent == []  # a plain tool is never run twice: its outcome is unknown
    assert resumed.stop_reason == "final"
    assert str(resumed.output).startswith("OutcomeUnknown: send was interrupted")
    statuses = {r["run_id"]: (r["status"], r["attempt"]) for r in view_rows(engine)}
    assert statuses == {"done": ("done", 1), "failed": ("failed", 1), "pending": ("unknown", 2)}


def test_revision_0008_puts_every_stored_run_in_the_default_queue(engine: Engine) -> None:
    upgrade(engine, "0007")
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO runs (id, task, budgets, status, wrapped_up, steps, tokens, cost,"
                " resumes, stalled_resumes, progress_seq, cancel_requested, lease_epoch,"
                " created_at, updated_at) VALUES ('old', 't', '{}', 'queued', false, 0, 0, 0,"
                " 0, 0, 0, false, 0, '2026-12-01 09:00:00', '2026-12-01 09:00:00')"
            )
        )
    upgrade(engine)
    with engine.connect() as connection:
        row = connection.execute(text("SELECT queue, priority, not_before FROM runs")).one()
        assert tuple(row) == ("default", 0, None)
        assert connection.execute(text("SELECT count(*) FROM queues")).scalar_one() == 0
    downgrade(engine, "0007")
    with engine.connect() as connection:
        assert connection.execute(text("SELECT id FROM runs")).scalar_one() == "old"
