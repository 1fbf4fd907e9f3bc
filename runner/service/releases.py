"""Releases in the fleet: a queue's policy for runs of another release than a worker's, each
release's unfinished runs, and the check a worker makes before it runs on a run that another
release started (the rules: runner.store.releases).

A check is a replay (runner.service.replay) of the claimed run's journal against the
worker's own code, made while the worker holds the run's lease: a run that agrees goes on
at once on the same claim; one that differs is parked, fenced by the claim's epoch, with the
reason `check_failed` and what differed, for a worker of its own release. A worker killed
mid-check leaves the run under its lease, like any crash: the next claimer checks again.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Literal

from runner.core.agent import Agent
from runner.core.budgets import Budgets
from runner.core.faults import fault
from runner.errors import AgentLoadError
from runner.service.runner_base import RunnerBase
from runner.store.protocol import Claim
from runner.store.releases import PARKED_BY_CHECK, OlderReleases, ReleaseInfo, check_policy

if TYPE_CHECKING:
    from runner.service.replay import Replay

# A policy, or its name (`continue`, `pin`, `check`): anything else is a ValueError.
Policy = OlderReleases | Literal["continue", "pin", "check"] | str


class Releasing(RunnerBase):
    """The `Runner`'s part that keeps releases apart."""

    def set_older_releases(self, name: str, policy: Policy) -> None:
        """What a worker does with a run of queue `name` whose release is not its own:
        `continue` (run it on with the worker's code: the default), `pin` (leave it to a
        worker of the run's release, for claims and takeovers alike) or `check` (replay
        its journal against the worker's code first, and park it if it differs)."""
        self.store.set_older_releases(name, check_policy(policy))

    def releases(self) -> list[ReleaseInfo]:
        """Each release (of each agent) with an unfinished run: its runs running, queued,
        waiting and parked (held back until a wake-up time, or by a failed check), and how
        many of them a failed check parked (only a worker of their release takes them)."""
        return self.store.list_releases(self.now())

    def check_claimed(self, claim: Claim, agent: Agent) -> Replay:
        """Replay the claimed run's journal against `agent` (the claimer's code), under the
        run's budgets: no model called, no tool run, nothing written."""
        from runner.service.replay import replay_run

        run = claim.run
        journal = [entry for entry, _ in self.store.load_entries(run.id)]
        report = replay_run(run, journal, agent, Budgets(**run.budgets))
        fault("during_release_check")  # the verdict known, not yet acted on
        return report

    def park_diverged(self, claim: Claim, report: Replay, release: str | None) -> bool:
        """Park the claimed run for a worker of its own release, saying what differed from
        the code of `release`; False if the claim no longer holds it."""
        error = f"parked by a check: {diverged(report, release)}"
        return self.store.park_run(claim.run.id, claim.epoch, PARKED_BY_CHECK, error)

    def replay_sample(
        self,
        count: int,
        *,
        since: datetime | timedelta | None = None,
        agent: str | None = None,
    ) -> list[Replay]:
        """Replay the newest `count` finished runs (of agent reference `agent`, finished
        since `since`: a time, or how long ago) against today's code, each against its own
        agent's (loaded once per reference): a deploy gate. A run whose agent no longer
        loads differs at its first step. Nothing is written, no model called, no tool run."""
        from runner.service.replay import Replay, replay_run

        if count < 1:
            raise ValueError(f"a sample is 1 run or more, not {count}")
        if isinstance(since, timedelta):
            since = self.now() - since
        runs = self.store.recorded_runs(since=since, agent=agent, limit=count)
        loaded: dict[str, Agent | AgentLoadError] = {}
        reports = []
        for run in runs:
            ref = run.agent or ""
            if ref not in loaded:
                try:
                    loaded[ref] = self._agent(ref)
                except AgentLoadError as exc:
                    loaded[ref] = exc
            found = loaded[ref]
            if isinstance(found, AgentLoadError):
                recorded, now = f"was recorded with agent {ref}", f"does not load: {found}"
                report = Replay(run.id, run.steps, run.stop_reason, False, 1, recorded, now)
                reports.append(report)
                continue
            journal = [entry for entry, _ in self.store.load_entries(run.id)]
            reports.append(replay_run(run, journal, found, Budgets(**run.budgets)))
        return reports


def diverged(report: Replay, release: str | None) -> str:
    """What a failed check found, in words: where and how the code of `release` differs."""
    where = "" if report.step is None else f" at step {report.step}"
    named = release or "(none)"
    return f"release {named} differs{where}: the run {report.recorded}; the agent {report.now}"


__all__ = ["OlderReleases", "Releasing"]
