"""People in the loop on an `InMemoryStore`: answers to waiting runs, and their timeouts.

As runner.sql.approvals does in SQL: an answer is recorded after the run's waits, only
while the run still waits for that call (under the store's lock, so exactly one answer wins
any race), and the answer to the step's last open call queues the run; the calls still
waiting past the approval_timeout are denied by the next claim, or by an answer that came
too late.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from runner.core.journal import Entry, EntryKind
from runner.core.status import RunStatus
from runner.core.waiting import Answer, Answered, timed_out_reason
from runner.errors import NotWaiting
from runner.store.rows import RunRow, entry_of
from runner.store.rules import (
    answer_entry,
    answer_words,
    check_answer,
    check_fits,
    chosen_wait,
    unanswered,
    wait_of,
    why_not_waiting,
)
from runner.testing.memory_rows import MemoryRows, Row


class MemoryAnswers(MemoryRows):
    """The in-memory store's answers to waiting runs."""

    def answer(
        self,
        run_id: str,
        given: Answer,
        *,
        text: str | None,
        by: str,
        call: str | None = None,
    ) -> Answered:
        check_answer(given, text, by)
        at = self._now()
        with self._lock:
            row = self._row(run_id)
            run = RunRow.of(row)
            tail = self._wait_rows(run.id) if run.status is RunStatus.WAITING else []
            opened = unanswered(tail)
            if not opened:
                raise NotWaiting(why_not_waiting(run, self._answered(run.id, call)))
            waits = [wait_of(run, entry, when) for entry, when in opened]
            wait = chosen_wait(run, waits, call, lambda: self._answered_words(run.id, call))
            check_fits(run, wait, given)
            expired = wait.expires_at is not None and wait.expires_at <= at
            still: tuple[str, ...] = ()
            if expired:
                self._time_out(row, at)
            else:
                self._record(row, opened[waits.index(wait)][0], given, text, by, at)
                still = tuple(other.call for other in waits if other is not wait)
                if not still:
                    self._requeue(row, at)
        if expired:
            raise NotWaiting(
                f"run {run.id} waited too long: call {wait.call} was denied at {at:%H:%M:%S} "
                f"UTC, {timed_out_reason(float(run.budgets.get('approval_timeout') or 0))}"
            )
        self._wake()
        return Answered(run.id, wait.call, given, by, at, text, still_waiting=still)

    def _wait_rows(self, run_id: str) -> list[tuple[Entry, int, datetime]]:
        """The waits and answers the run's journal ends with (as reads.wait_rows reads)."""
        tail: list[tuple[Entry, int, datetime]] = []
        for stored in reversed(self.entries.get(run_id, [])):
            if stored["kind"] not in (EntryKind.WAIT, EntryKind.ANSWER):
                break
            tail.append((entry_of(stored), stored["seq"], stored["created_at"]))
        tail.reverse()
        return tail

    def _answered(self, run_id: str, call: str | None) -> tuple[Entry, datetime] | None:
        """The run's last answer (to `call`, if named) and when it was written."""
        for stored in reversed(self.entries[run_id]):
            if stored["kind"] == EntryKind.ANSWER and call in (None, stored["idempotency_key"]):
                return entry_of(stored), stored["created_at"]
        return None

    def _answered_words(self, run_id: str, call: str | None) -> str:
        found = self._answered(run_id, call)
        return "" if found is None else answer_words(*found)

    def _time_out(self, row: Row, at: datetime) -> None:
        """Deny every call the run still waits for, and queue it."""
        seconds = float(RunRow.of(row).budgets.get("approval_timeout") or 0)
        reason = timed_out_reason(seconds)
        for entry, _ in unanswered(self._wait_rows(row["id"])):
            self._record(row, entry, Answer.TIMED_OUT, reason, None, at)
        self._requeue(row, at)

    def _record(
        self,
        row: Row,
        wait: Entry,
        given: Answer,
        text: str | None,
        by: str | None,
        at: datetime,
    ) -> None:
        self._append(row["id"], row["lease_epoch"], answer_entry(wait, given, text, by), at)

    @staticmethod
    def _requeue(row: Row, at: datetime) -> None:
        deadline, since = row["deadline"], row["waiting_since"]
        if deadline is not None and since is not None:
            deadline += max(at - since, timedelta(0))  # max_seconds is active time
        row.update(
            status=RunStatus.QUEUED,
            waiting_since=None,
            wait_expires_at=None,
            deadline=deadline,
            updated_at=at,
        )
