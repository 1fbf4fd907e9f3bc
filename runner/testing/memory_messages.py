"""Messages sent to runs of an `InMemoryStore`: the inbox, and its delivery to the journal.

As runner.sql.messages does in SQL: a message is kept once per key (the same key again
finds the first), a finished run takes one only when the sender revives it, the run's
count of undelivered messages goes up by one, and a delivery (by the journal holding the
run's epoch) journals every waiting message and marks it delivered in one step under the
store's lock.
"""

from __future__ import annotations

from runner.core.counters import Counters
from runner.core.journal import Entry
from runner.core.messages import Sent, message_entry
from runner.core.status import RunStatus
from runner.errors import LeaseLost, MessageConflict, RunFinished
from runner.store.payloads import open_text
from runner.store.rows import RunRow
from runner.store.rules import conflict_words, finished_words
from runner.testing.memory_rows import MemoryRows, Row


class MemoryMessages(MemoryRows):
    """The in-memory store's inboxes."""

    def send_message(self, run_id: str, key: str, body: str, *, finished_ok: bool = False) -> Sent:
        at = self._now()
        with self._lock:
            row = self._row(run_id)
            run = RunRow.of(row)
            inbox = self.messages.setdefault(run_id, [])
            for message in inbox:
                if message["idempotency_key"] == key:
                    if open_text(message["body"]) != body:
                        raise MessageConflict(conflict_words(run, key, message["number"]))
                    return _sent(run, message, duplicate=True)
            if run.status is RunStatus.FINISHED and not finished_ok:
                raise RunFinished(finished_words(run))
            message = {
                "run_id": run_id,
                "number": len(inbox) + 1,
                "idempotency_key": key,
                "body": self.payloads.seal(body),
                "sent_at": at,
                "delivered_seq": None,
            }
            inbox.append(message)
            row["undelivered_messages"] += 1
            return _sent(run, message)

    def inbox(self, run_id: str) -> list[Sent]:
        with self._lock:
            run = self._run(run_id)
            return [
                _sent(run, message)
                for message in self.messages.get(run_id, ())
                if message["delivered_seq"] is None
            ]

    def _deliver(self, run_id: str, epoch: int, step: int, counters: Counters) -> list[Entry]:
        """Journal the run's waiting messages as entries of `step` and mark them delivered
        (LeaseLost unless `epoch` holds the run)."""
        at = self._now()
        with self._lock:
            row = self._row(run_id)
            if row["lease_epoch"] != epoch or row["status"] != RunStatus.RUNNING:
                raise LeaseLost(f"run {run_id} was taken over by another worker: not delivering")
            written = []
            for message in self.messages.get(run_id, ()):
                if message["delivered_seq"] is not None:
                    continue
                body = open_text(message["body"]) or ""
                entry = message_entry(step, counters, message["idempotency_key"], body)
                message["delivered_seq"] = self._append(run_id, epoch, entry, at)
                written.append(entry)
            row["undelivered_messages"] = 0
        return written


def _sent(run: RunRow, message: Row, *, duplicate: bool = False) -> Sent:
    return Sent(
        run.id,
        message["idempotency_key"],
        message["number"],
        message["sent_at"],
        run.status,
        duplicate=duplicate,
        delivered_seq=message["delivered_seq"],
    )
