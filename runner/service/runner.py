"""`Runner`: durable runs in SQLite or PostgreSQL, on the same loop as `run_agent`."""

from __future__ import annotations

import getpass
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from runner.core.agent import Agent, load_agent, with_budgets
from runner.core.budgets import Budgets
from runner.core.clock import Clock, utc_now
from runner.core.ids import new_run_id
from runner.core.journal import Entry
from runner.core.result import AgentResult
from runner.core.status import RunStatus
from runner.core.stop_reasons import StopReason
from runner.core.waiting import Answer, Answered, Wait
from runner.defaults import DEFAULT_LEASE_SECONDS as DEFAULT_LEASE_SECONDS  # re-exported
from runner.defaults import DEFAULT_MAX_RESUMES as DEFAULT_MAX_RESUMES  # re-exported
from runner.errors import AgentLoadError, LeaseHeld, RunnerError, RunWaiting
from runner.service import revival, submissions
from runner.service.delays import start_time
from runner.store import approvals, leases, pooling
from runner.store import queues as queue_limits
from runner.store import run_states as listing
from runner.store import runs as store
from runner.store.backend import backend_for
from runner.store.database import connect, resolve_url
from runner.store.heartbeat import Heartbeat
from runner.store.owner import this_process
from runner.store.rows import QueueInfo
from runner.store.schema import DEFAULT_QUEUE
from runner.store.wakeup import Wakeup

if TYPE_CHECKING:
    from runner.service.replay import Replay

# Forking, replaying and executing a run (the loop, the journal, traces) are imported by the
# methods that do them: `runner list` and `show` never load them.

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
        tracer_provider: Any = None,
        connections: int | None = None,
    ) -> None:
        self.url = resolve_url(url)
        # `connections`: the most this runner holds at once (a worker's pool); a run holds
        # one only while it writes, so far fewer than runs in flight serve them.
        self.engine = connect(self.url, pool_size=connections)
        # The journals' writes: on SQLite they share one connection, kept until close().
        self.writer = pooling.Writer(self.engine)
        self.lease_seconds = lease_seconds
        self.max_resumes = max_resumes
        self.observer = observer
        self.heartbeat_seconds = heartbeat_seconds
        # OpenTelemetry's TracerProvider for this runner's spans (None: the global one).
        self.tracer_provider = tracer_provider
        self.owner = this_process()
        # Leases and deadlines are compared across machines: on the database's clock.
        self.clock = (
            clock if clock is not None else backend_for(self.engine.dialect.name).clock(self.engine)
        )
        # One heartbeat for every run this runner executes: one statement a beat renews
        # all their leases (a third of the lease apart unless `heartbeat_seconds`).
        self.heartbeat = Heartbeat(
            self.engine,
            lease_seconds=lease_seconds,
            interval=heartbeat_seconds or lease_seconds / 3,
            clock=self.clock,
        )

    def close(self) -> None:
        self.heartbeat.close()
        self.writer.close()
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
        queue: str | None = None,
        priority: int | None = None,
        not_before: datetime | None = None,
        delay: float | timedelta | None = None,
        **budgets: Any,
    ) -> str:
        """Queue a run for a worker. An `id` that names a run already returns it when the
        request is the same (agent, task, budgets, and the queue and priority if given); a
        different one raises RunConflict.

        `queue` (default 'default') is the queue workers claim it from, `priority` (default
        0; higher first) its place in it. A delayed run is claimed no earlier than
        `not_before` (an aware datetime) or `delay` (seconds or a timedelta) from now, on
        the database's clock. On PostgreSQL idle workers are woken at once (NOTIFY);
        `wake=False` leaves the run to their polling (for a caller about to resume it).
        """
        loaded = self._queueable(agent)
        placed = submissions.Placement(queue, priority, start_time(self.now(), not_before, delay))
        return self._create(loaded, loaded.reference(), task, id, budgets, wake=wake, at=placed)

    def submit_many(
        self,
        agent: Agent | str,
        tasks: Iterable[str | Mapping[str, Any]],
        *,
        batch_size: int = submissions.BATCH_SIZE,
        wake: bool = True,
    ) -> submissions.Submitted:
        """Queue many runs of one agent: each item a task, or a mapping of `task` and
        optionally `id`, `budgets`, `queue`, `priority`, `delay` or `not_before` (as for
        `submit`). Every item and every existing id is checked first: SubmissionRefused
        names the first bad one (by number, from 1) and nothing is submitted. The runs then
        go in batches of `batch_size`, one transaction each; SubmitInterrupted says which
        were submitted when a batch fails (nothing of that batch is). Ids that exist with
        the same request are kept, as by `submit`.
        """
        loaded = self._queueable(agent)
        ref = loaded.reference()
        assert ref is not None
        items = submissions.prepare(
            tasks,
            ref=ref,
            agent_name=loaded.name,
            release=loaded.release,
            base=loaded.budgets,
            now=self.now(),
            check_id=self._new_id,
        )
        return submissions.submit_items(self.engine, items, batch_size=batch_size, wake=wake)

    def _queueable(self, agent: Agent | str) -> Agent:
        loaded = self._agent(agent)
        if loaded.reference() is None:
            raise AgentLoadError(
                "a queued run needs an agent a worker can import: define the Agent at module "
                "level or pass ref='module:attr'"
            )
        return loaded

    def set_queue_limit(self, name: str, limit: int | None) -> None:
        """At most `limit` runs of queue `name` run at once, across all workers (None: no
        limit; 0 holds the queue). Runs already running go on under a lower limit."""
        queue_limits.set_limit(self.engine, name, limit, clock=self.clock)

    def queues(self) -> list[QueueInfo]:
        """Every queue with a limit or an unfinished run: its limit, and its runs queued,
        delayed, running (under a live lease: what the limit counts) and waiting."""
        return queue_limits.list_queues(self.engine, self.now())

    def run(
        self,
        agent: Agent | str,
        task: str,
        *,
        id: str | None = None,
        wait: bool = False,
        **budgets: Any,
    ) -> AgentResult:
        """Run to the end in this process. An `id` that names a run already returns (or
        resumes) it when the request is the same; a different one raises RunConflict.

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
        at: submissions.Placement | None = None,
    ) -> str:
        submissions.check_task(task)
        placed = at or submissions.Placement()
        queue = None if placed.queue is None else queue_limits.check_queue(placed.queue)
        priority = None if placed.priority is None else queue_limits.check_priority(placed.priority)
        # As in run_agent, a budget given as None is unlimited; one not given is the agent's.
        chosen = with_budgets(budgets, agent.budgets)
        run_id = self._new_id(run_id)
        created = store.create_run(
            self.engine,
            run_id=run_id,
            agent=ref,
            agent_name=agent.name,
            release=agent.release,
            task=task,
            budgets=chosen.as_dict(),
            clock=self.clock,
            wake=wake,
            queue=DEFAULT_QUEUE if queue is None else queue,
            priority=0 if priority is None else priority,
            not_before=placed.not_before,
        )
        if not created:
            existing = store.get_run(self.engine, run_id)
            submissions.refuse_another(
                existing, self.engine, ref, agent.name, task, chosen.as_dict(), queue, priority
            )
        return run_id

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

    # -- resuming -------------------------------------------------------------------------

    def resume(
        self,
        run_id: str,
        *,
        agent: Agent | str | None = None,
        steal: bool = False,
        revive: bool = False,
        wait: bool = False,
        **budgets: Any,
    ) -> AgentResult:
        """Continue a run where its journal ends; a finished run just returns its result.

        With new `budgets` (`max_steps=50`, ...) or `revive=True`, a run that stopped for a
        budget, tool_errors or crash_loop is revived first (see `revive`); an unfinished
        run is given the new budgets (journaled as an `extended` entry) before it goes on.
        A waiting run returns as it is (status `waiting`), or with `wait`, once answered, goes
        on; with `wait`, a run that another worker took up meanwhile is followed to its end.
        """
        while True:
            try:
                result = self._resume(run_id, agent, steal, revive, budgets)
            except LeaseHeld:
                if not wait:
                    raise
                self._await(run_id, RunStatus.RUNNING)
                continue
            if not wait or result.status is not RunStatus.WAITING:
                return result
            self.wait_for_answer(run_id)
            # Revived or extended already: after the answer the run goes on as it is.
            revive, budgets = False, {}

    def _resume(
        self,
        run_id: str,
        agent: Agent | str | None,
        steal: bool,
        revive: bool,
        budgets: dict[str, Any],
    ) -> AgentResult:
        run = store.find_run(self.engine, run_id)
        revived = False
        if run.status is RunStatus.FINISHED:
            if not budgets and not revive:
                return self.get(run.id)
            self.revive(run.id, **budgets)
            revived = True
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
            if budgets and not revived:
                claim = revival.extend_run(self.engine, claim, budgets, clock=self.clock)
        except (RunnerError, ValueError):
            leases.release_run(self.engine, run.id, claim.epoch, clock=self.clock)
            raise
        return self.execute(claim, loaded)

    def revive(self, run_id: str, **budgets: Any) -> store.RunRow:
        """Queue a stopped run again, with `budgets` changed, to go on from its journal.

        A run that stopped for a budget needs that budget lifted (`max_steps` above the
        steps taken, ...; a new `max_seconds` counts from the revival); one that stopped
        for tool_errors needs `max_consecutive_errors` at or above its failed steps in a
        row; crash_loop needs nothing (its count of takeovers starts again). The stop is
        kept in a `revived` journal entry. CannotContinue for a run that answered, was
        cancelled or stopped for model_error, or whose budgets would stop it at once.
        """
        run = store.find_run(self.engine, run_id)
        revival.revive_run(self.engine, run.id, budgets, clock=self.clock)
        return self.row(run.id)

    def fork(
        self,
        run_id: str,
        at_step: int,
        *,
        id: str | None = None,
        agent: Agent | str | None = None,
        **budgets: Any,
    ) -> str:
        """Queue a new run whose journal starts as a copy of run `run_id`'s first `at_step`
        steps; its id. The parent is untouched; the copied tool calls are never run again.

        The fork has the parent's task, agent (or `agent`) and budgets (with `budgets`
        changed). Step `at_step` must be a tool call with its result (0: only the task).
        An `id` that names a run already returns it for the same request, else RunConflict.
        """
        from runner.service import fork

        parent = store.find_run(self.engine, run_id)
        journal = [entry for entry, _ in store.load_entries(self.engine, parent.id)]
        copied = fork.prefix(parent, journal, at_step)
        chosen = fork.fork_budgets(parent, copied, budgets)
        if agent is not None:
            loaded = self._agent(agent)
            ref, name, release = loaded.reference(), loaded.name, loaded.release
        else:
            ref, name, release = parent.agent, parent.agent_name, parent.release
        new_id = self._new_id(id)
        created = fork.create_fork(
            self.engine,
            parent,
            copied,
            run_id=new_id,
            agent=ref,
            agent_name=name,
            release=release,
            budgets=chosen,
            clock=self.clock,
        )
        if not created:
            origin = (parent.id, at_step)
            existing = store.get_run(self.engine, new_id)
            submissions.refuse_another(
                existing, self.engine, ref, name, parent.task, chosen.as_dict(), parent=origin
            )
        return new_id

    def replay(
        self, run_id: str, *, agent: Agent | str | None = None, agent_budgets: bool = False
    ) -> Replay:
        """Replay a recorded run against the agent's code today (its stored reference, or
        `agent`): the recorded model outputs and observations, no model called, no tool
        run. Under the run's budgets, or with `agent_budgets` the agent's own."""
        from runner.service.replay import replay_run

        run = store.find_run(self.engine, run_id)
        loaded = self._agent(agent) if agent is not None else self._stored_agent(run)
        journal = [entry for entry, _ in store.load_entries(self.engine, run.id)]
        budgets = loaded.budgets if agent_budgets else Budgets(**run.budgets)
        return replay_run(run, journal, loaded, budgets)

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
        from runner.core.loop import drive
        from runner.store.sql_journal import SqlJournal
        from runner.tracing.run_spans import run_trace

        run = claim.run
        budgets = Budgets(**run.budgets)
        deadline = run.deadline.timestamp() if run.deadline is not None else None
        journal = SqlJournal(
            self.engine,
            claim,
            lease_seconds=self.lease_seconds,
            observer=self.observer,
            clock=self.clock,
            heartbeat=self.heartbeat,
            writer=self.writer,
        )
        spans = run_trace(
            run.id,
            model=agent.model,
            agent_name=run.agent_name,
            release=run.release,
            resumes=run.resumes,
            tracer_provider=self.tracer_provider,
        )
        try:
            with journal, spans as traced:
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
                    spans=traced,
                )
                traced.finished(result)
        except RunWaiting:
            return self.get(run.id)
        except KeyboardInterrupt:
            # Ctrl-C: give the run back at once, for `runner resume` or a worker, rather
            # than leave it held until its lease expires (and count a takeover).
            leases.release_run(self.engine, run.id, claim.epoch, clock=self.clock)
            raise
        result.run_id = run.id
        return result

    # -- reading and cancelling -----------------------------------------------------------

    def get(self, run_id: str) -> AgentResult:
        """The run's result so far (stop_reason None while it has not stopped)."""
        run = store.find_run(self.engine, run_id)
        journal = [entry for entry, _ in store.load_entries(self.engine, run.id)]
        return listing.result_of(run, journal, approvals.pending(self.engine, [run]).get(run.id))

    def row(self, run_id: str) -> store.RunRow:
        """The run's row as stored (lease holder, timestamps, budgets), with its `state`
        (its status, or `stalled`: see runner.liveness) and, while it is unfinished, the
        counters of its journal so far."""
        return self._observed([store.find_run(self.engine, run_id)])[0]

    def journal(self, run_id: str) -> list[Entry]:
        """The run's journal entries in order, including those never shown to the model."""
        run = store.find_run(self.engine, run_id)
        return [entry for entry, _ in store.load_entries(self.engine, run.id)]

    def now(self) -> datetime:
        """The time on the clock leases are measured on (the database's, on PostgreSQL)."""
        return utc_now(self.clock)

    def list(
        self,
        *,
        status: RunStatus | None = None,
        stop_reason: StopReason | None = None,
        release: str | None = None,
        limit: int = 20,
        state: str | None = None,
    ) -> Sequence[store.RunRow]:
        """Runs, newest first, as `row` gives them. `state` filters by state: `running`
        leaves out the stalled runs that `status=running` includes."""
        now = self.now()  # before the connection: measuring the clock may take another
        with store.plain_reading(self.engine) as reader:
            return listing.runs(
                reader, now, status=status, stop_reason=stop_reason, release=release,
                limit=limit, state=state,
            )  # fmt: skip

    def _observed(self, rows: Sequence[store.RunRow]) -> Sequence[store.RunRow]:
        now = self.now()
        with store.plain_reading(self.engine) as reader:
            return listing.observe(reader, rows, now)

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
