"""Executing one claimed run in a worker's slot: its agent loaded, its release checked
against the queue's policy, the run driven to its stop, its wait or its park, and what came
of it logged.

Whatever a run raises ends here, said in one line of the worker's log: a run's failure is
never the worker's, and a run left unfinished is resumed by the next claim from its journal
once its lease expires. The serving loop (runner.service.worker) hands each claim in a slot
to `execute`, on the slot's thread.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from runner.core.agent import Agent
from runner.core.status import RunStatus
from runner.errors import (
    AgentLoadError,
    LeaseLost,
    RunnerError,
    RunParked,
    RunPaused,
    RunWaiting,
    first_line,
)
from runner.service.drain_end import DrainEnd
from runner.service.loaded_agents import LoadedAgents
from runner.service.releases import diverged
from runner.service.runner import Runner
from runner.service.scorer_pool import ScorerPool
from runner.service.worker_log import WorkerLog, counted, waiting_words, why
from runner.store.protocol import Claim
from runner.store.releases import OlderReleases, held_back
from runner.store.rules import Relay

if TYPE_CHECKING:
    from runner.service.replay import Replay


class ClaimExecution:
    """How a worker executes its claims; `finished` counts the runs it finished."""

    def __init__(
        self,
        runner: Runner,
        agents: LoadedAgents,
        *,
        release: str | None,
        once: bool,
        stopping: threading.Event,
        drain_end: DrainEnd,
        scorers: ScorerPool,
        say: WorkerLog,
    ) -> None:
        self.runner = runner
        self.store = runner.store
        self.agents = agents
        self.release = release
        self.once = once
        self.stopping = stopping
        self.drain_end = drain_end
        self.scorers = scorers
        self.say = say
        self.finished = 0

    def execute(self, claim: Claim, relay: Relay | None) -> None:
        """Run `claim` to its stop, wait or park (`relay`: what it hands its slot to)."""
        run = claim.run
        try:
            agent = self.agents.load(run.agent, run.id)
        except AgentLoadError as exc:
            self._release(claim, f"the worker could not load the agent: {exc}")
            self.say(logging.WARNING, f"run {run.id} released: {exc}", run.id)
            return
        self.say(
            logging.INFO,
            f"run {run.id} claimed (epoch {claim.epoch}, resumes {run.resumes})",
            run.id,
        )
        if not self._may_run_on(claim, agent):
            return
        try:
            result = self.runner.execute(claim, agent, pause=self.stopping, relay=relay)
        except RunPaused:
            self._release(claim, None)
            self.say(logging.INFO, f"run {run.id} released for another worker", run.id)
            return
        except RunWaiting:
            # Parked for its sub-agents' calls, its slot handed to the first child.
            waits = [] if relay is None else relay.waits
            self.say(logging.INFO, f"run {run.id} {waiting_words(run.id, waits)}", run.id)
            return
        except RunParked as parked:
            # Queued again in the reservation's transaction: nothing to give back.
            if self.once:
                self.drain_end.park(run.id, claim.epoch)
            self.say(logging.INFO, f"run {run.id} parked: {parked}", run.id)
            return
        except LeaseLost as exc:
            self.say(logging.WARNING, f"run {run.id} abandoned: {exc}", run.id)
            return
        except RunnerError as exc:
            # The lease expires and another claim resumes the run from its journal.
            self.say(logging.WARNING, f"run {run.id} interrupted: {first_line(exc)}", run.id)
            return
        except self.store.outages as exc:
            # The lease expires and another claim resumes the run from its journal.
            self.say(logging.WARNING, f"run {run.id} interrupted: {first_line(exc)}", run.id)
            return
        except Exception as exc:
            self.say(
                logging.ERROR, f"run {run.id} interrupted by {type(exc).__name__}: {exc}", run.id
            )
            return
        if result.status is RunStatus.WAITING:
            waits = result.waits or ([result.waiting] if result.waiting else [])
            self.say(logging.INFO, f"run {run.id} {waiting_words(run.id, waits)}", run.id)
            return
        self.finished += 1
        if agent.scorers:
            self.scorers.due_soon()
        self.say(
            logging.INFO,
            f"run {run.id} finished: {result.stop_reason} after {counted(result.steps, 'step')}"
            + why(result.error),
            run.id,
        )

    def _may_run_on(self, claim: Claim, agent: Agent) -> bool:
        """Whether this worker runs the claimed run on, by its queue's policy for runs of
        another release: a pinned or parked one found to be another release's once its
        agent loaded is given back; under `check`, a run of another release is replayed
        against this worker's code first, and parked if it differs."""
        run = claim.run
        mine = self.release if self.release is not None else agent.release
        if not held_back(run.release, mine):
            return True
        try:
            # Read here, not at the claim: only a run of another release needs it.
            policy = self.store.queue_policy(run.queue)
        except self.store.outages as exc:
            self.say(logging.WARNING, f"run {run.id} not checked: {first_line(exc)}", run.id)
            return False  # the lease expires, and the next claimer decides again
        if run.parked_reason is not None or policy is OlderReleases.PIN:
            self._release(claim, None)
            self.say(
                logging.INFO, f"run {run.id} left to a worker of release {run.release}", run.id
            )
            return False
        if policy is not OlderReleases.CHECK:
            return True
        try:
            report = self._checked(claim, agent)
            if report.agrees:
                self.say(
                    logging.INFO,
                    f"run {run.id} of release {run.release} checked against release {mine}: "
                    f"agrees over {counted(report.steps, 'step')}, running it on",
                    run.id,
                )
                return True
            with self.store.writing():
                parked = self.runner.park_diverged(claim, report, mine)
        except self.store.outages as exc:
            # The lease expires and the next claimer checks the run again.
            self.say(logging.WARNING, f"run {run.id} not checked: {first_line(exc)}", run.id)
            return False
        if parked:
            self.say(
                logging.WARNING,
                f"run {run.id} parked (check_failed): {diverged(report, mine)}",
                run.id,
            )
        return False

    def _checked(self, claim: Claim, agent: Agent) -> Replay:
        """The check's replay; one that raises (not the database: an outage is raised) is a
        check failed, said so: a run its release's code cannot even replay is not run on,
        and is not left to fail every claimer's check in turn."""
        try:
            return self.runner.check_claimed(claim, agent)
        except self.store.outages:
            raise
        except Exception as exc:
            # Imported here: a worker that never checks a release has no use for replay
            # (nor for the model adapters it imports), about 13 ms of its start-up.
            from runner.service.replay import Replay

            run = claim.run
            now = f"cannot replay it: {type(exc).__name__}: {first_line(exc)}"
            return Replay(run.id, 0, run.stop_reason, False, None, "was recorded", now)

    def _release(self, claim: Claim, error: str | None) -> None:
        """Give the claimed run back to the queue (`error`: why, if the run cannot run)."""
        try:
            with self.store.writing():
                self.store.release_run(claim.run.id, claim.epoch, error)
        except self.store.outages as exc:
            self.say(
                logging.WARNING,
                f"run {claim.run.id} left to lease expiry: {first_line(exc)}",
                claim.run.id,
            )
