"""A worker's scorers: the scorers of ended runs (runner.service.scoring), run on threads of
their own so that a scorer takes no run's slot.

A worker looks for scores due after a run of an agent with scorers ends, and every
SWEEP_SECONDS (a run another process ended, a lapsed claim); a drain (`once`) with no run
left looks at every pass, and ends only once none is due or running. The serving loop
(runner.service.worker) starts the threads and calls `look()` between claims.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from runner.core.agent import Agent
from runner.errors import AgentLoadError, first_line
from runner.service.database_wait import raise_if_damaged
from runner.service.housekeeping import SWEEP_SECONDS
from runner.service.loaded_agents import LoadedAgents
from runner.service.runner import Runner
from runner.service.worker_log import WorkerLog
from runner.store.scores import DueScore

# Scorers of ended runs run at once on at most this many threads (fewer than the concurrency).
SCORER_THREADS = 4


class ScorerPool:
    """The scorers a worker of `concurrency` slots runs, at most SCORER_THREADS at once."""

    def __init__(
        self,
        runner: Runner,
        agents: LoadedAgents,
        *,
        concurrency: int,
        wake: threading.Event,
        say: WorkerLog,
    ) -> None:
        self.runner = runner
        self.store = runner.store
        self.agents = agents
        self.threads = min(concurrency, SCORER_THREADS)
        self.wake = wake
        self.say = say
        self._scorers: ThreadPoolExecutor | None = None
        self._scoring: set[tuple[str, str]] = set()
        self._scoring_lock = threading.Lock()
        self._scores_at = -SWEEP_SECONDS
        self._scores_due = False

    def start(self) -> ThreadPoolExecutor:
        """The scorers' threads, which the serving loop shuts down when it ends."""
        self._scorers = ThreadPoolExecutor(self.threads, thread_name_prefix="runner-score")
        return self._scorers

    def due_soon(self) -> None:
        """A run of an agent with scorers ended: look at the next pass."""
        self._scores_at = -SWEEP_SECONDS

    def busy(self) -> bool:
        """Whether scorers run, or the last look found some due."""
        return self._scores_due or bool(self._scoring)

    def look(self, every_pass: bool) -> None:
        """Start the scorers due, if it is time to look (`every_pass`: it is)."""
        # The scorers of ended runs that no live worker runs, a few at a time. A drain
        # (`once`) with no run left looks at every pass: it exits only when none is left.
        # While its runs go on it looks as a server does (every SWEEP_SECONDS, and after a
        # run of an agent with scorers ends): a look at every pass was a query each time a
        # run ended, a thousand in a drain of a thousand runs.
        if self._scorers is None:
            return
        now = time.monotonic()
        if not every_pass and now - self._scores_at < SWEEP_SECONDS:
            return
        self._scores_at = now
        with self._scoring_lock:
            free = self.threads - len(self._scoring)
            busy = set(self._scoring)
        if free <= 0:
            return
        skip = self.agents.backed_off(now)
        try:
            due = self.store.due_scores(free + len(busy), skip)
        except self.store.outages as exc:
            raise_if_damaged(self.store, exc)
            self.say(logging.WARNING, f"scores not looked for, retrying: {first_line(exc)}")
            return
        due = [d for d in due if (d.run_id, d.name) not in busy][:free]
        self._scores_due = False
        for one in due:
            try:
                agent = self.agents.load(one.agent, one.run_id)
            except AgentLoadError as exc:
                self.say(logging.WARNING, f"run {one.run_id} not scored: {exc}", one.run_id)
                continue
            self._scores_due = True
            with self._scoring_lock:
                self._scoring.add((one.run_id, one.name))
            self._scorers.submit(self._run_scorer, one, agent)

    def _run_scorer(self, due: DueScore, agent: Agent) -> None:
        try:
            kept = self.runner.run_scorer(due, agent)
            if kept is not None:
                self.say(
                    logging.INFO if kept else logging.WARNING,
                    f"run {due.run_id} scored: {due.name}"
                    if kept
                    else f"run {due.run_id}: score {due.name} lost its claim, not kept",
                    due.run_id,
                )
        except Exception as exc:
            self.say(
                logging.WARNING,
                f"run {due.run_id}: scorer {due.name} interrupted: {first_line(exc)}",
                due.run_id,
            )
        finally:
            with self._scoring_lock:
                self._scoring.discard((due.run_id, due.name))
            self._scores_at = -SWEEP_SECONDS  # look again at once: more may be due
            self.wake.set()
