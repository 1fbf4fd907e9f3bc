"""The agents a worker has loaded by reference, and those that will not load, backed off.

An agent is imported once per worker and kept. One that will not load (a module not
deployed here, an error at import) is not tried again at each claim: its runs are left to
the queue (skipped by the claim and by the scorers) until its backoff passes, and the run
that found it is released with the error (runner.service.claim_execution).
"""

from __future__ import annotations

import time

from runner.core.agent import Agent, load_agent
from runner.core.backoff import Backoff
from runner.errors import AgentLoadError

# Backoff after an agent that will not load: doubling, capped.
FIRST_BACKOFF = 0.5
MAX_BACKOFF = 30.0


class LoadedAgents:
    """A worker's agents by reference."""

    def __init__(self) -> None:
        self._agents: dict[str, Agent] = {}
        # The release each agent loaded so far declares (when the worker's is not given).
        self.releases: dict[str, str | None] = {}
        # An agent that will not load is skipped until its backoff passes: ref -> (until, wait).
        self._backoff: dict[str, tuple[float, Backoff]] = {}

    def load(self, ref: str | None, run_id: str) -> Agent:
        """The agent `ref` names, for run `run_id`; AgentLoadError if it will not load."""
        if ref is None:
            raise AgentLoadError(f"run {run_id} has no agent reference a worker can import")
        agent = self._agents.get(ref)
        if agent is None:
            try:
                agent = load_agent(ref)
            except AgentLoadError:
                fresh = Backoff(FIRST_BACKOFF, MAX_BACKOFF)
                _, backoff = self._backoff.get(ref, (0.0, fresh))
                self._backoff[ref] = (time.monotonic() + backoff.next(), backoff)
                raise
            self._backoff.pop(ref, None)
            self._agents[ref] = agent
            self.releases[ref] = agent.release
        return agent

    def backed_off(self, now: float) -> list[str]:
        """The references whose runs are skipped at monotonic time `now`."""
        return [ref for ref, (until, _) in self._backoff.items() if until > now]
