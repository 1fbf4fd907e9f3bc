"""`Runner`: durable runs in SQLite or PostgreSQL, on the same loop as `run_agent`."""

from __future__ import annotations

import getpass
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

from runner import approvals, leases, store
from runner.agent import Agent, load_agent, with_budgets
from runner.backend import backend_for
from runner.budgets import Budgets, StopReason
from runner.clock import Clock, utc_now
from runner.database import connect, resolve_url
from runner.defaults import DEFAULT_LEASE_SECONDS as DEFAULT_LEASE_SECONDS  # re-exported
from runner.defaults import DEFAULT_MAX_RESUMES as DEFAULT_MAX_RESUMES  # re-exported
from runner.errors import AgentLoadError, LeaseHeld, RunnerError, RunWaiting
from runner.ids import new_run_id
from runner.journal import Counters, Entry
from runner.loop import drive
from runner.owner import this_process
from runner.result import AgentResult
from runner.sqljournal import SqlJournal
from runner.status import RunStatus
from runner.waiting import Answer, Answered, Wait
from runner.wakeup import Wakeup

RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")
# How often a process blocked on a waiting run (`wait=True`) looks at it, where the database
# cannot tell it (SQLite; on PostgreSQL an answer's NOTIFY wakes it at once).
ANSWER_POLL_SECONDS = 1.0


class Runner:
    """Start, resume, inspect and cancel durable runs in one database."""

    def __init__(
        self,
        url: str | None = None,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        max_resumes: int = DEFAULT_MAX_RESUMES,
        observer: Callable[[str, Entry], None] | None = None,
        clock: Clock | None = None,
        heartbeat_seconds: float | None = None,
    ) -> None:
        self.url = resolve_url(url)
        self.engine = connect(self.url)
        self.lease_seconds = lease_seconds
        self.max_resumes = max_resumes
        self.observer = observer
        self.heartbeat_seconds = heartbeat_seconds
        self.owner = this_process()
        # Leases and deadlines are compared across machines: on the database's clock.
        self.clock = (
            clock if clock is not None else backend_for(self.engine.dialect.name).clock(self.engine)
        )

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- starting runs --------------------------------------------------------------------

    def submit(
        self,
        agent: Agent | str,
        task: str,
        *,
        id: str | None = None,
        wake: bool = True,
        **budgets: Any,
    ) -> str:
        """Queue a run for a worker; an `id` that exists never creates a second run.

        On PostgreSQL idle workers are woken at once (NOTIFY); `wake=False` leaves the run
        to their polling (for a caller about to resume it itself).
        """
        loaded = self._agent(agent)
        ref = loaded.reference()
        if ref is None:
            raise AgentLoadError(
                "a queued run needs an agent a worker can import: define the Agent at module "
                "level or pass ref='module:attr'"
            )
        return self._create(loaded, ref, task, id, budgets, wake=wake)

    def run(
        self,
        agent: Agent | str,
        task: str,
        *,
        id: str | None = None,
        wait: bool = False,
        **budgets: Any,
    ) -> AgentResult:
        """Run to the end in this process. An existing `id` returns or resumes that run.

        A run that reaches a call needing a person's answer returns with status `waiting`
        (`result.waiting` says for what), unless `wait`: then this blocks until the answer
        comes and carries on.
        """
        loaded = self._agent(agent)
        # No NOTIFY: this process runs it now, and a woken worker would only race it.
        run_id = self._create(loaded, loaded.reference(), task, id, budgets, wake=False)
        return self.resume(run_id, agent=loaded, wait=wait)

    def _create(
        self,
        agent: Agent,
        ref: str | None,
        task: str,
        run_id: str | None,
        budgets: Any,
        *,
        wake: bool = True,
    ) -> str:
        if not isinstance(task, str):
            raise ValueError(f"task must be a string, not {type(task).__name__}")
        if "\x00" in task:
            # runs.task is plain text for SQL users, and PostgreSQL's text holds no NUL.
            raise ValueError("task must not contain a NUL character")
        # As in run_agent, a budget given as None is unlimited; one not given is the agent's.
        chosen = with_budgets(budgets, agent.budgets)
        if run_id is None:
            run_id = new_run_id()
        elif not RUN_ID_PATTERN.fullmatch(run_id):
            raise ValueError(f"run id {run_id!r} must be 1 to 32 letters, digits, '_', '.' or '-'")
        store.create_run(
            self.engine,
            run_id=run_id,
            agent=ref,
            agent_name=agent.name,
            release=agent.release,
            task=task,
            budgets=chosen.as_dict(),
            clock=self.clock,
            wake=wake,
        )
        return run_id

    @staticmethod
    def _agent(agent: Agent | str) -> Agent:
        if isinstance(agent, Agent):
            return agent
        if isinstance(agent, str):
            return load_agent(agent)
        raise AgentLoadError(f"expected an Agent or a reference string, got {type(agent).__name__}")

    # -- resuming -------------------------------------------------------------------------

    def resume(
        self,
        run_id: str,
        *,
        agent: Agent | str | None = None,
        steal: bool = False,
        wait: bool = False,
    ) -> AgentResult:
        """Continue a run where its journal ends; a finished run just returns its result.

        A waiting run returns as it is (status `waiting`), or with `wait`, once answered, goes
        on; with `wait`, a run that another worker took up meanwhile is followed to its end.
        """
        while True:
            try:
                result = self._resume(run_id, agent, steal)
            except LeaseHeld:
                if not wait:
                    raise
                self._await(run_id, RunStatus.RUNNING)
                continue
            if not wait or result.status is not RunStatus.WAITING:
                return result
            self.wait_for_answer(run_id)

    def _resume(self, run_id: str, agent: Agent | str | None, steal: bool) -> AgentResult:
        run = store.find_run(self.engine, run_id)
        if run.status is RunStatus.FINISHED:
            return self.get(run.id)
        claim = leases.claim_run(
            self.engine,
            run.id,
            owner=self.owner,
            lease_seconds=self.lease_seconds,
            max_resumes=self.max_resumes,
            steal=steal,
            clock=self.clock,
        )
        if claim.run.status in (RunStatus.FINISHED, RunStatus.WAITING):
            return self.get(run.id)  # finished, or still waiting for its answer
        try:
            loaded = self._agent(agent) if agent is not None else self._stored_agent(claim.run)
        except RunnerError:
            leases.release_run(self.engine, run.id, claim.epoch, clock=self.clock)
            raise
        return self.execute(claim, loaded)

    @staticmethod
    def _stored_agent(run: store.RunRow) -> Agent:
        if run.agent is None:
            raise AgentLoadError(
                f"run {run.id} was started from an Agent with no importable reference: "
                "pass the agent to resume it"
            )
        return load_agent(run.agent)

    def execute(
        self, claim: leases.Claim, agent: Agent, *, pause: threading.Event | None = None
    ) -> AgentResult:
        """Drive a claimed run to its stop with the durable journal (RunPaused if paused).

        A run that comes to a call needing a person's answer is left waiting, its lease let
        go: the result then has status `waiting`.
        """
        run = claim.run
        budgets = Budgets(**run.budgets)
        deadline = run.deadline.timestamp() if run.deadline is not None else None
        journal = SqlJournal(
            self.engine,
            claim,
            lease_seconds=self.lease_seconds,
            observer=self.observer,
            clock=self.clock,
            heartbeat_seconds=self.heartbeat_seconds,
        )
        try:
            with journal:
                result = drive(
                    agent.model,
                    agent.tools,
                    run.task,
                    budgets,
                    journal,
                    deadline=deadline,
                    pause=pause,
                    clock=self.clock,
                    context=agent.context,
                )
        except RunWaiting:
            return self.get(run.id)
        result.run_id = run.id
        return result

    # -- reading and cancelling -----------------------------------------------------------

    def get(self, run_id: str) -> AgentResult:
        """The run's result so far (stop_reason None while it has not stopped)."""
        run = store.find_run(self.engine, run_id)
        journal = store.load_entries(self.engine, run.id)
        transcript = [m for entry, _ in journal if (m := entry.message()) is not None]
        # A finished run stores its final counters; an unfinished one has them in its journal.
        counters = Counters(run.steps, run.tokens, run.cost)
        if run.status is not RunStatus.FINISHED and journal:
            counters = journal[-1][0].counters
        return AgentResult(
            stop_reason=run.stop_reason,
            output=run.output,
            steps=counters.steps,
            transcript=transcript,
            tokens=counters.tokens,
            cost=counters.cost,
            error=run.error,
            wrapped_up=run.wrapped_up,
            run_id=run.id,
            status=run.status,
            waiting=approvals.pending(self.engine, [run]).get(run.id),
        )

    def row(self, run_id: str) -> store.RunRow:
        """The run's row as stored (lease holder, timestamps, budgets)."""
        return store.find_run(self.engine, run_id)

    def list(
        self,
        *,
        status: RunStatus | None = None,
        stop_reason: StopReason | None = None,
        release: str | None = None,
        limit: int = 20,
    ) -> Sequence[store.RunRow]:
        """Runs, newest first."""
        return store.list_runs(
            self.engine, status=status, stop_reason=stop_reason, release=release, limit=limit
        )

    def cancel(self, run_id: str) -> AgentResult:
        """Ask the run to stop before its next step (at once if no worker holds it: a queued
        or waiting run finishes `cancelled` there and then)."""
        run = store.find_run(self.engine, run_id)
        store.request_cancel(self.engine, run.id, clock=self.clock)
        return self.get(run.id)

    # -- people in the loop ---------------------------------------------------------------

    def waiting_for(self, run_id: str) -> Wait | None:
        """What the run waits for (the call, its question, since when), None if it does not."""
        run = store.find_run(self.engine, run_id)
        return approvals.pending(self.engine, [run]).get(run.id)

    def waits(self, rows: Sequence[store.RunRow]) -> dict[str, Wait]:
        """What each waiting run among `rows` waits for, by run id."""
        return approvals.pending(self.engine, rows)

    def approve(
        self,
        run_id: str,
        *,
        call: str | None = None,
        note: str | None = None,
        by: str | None = None,
    ) -> Answered:
        """Approve the call the run waits for: it runs (with its key) when the run resumes.

        `call` (its idempotency key) makes sure the approval is for the call you saw. `by`
        defaults to the OS user. NotWaiting if the run waits for no answer (a race lost),
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
        run = store.find_run(self.engine, run_id)
        who = by if by is not None and by.strip() else _os_user()
        return approvals.answer(
            self.engine, run.id, given, text=text, by=who, call=call, clock=self.clock
        )

    def wait_for_answer(
        self, run_id: str, *, poll: float | None = None, timeout: float | None = None
    ) -> store.RunRow:
        """Block until the run stops waiting (answered, cancelled, or its approval_timeout
        passed, which the next claim records), or `timeout` seconds; the run's row then."""
        return self._await(run_id, RunStatus.WAITING, poll=poll, timeout=timeout)

    def _await(
        self,
        run_id: str,
        status: RunStatus,
        *,
        poll: float | None = None,
        timeout: float | None = None,
    ) -> store.RunRow:
        """Block while the run has `status`; on PostgreSQL a NOTIFY wakes this at once."""
        poll = ANSWER_POLL_SECONDS if poll is None else poll
        woken = threading.Event()
        give_up = None if timeout is None else self.clock.time() + timeout
        with Wakeup(self.engine, woken):
            while True:
                woken.clear()
                row = store.find_run(self.engine, run_id)
                now = self.clock.time()
                if row.status is not status:
                    return row
                if status is RunStatus.RUNNING and not row.lease_is_live(utc_now(self.clock)):
                    return row  # its holder died: a resume can take it over now
                expires = row.wait_expires_at
                if status is RunStatus.WAITING and expires is not None:
                    if now >= expires.timestamp():
                        return row  # timed out: the next claim records the denial
                    pause = min(poll, expires.timestamp() - now)
                else:
                    pause = poll
                if give_up is not None:
                    if now >= give_up:
                        return row
                    pause = min(pause, give_up - now)
                woken.wait(max(pause, 0.0))


def _os_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name in the environment nor the password database
        return "unknown"
