"""The inbox of messages sent to runs, and their delivery into the journal: their SQL.

A sender's message is ONE transaction on the locked run row: the `messages` row (its key
unique per run: the same key twice finds the first, and writes nothing) and one more
`runs.undelivered_messages`. The worker executing the run learns of it from its next
journal write, which reads that count back with the cancel flag (runner.sql.fencing), and
delivers at its next step boundary: ONE transaction that locks the run row under its lease
epoch (fenced: a worker that lost the run delivers nothing), journals each waiting message
as a `message` entry, sets each one's `delivered_seq`, and sets the count back to 0. A crash
before that commit leaves every message waiting; after it, every one delivered: a message
is journaled exactly once. The row lock orders a sender against the delivery: a message
committed before it is delivered by it, one committed after it counts for the next.
"""

from __future__ import annotations

from sqlalchemy import Connection, Engine, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from runner.core.clock import SYSTEM, Clock, utc_now
from runner.core.counters import Counters
from runner.core.faults import fault
from runner.core.journal import Entry
from runner.core.messages import Sent, message_entry
from runner.core.status import RunStatus
from runner.errors import LeaseLost, MessageConflict, RunFinished, RunNotFound
from runner.sql import reads
from runner.sql.payloads import payloads_of
from runner.sql.runs import RunRow, lock_run, plain
from runner.sql.schema import entries, messages, runs
from runner.store.payloads import open_text
from runner.store.rows import entry_row
from runner.store.rules import conflict_words, finished_words


def send(
    engine: Engine,
    run_id: str,
    key: str,
    body: str,
    *,
    finished_ok: bool = False,
    clock: Clock = SYSTEM,
) -> Sent:
    """Put a message in the run's inbox, once per key.

    The key sent before (by a sender that crashed, or a retry): that message, `duplicate`,
    nothing written (MessageRefused if its body differs). A finished run takes a message
    only with `finished_ok` (the caller revives the run next), else RunFinished.
    """
    at = utc_now(clock)
    try:
        with engine.begin() as connection:
            row = lock_run(connection, run_id)
            if row is None:
                raise RunNotFound(f"no run with id {run_id}")
            run = RunRow.of(row)
            found = _sent(connection, run, key, body)
            if found is not None:
                return found
            if run.status is RunStatus.FINISHED and not finished_ok:
                raise RunFinished(finished_words(run))
            number = connection.execute(
                select(func.coalesce(func.max(messages.c.number), 0) + 1).where(
                    messages.c.run_id == run.id
                )
            ).scalar_one()
            connection.execute(
                insert(messages).values(
                    run_id=run.id,
                    number=number,
                    idempotency_key=key,
                    body=payloads_of(connection).seal(body),
                    sent_at=at,
                )
            )
            connection.execute(
                update(runs)
                .where(runs.c.id == run.id)
                .values(undelivered_messages=runs.c.undelivered_messages + 1)
            )
            fault("before_message_sent")  # written, not committed: a crash sends nothing
    except IntegrityError:
        # The same key, sent at the same moment by another sender (the row lock should have
        # made this one wait for it and find it): that message.
        with engine.connect() as connection:
            found = _sent(connection, get_run_row(connection, run_id), key, body)
        if found is None:
            raise
        return found
    # Committed: a crash from here on (before the sender hears of it) leaves the message
    # sent; a retry with its key finds it.
    fault("after_message_sent")
    return Sent(run.id, key, number, at, run.status)


def _sent(connection: Connection, run: RunRow, key: str, body: str) -> Sent | None:
    """The message sent to `run` with `key` before, if any (MessageRefused if another body)."""
    row = connection.execute(
        select(messages).where(messages.c.run_id == run.id, messages.c.idempotency_key == key)
    ).first()
    if row is None:
        return None
    if open_text(row.body) != body:
        raise MessageConflict(conflict_words(run, key, row.number))
    return Sent(
        run.id,
        key,
        row.number,
        row.sent_at,
        run.status,
        duplicate=True,
        delivered_seq=row.delivered_seq,
    )


def get_run_row(connection: Connection, run_id: str) -> RunRow:
    """The run with this id, read on `connection` (RunNotFound if there is none)."""
    with plain(connection) as reader:
        return reads.get_run(reader, run_id)


def deliver(
    connection: Connection,
    run_id: str,
    epoch: int,
    seq: int,
    step: int,
    counters: Counters,
    clock: Clock = SYSTEM,
) -> list[Entry]:
    """Journal the run's waiting messages from `seq` on, as entries of `step`, and mark
    them delivered: ONE transaction, fenced by `epoch` (LeaseLost if another worker holds
    the run). The entries written, in the order the messages were sent (none: the count
    was stale, and is set right)."""
    at = utc_now(clock)
    with connection.begin():
        row = lock_run(connection, run_id)
        if row is None or row.lease_epoch != epoch or row.status != RunStatus.RUNNING:
            raise LeaseLost(f"run {run_id} was taken over by another worker: not delivering")
        waiting = connection.execute(
            select(messages.c.number, messages.c.idempotency_key, messages.c.body)
            .where(messages.c.run_id == run_id, messages.c.delivered_seq.is_(None))
            .order_by(messages.c.number)
        ).all()
        written = []
        for n, message in enumerate(waiting):
            body = open_text(message.body) or ""
            entry = message_entry(step, counters, message.idempotency_key, body)
            values = entry_row(run_id, seq + n, epoch, entry, at, payloads_of(connection))
            connection.execute(insert(entries).values(values))
            connection.execute(
                update(messages)
                .where(messages.c.run_id == run_id, messages.c.number == message.number)
                .values(delivered_seq=seq + n)
            )
            written.append(entry)
        connection.execute(update(runs).where(runs.c.id == run_id).values(undelivered_messages=0))
    return written


def undelivered(connection: Connection, run: RunRow) -> list[Sent]:
    """The messages `run` has not read yet, in the order they were sent."""
    rows = connection.execute(
        select(messages)
        .where(messages.c.run_id == run.id, messages.c.delivered_seq.is_(None))
        .order_by(messages.c.number)
    )
    return [Sent(run.id, row.idempotency_key, row.number, row.sent_at, run.status) for row in rows]
