"""`Runner`: durable runs in SQLite or PostgreSQL, on the same loop as `run_agent`."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

from runner import leases, store
from runner.agent import Agent, load_agent, with_budgets
from runner.backend import backend_for
from runner.budgets import Budgets, StopReason
from runner.clock import Clock
from runner.database import connect, resolve_url
from runner.defaults import DEFAULT_LEASE_SECONDS as DEFAULT_LEASE_SECONDS  # re-exported
from runner.defaults import DEFAULT_MAX_RESUMES as DEFAULT_MAX_RESUMES  # re-exported
from runner.errors import AgentLoadError, RunnerError
from runner.ids import new_run_id
from runner.journal import Counters, Entry, transcript_of
from runner.loop import drive
from runner.owner import this_process
from runner.result import AgentResult
from runner.sqljournal import SqlJournal
from runner.status import RunStatus

RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")


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
        self, agent: Agent | str, task: str, *, id: str | None = None, **budgets: Any
    ) -> str:
        """Queue a run for a worker; an `id` that exists never creates a second run."""
        loaded = self._agent(agent)
        ref = loaded.reference()
        if ref is None:
            raise AgentLoadError(
                "a queued run needs an agent a worker can import: define the Agent at module "
                "level or pass ref='module:attr'"
            )
        return self._create(loaded, ref, task, id, budgets)

    def run(
        self, agent: Agent | str, task: str, *, id: str | None = None, **budgets: Any
    ) -> AgentResult:
        """Run to the end in this process. An existing `id` returns or resumes that run."""
        loaded = self._agent(agent)
        run_id = self._create(loaded, loaded.reference(), task, id, budgets)
        return self.resume(run_id, agent=loaded)

    def _create(
        self, agent: Agent, ref: str | None, task: str, run_id: str | None, budgets: Any
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
        self, run_id: str, *, agent: Agent | str | None = None, steal: bool = False
    ) -> AgentResult:
        """Continue a run where its journal ends; a finished run just returns its result."""
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
        if claim.run.status is RunStatus.FINISHED:
            return self.get(run.id)
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
        """Drive a claimed run to its stop with the durable journal (RunPaused if paused)."""
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
        result.run_id = run.id
        return result

    # -- reading and cancelling -----------------------------------------------------------

    def get(self, run_id: str) -> AgentResult:
        """The run's result so far (stop_reason None while it has not stopped)."""
        run = store.find_run(self.engine, run_id)
        journal = store.load_entries(self.engine, run.id)
        transcript = transcript_of([entry for entry, _ in journal])
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
            status=str(run.status),
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
        """Ask the run to stop before its next step (at once if no worker holds it)."""
        run = store.find_run(self.engine, run_id)
        store.request_cancel(self.engine, run.id, clock=self.clock)
        return self.get(run.id)
