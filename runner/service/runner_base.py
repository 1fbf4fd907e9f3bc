"""What every part of the `Runner` shares: its store, its settings, and the helpers they use.

`Runner` (runner.service.runner) is made of parts by responsibility, each a class over this
one: submitting (runner.service.submitting), running and resuming (resuming), answering
(answering) and reading (inspecting).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from runner.core.agent import Agent, load_agent, with_budgets
from runner.core.budgets import Budgets
from runner.core.clock import Clock, utc_now
from runner.core.ids import new_run_id
from runner.core.journal import Entry
from runner.core.result import AgentResult
from runner.core.status import RunStatus
from runner.defaults import DEFAULT_LEASE_SECONDS, DEFAULT_MAX_RESUMES, DEFAULT_QUEUE
from runner.errors import AgentLoadError
from runner.service import submissions
from runner.store.payloads import Codec
from runner.store.protocol import RunStore
from runner.store.rows import RunRow, new_run
from runner.store.rules import check_priority, check_queue, result_of

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from runner.service.database import Heartbeat, SqlStore, Writer

RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")
# How often a process blocked on a waiting run (`wait=True`) looks at it, where the database
# cannot tell it (SQLite; on PostgreSQL an answer's NOTIFY wakes it at once).
ANSWER_POLL_SECONDS = 1.0


class RunnerBase:
    """A runner's store and settings (see `Runner` for what they mean)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        max_resumes: int = DEFAULT_MAX_RESUMES,
        observer: Callable[[str, Entry], None] | None = None,
        clock: Clock | None = None,
        heartbeat_seconds: float | None = None,
        tracer_provider: Any = None,
        connections: int | None = None,
        store: RunStore | None = None,
        codecs: Sequence[Codec] | None = None,
    ) -> None:
        # A store this runner opens is closed with it; one it is given stays its giver's.
        self._owns_store = store is None
        if store is None:
            from runner.service.database import open_store

            store = open_store(
                url,
                connections=connections,
                clock=clock,
                lease_seconds=lease_seconds,
                heartbeat_seconds=heartbeat_seconds,
                codecs=codecs,
            )
        elif url is not None or connections is not None or clock is not None or codecs:
            raise ValueError("a runner given a store takes its database and clock from it")
        self.store = store
        self.lease_seconds = lease_seconds
        self.max_resumes = max_resumes
        self.observer = observer
        self.heartbeat_seconds = heartbeat_seconds
        # OpenTelemetry's TracerProvider for this runner's spans (None: the global one).
        self.tracer_provider = tracer_provider

    # -- the store ----------------------------------------------------------------------

    @property
    def clock(self) -> Clock:
        """The clock leases are measured on (the database's, on PostgreSQL)."""
        return self.store.clock

    @property
    def owner(self) -> str:
        """This process as a lease holder."""
        return self.store.owner

    def _sql(self) -> SqlStore:
        from runner.service.database import sql_store

        return sql_store(self.store)

    @property
    def url(self) -> str:
        return self._sql().url

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine of a runner on a database."""
        return self._sql().engine

    @property
    def writer(self) -> Writer:
        return self._sql().writer

    @property
    def heartbeat(self) -> Heartbeat:
        return self._sql().heartbeat

    def close(self) -> None:
        """Close the database this runner opened (a store it was given stays open)."""
        if self._owns_store:
            self.store.close()

    def now(self) -> datetime:
        """The time on the clock leases are measured on (the database's, on PostgreSQL)."""
        return utc_now(self.clock)

    # -- shared by the parts --------------------------------------------------------------

    def get(self, run_id: str) -> AgentResult:
        """The run's result so far (stop_reason None while it has not stopped)."""
        run = self.store.find_run(run_id)
        journal = [entry for entry, _ in self.store.load_entries(run.id)]
        return result_of(run, journal, self.store.waits([run]).get(run.id, []))

    def row(self, run_id: str) -> RunRow:
        """The run's row as stored (lease holder, timestamps, budgets), with its `state`
        (its status, or `stalled`: see runner.liveness) and, while it is unfinished, the
        counters of its journal so far."""
        return self._observed([self.store.find_run(run_id)])[0]

    def _observed(self, rows: Sequence[RunRow]) -> Sequence[RunRow]:
        return self.store.observe(rows, self.now())

    def _create(
        self,
        agent: Agent,
        ref: str | None,
        task: str,
        run_id: str | None,
        budgets: Any,
        *,
        wake: bool = True,
        at: submissions.Placement | None = None,
    ) -> str:
        row, chosen, queue, priority = self._new_row(agent, ref, task, run_id, budgets, at)
        run_id = str(row["id"])
        if not self.store.create_run(row, wake=wake):
            existing = self.store.get_run(run_id)
            submissions.refuse_another(
                existing, self.store, ref, agent.name, task, chosen.as_dict(), queue, priority
            )
        return run_id

    def _new_row(
        self,
        agent: Agent,
        ref: str | None,
        task: str,
        run_id: str | None,
        budgets: Any,
        at: submissions.Placement | None = None,
    ) -> tuple[dict[str, Any], Budgets, str | None, int | None]:
        """A new run's row (`new_run`), its task and placement checked; its budgets, queue
        and priority as asked (for a conflict's check)."""
        submissions.check_task(task)
        placed = at or submissions.Placement()
        queue = None if placed.queue is None else check_queue(placed.queue)
        priority = None if placed.priority is None else check_priority(placed.priority)
        # As in run_agent, a budget given as None is unlimited; one not given is the agent's.
        chosen = with_budgets(budgets, agent.budgets)
        run_id = self._new_id(run_id)
        row = new_run(
            run_id=run_id,
            agent=ref,
            agent_name=agent.name,
            release=agent.release,
            task=task,
            budgets=chosen.as_dict(),
            at=self.now(),
            queue=DEFAULT_QUEUE if queue is None else queue,
            priority=0 if priority is None else priority,
            not_before=placed.not_before,
        )
        return row, chosen, queue, priority

    @staticmethod
    def _new_id(run_id: str | None) -> str:
        if run_id is None:
            return new_run_id()
        if not RUN_ID_PATTERN.fullmatch(run_id):
            raise ValueError(f"run id {run_id!r} must be 1 to 32 letters, digits, '_', '.' or '-'")
        return run_id

    @staticmethod
    def _agent(agent: Agent | str) -> Agent:
        if isinstance(agent, Agent):
            return agent
        if isinstance(agent, str):
            return load_agent(agent)
        raise AgentLoadError(f"expected an Agent or a reference string, got {type(agent).__name__}")

    @staticmethod
    def _stored_agent(run: RunRow) -> Agent:
        if run.agent is None:
            raise AgentLoadError(
                f"run {run.id} was started from an Agent with no importable reference: "
                "pass the agent to resume it"
            )
        return load_agent(run.agent)

    def _await(
        self,
        run_id: str,
        status: RunStatus,
        *,
        poll: float | None = None,
        timeout: float | None = None,
    ) -> RunRow:
        """Block while the run has `status`; on PostgreSQL a NOTIFY wakes this at once."""
        poll = ANSWER_POLL_SECONDS if poll is None else poll
        woken = threading.Event()
        give_up = None if timeout is None else self.clock.time() + timeout
        with self.store.wakeups(woken):
            while True:
                woken.clear()
                row = self.store.find_run(run_id)
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
