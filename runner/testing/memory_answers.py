"""People in the loop on an `InMemoryStore`: answers to waiting runs, and their timeouts.

As runner.store.approvals does in SQL: an answer is recorded right after the run's wait and
queues the run, only while it still waits for exactly that call (under the store's lock,
so exactly one answer wins any race); a wait past its approval_timeout is denied by the
next claim, or by an answer that came too late.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from runner.core.journal import Entry, EntryKind
from runner.core.status import RunStatus
from runner.core.waiting import Answer, Answered, timed_out_reason
from runner.errors import NotWaiting
from runner.store import run_states
from runner.store.approvals import check_answer, check_fits, why_not_waiting
from runner.store.rows import RunRow, entry_of
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
            last = self.entries[run.id][-1:]
            if run.status is not RunStatus.WAITING or not last or last[0]["kind"] != "wait":
                answers = [r for r in self.entries[run.id] if r["kind"] == EntryKind.ANSWER]
                previous = (entry_of(answers[-1]), answers[-1]["created_at"]) if answers else None
                raise NotWaiting(why_not_waiting(run, previous))
            opened = entry_of(last[0])
            wait = run_states.wait_of(run, opened, last[0]["created_at"])
            check_fits(run, wait, given, call)
            expired = wait.expires_at is not None and wait.expires_at <= at
            if expired:
                self._time_out(row, at)
            else:
                self._record(row, opened, given, text, by, at)
        if expired:
            raise NotWaiting(
                f"run {run.id} waited too long: call {wait.call} was denied at {at:%H:%M:%S} "
                f"UTC, {timed_out_reason(float(run.budgets.get('approval_timeout') or 0))}"
            )
        self._wake()
        assert opened.idempotency_key is not None
        return Answered(run.id, opened.idempotency_key, given, by, at, text)

    def _time_out(self, row: Row, at: datetime) -> None:
        last = self.entries[row["id"]][-1:]
        if not last or last[0]["kind"] != EntryKind.WAIT:
            self._requeue(row, at)
            return
        seconds = float(RunRow.of(row).budgets.get("approval_timeout") or 0)
        reason = timed_out_reason(seconds)
        self._record(row, entry_of(last[0]), Answer.TIMED_OUT, reason, None, at)

    def _record(
        self,
        row: Row,
        wait: Entry,
        given: Answer,
        text: str | None,
        by: str | None,
        at: datetime,
    ) -> None:
        entry = Entry(
            EntryKind.ANSWER,
            wait.step,
            wait.counters,
            content=text,
            tool=wait.tool,
            idempotency_key=wait.idempotency_key,
            answer=given,
            answered_by=by,
        )
        self._append(row["id"], row["lease_epoch"], entry, at)
        self._requeue(row, at)

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
