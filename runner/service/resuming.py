"""Running a run in this process: start it, resume it, revive it, replay it, execute it."""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from runner.core.agent import Agent
from runner.core.budgets import Budgets
from runner.core.journal import Entry
from runner.core.result import AgentResult
from runner.core.status import RunStatus
from runner.core.tree import child_run_id
from runner.core.waiting import Asks
from runner.errors import LeaseHeld, RunnerError, RunParked, RunWaiting
from runner.service import revival, scoring
from runner.service.runner_base import RunnerBase
from runner.store.protocol import Claim, Observer
from runner.store.rows import RunRow
from runner.store.rules import Relay

if TYPE_CHECKING:
    from runner.service.replay import Replay

# Replaying and executing a run (the loop, traces) are imported by the methods that do
# them: `runner list` and `show` never load them.


class Resuming(RunnerBase):
    """The `Runner`'s part that drives runs to their stop in this process."""

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
        ref = loaded.reference()
        # A new run (a new id, or one given that no run has yet): inserted and claimed in
        # one commit, never queued for a worker.
        row = self._new_row(loaded, ref, task, id, budgets)[0]
        claim = self.store.create_claimed(
            row, lease_seconds=self.lease_seconds, max_resumes=self.max_resumes
        )
        if claim is not None:
            return self._go_on(row["id"], loaded, False, False, wait, {}, claim=claim)
        # The id names a run already: returned or resumed if the request is the same (a
        # conflict otherwise). No NOTIFY: this process runs it now, and a woken worker
        # would only race it.
        run_id = self._create(loaded, ref, task, id, budgets, wake=False)
        return self._go_on(run_id, loaded, False, False, wait, {}, exact=True)

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
        return self._go_on(run_id, agent, steal, revive, wait, budgets)

    def _go_on(
        self,
        run_id: str,
        agent: Agent | str | None,
        steal: bool,
        revive: bool,
        wait: bool,
        budgets: dict[str, Any],
        *,
        exact: bool = False,
        claim: Claim | None = None,
    ) -> AgentResult:
        """`resume`'s loop; `exact`: `run_id` is a whole id (no prefix to look up); `claim`:
        the run's lease, taken already (its first round)."""
        while True:
            try:
                if claim is not None:
                    exact, taken, claim = True, claim, None
                    result = self._execute_claimed(taken, agent)
                else:
                    result = self._resume(run_id, agent, steal, revive, budgets, exact)
            except LeaseHeld:
                if not wait:
                    raise
                self._await(run_id, RunStatus.RUNNING)
                continue
            except RunParked as parked:
                # Its provider limit has no room yet: this process waits for it, as asked to
                # run the run, then takes it up again (a worker would have let it go).
                self.clock.sleep(max(parked.until - self.clock.time(), 0.0))
                revive, budgets = False, {}
                continue
            if result.status is RunStatus.WAITING:
                ran = self._run_children(run_id, agent, wait)
                if ran is None:
                    pass  # it waits for a person, not for children
                elif ran:
                    revive, budgets = False, {}
                    continue  # its children ended: it was queued again, and goes on here
                else:
                    result = self.get(run_id)  # as its children left it (cancelled, say)
            if wait and result.status is RunStatus.QUEUED:
                # Answered between its park and the read of its result (a person quick to
                # approve): queued again, it goes on here.
                revive, budgets = False, {}
                continue
            if not wait or result.status is not RunStatus.WAITING:
                return result
            self._await(run_id, RunStatus.WAITING)
            # Revived or extended already: after the answer the run goes on as it is.
            revive, budgets = False, {}

    def _run_children(self, run_id: str, agent: Agent | str | None, wait: bool) -> bool | None:
        """Run here, at once, the unfinished children a parked parent waits for (a child a
        worker holds is left to it, or followed with `wait`), then deliver their ends: True
        once the parent was queued again (it goes on), False if it did not (a child another
        worker runs, or waits for a person; a cancel), None if it waits for no child."""
        run = self.store.find_run(run_id)
        waits = [w for w in self.store.waits([run]).get(run.id, []) if w.asks is Asks.CHILD]
        if not waits:  # (answered meanwhile: queued again, it goes on here)
            return True if run.status is RunStatus.QUEUED else None
        parent = self._agent(agent) if agent is not None else self._stored_agent(run)
        jobs = []
        for found in waits:
            child = self.store.get_run(child_run_id(run.id, found.call))
            if child.status is RunStatus.FINISHED:
                continue
            tool = parent.tools.get(found.tool)
            sub = None if tool is None or tool.sub_agent is None else tool.sub_agent.agent
            jobs.append((child.id, sub))
        if jobs:
            with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
                for done in [pool.submit(self._run_child, *job, wait) for job in jobs]:
                    done.result()
        self.store.deliver_children(run.id)
        return self.store.find_run(run.id).status is RunStatus.QUEUED

    def _run_child(self, child_id: str, agent: Agent | None, wait: bool) -> None:
        # LeaseHeld: another worker runs it, and its end is delivered when it ends.
        with contextlib.suppress(LeaseHeld):
            self.resume(child_id, agent=agent, wait=wait)

    def _resume(
        self,
        run_id: str,
        agent: Agent | str | None,
        steal: bool,
        revive: bool,
        budgets: dict[str, Any],
        exact: bool = False,
    ) -> AgentResult:
        revived = False
        if exact and not budgets and not revive:
            # Nothing to do before the claim, which reads the row itself (a finished run
            # comes back as it is): a read a run fewer.
            found_id = run_id
        else:
            run = self.store.find_run(run_id)
            found_id = run.id
            if run.status is RunStatus.FINISHED:
                if not budgets and not revive:
                    return self.get(run.id)
                self.revive(run.id, **budgets)
                revived = True
        claim = self.store.claim_run(
            found_id, lease_seconds=self.lease_seconds, max_resumes=self.max_resumes, steal=steal
        )
        return self._execute_claimed(claim, agent, {} if revived else budgets)

    def _execute_claimed(
        self, claim: Claim, agent: Agent | str | None, budgets: dict[str, Any] | None = None
    ) -> AgentResult:
        """Drive a run this process has just claimed (or found finished, or still waiting);
        `budgets` extend it first."""
        run_id = claim.run.id
        if claim.run.status in (RunStatus.FINISHED, RunStatus.WAITING):
            return self.get(run_id)  # finished, or still waiting for its answer
        try:
            loaded = self._agent(agent) if agent is not None else self._stored_agent(claim.run)
            if budgets:
                claim = revival.extend_run(self.store, claim, budgets)
        except (RunnerError, ValueError):
            self.store.release_run(run_id, claim.epoch)
            raise
        return self.execute(claim, loaded)

    def revive(self, run_id: str, **budgets: Any) -> RunRow:
        """Queue a stopped run again, with `budgets` changed, to go on from its journal.

        A run that stopped for a budget needs that budget lifted (`max_steps` above the
        steps taken, ...; a new `max_seconds` counts from the revival); one that stopped
        for tool_errors needs `max_consecutive_errors` at or above its failed steps in a
        row; crash_loop needs nothing (its count of takeovers starts again). The stop is
        kept in a `revived` journal entry. CannotContinue for a run that answered, was
        cancelled or stopped for model_error, or whose budgets would stop it at once.
        """
        run = self.store.find_run(run_id)
        revival.revive_run(self.store, run.id, budgets)
        return self.row(run.id)

    def replay(
        self, run_id: str, *, agent: Agent | str | None = None, agent_budgets: bool = False
    ) -> Replay:
        """Replay a recorded run against the agent's code today (its stored reference, or
        `agent`): the recorded model outputs and observations, no model called, no tool
        run. Under the run's budgets, or with `agent_budgets` the agent's own."""
        from runner.service.replay import replay_run

        run = self.store.find_run(run_id)
        loaded = self._agent(agent) if agent is not None else self._stored_agent(run)
        journal = [entry for entry, _ in self.store.load_entries(run.id)]
        budgets = loaded.budgets if agent_budgets else Budgets(**run.budgets)
        return replay_run(run, journal, loaded, budgets)

    def execute(
        self,
        claim: Claim,
        agent: Agent,
        *,
        pause: threading.Event | None = None,
        relay: Relay | None = None,
    ) -> AgentResult:
        """Drive a claimed run to its stop with the durable journal (RunPaused if paused).

        A run that comes to a call needing a person's answer is left waiting, its lease let
        go: the result then has status `waiting`. A run whose next model call finds no room
        in its provider limit is queued again until there is (RunParked says until when).
        With `relay` (a worker's slot), a run that parks for its sub-agents' calls hands the
        slot to its first child (RunWaiting comes out then), and a child whose end is its
        parent's last hands it back: `relay.next` is the claim to run next
        (runner.store.rules.Relay).
        """
        from runner.core.loop import drive
        from runner.tracing.run_spans import run_trace

        run = claim.run
        # Its scorers' rows before it runs: whoever finds the run ended scores it.
        scoring.plan(self.store, run.id, agent, run.agent)
        budgets = Budgets(**run.budgets)
        deadline = run.deadline.timestamp() if run.deadline is not None else None
        # A streaming model's pieces go where followers read them, until the call's action
        # is journaled (the journal's observer tells them).
        deltas = self.store.run_deltas(run.id)
        observer = self.observer
        journal = self.store.open_journal(
            claim,
            lease_seconds=self.lease_seconds,
            observer=deltas.journaled if observer is None else _both(deltas.journaled, observer),
            relay=relay,
        )
        spans = run_trace(
            run.id,
            model=agent.model,
            agent_name=run.agent_name,
            release=run.release,
            resumes=run.resumes,
            tracer_provider=self.tracer_provider,
        )
        # runner's own loop runs on a thread of its own, its model called inline there.
        own: dict[str, Any] = {"own_thread": True} if agent.loop is None else {}
        try:
            with journal, spans as traced:
                result = (agent.loop or drive)(
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
                    deltas=deltas,
                    limit=agent.limit,
                    limits=self.store.run_limits(run.id, claim.epoch),
                    **own,
                )
                traced.finished(result)
        except RunWaiting:
            if relay is not None and relay.next is not None:
                # Its slot went to a child: the worker goes on with it, and has no use for
                # the run's result (a read of its whole journal at each park).
                raise
            return self.get(run.id)
        except KeyboardInterrupt:
            # Ctrl-C: give the run back at once, for `runner resume` or a worker, rather
            # than leave it held until its lease expires (and count a takeover).
            self.store.release_run(run.id, claim.epoch)
            raise
        finally:
            deltas.close()
        result.run_id = run.id
        if run.parent_id is not None and not getattr(journal, "delivered", False):
            # A child's end goes to its parent at once (a worker's sweep delivers it if this
            # process dies first); the last child's queues the parent again. A SQL journal
            # delivers it in the commit of the child's last entry, if it wrote one.
            self.store.deliver_children(run.parent_id, relay)
        return result


def _both(first: Observer, second: Observer) -> Observer:
    def observe(run_id: str, entry: Entry) -> None:
        first(run_id, entry)
        second(run_id, entry)

    return observe
