"""People in the loop: what a waiting run waits for, and the answers that let it go on."""

from __future__ import annotations

import getpass
from collections.abc import Sequence

from runner.core.status import RunStatus
from runner.core.waiting import Answer, Answered, Wait
from runner.service.runner_base import RunnerBase
from runner.store.rows import RunRow


class Answering(RunnerBase):
    """The `Runner`'s part that answers runs waiting for a person."""

    def waiting_for(self, run_id: str) -> Wait | None:
        """What the run waits for (the call, its question, since when), None if it does not.
        Of a step of several calls waiting, the first still open: see `waiting_calls`."""
        waits = self.waiting_calls(run_id)
        return waits[0] if waits else None

    def waiting_calls(self, run_id: str) -> Sequence[Wait]:
        """Every call the run waits for, in call order (a step of several calls waits for
        all its answers before any of its calls runs); empty if it waits for none."""
        run = self.store.find_run(run_id)
        return self.store.waits([run]).get(run.id, [])

    def waits(self, rows: Sequence[RunRow]) -> dict[str, Wait]:
        """What each waiting run among `rows` waits for, by run id (its first open call)."""
        if not any(run.status is RunStatus.WAITING for run in rows):
            return {}
        return {run_id: found[0] for run_id, found in self.store.waits(rows).items()}

    def approve(
        self,
        run_id: str,
        *,
        call: str | None = None,
        note: str | None = None,
        by: str | None = None,
    ) -> Answered:
        """Approve the call the run waits for: it runs (with its key) when the run resumes.

        `call` (its idempotency key) makes sure the approval is for the call you saw; it is
        needed while the run waits for several calls of one step (each is answered on its
        own, and the run is queued once the last is). `by` defaults to the OS user.
        NotWaiting if the run waits for no answer (a race lost, or the call was answered),
        WrongAnswer if it waits for a reply or for another call.
        """
        return self._answer(run_id, Answer.APPROVED, note, call, by)

    def deny(
        self, run_id: str, *, reason: str, call: str | None = None, by: str | None = None
    ) -> Answered:
        """Deny the call the run waits for: the model is shown `Denied: <reason>` instead."""
        return self._answer(run_id, Answer.DENIED, reason, call, by)

    def reply(
        self, run_id: str, text: str, *, call: str | None = None, by: str | None = None
    ) -> Answered:
        """Answer the run's ask_human question: `text` is what the model is shown."""
        return self._answer(run_id, Answer.REPLIED, text, call, by)

    def _answer(
        self, run_id: str, given: Answer, text: str | None, call: str | None, by: str | None
    ) -> Answered:
        run = self.store.find_run(run_id)
        who = by if by is not None and by.strip() else _os_user()
        return self.store.answer(run.id, given, text=text, by=who, call=call)

    def wait_for_answer(
        self, run_id: str, *, poll: float | None = None, timeout: float | None = None
    ) -> RunRow:
        """Block until the run stops waiting (answered, cancelled, or its approval_timeout
        passed, which the next claim records), or `timeout` seconds; the run's row then."""
        return self._await(run_id, RunStatus.WAITING, poll=poll, timeout=timeout)


def _os_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name in the environment nor the password database
        return "unknown"
