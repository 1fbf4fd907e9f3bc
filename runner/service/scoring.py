"""Scores of runs: `Runner.score` (a person's), and running an agent's scorers once a run
has ended, exactly once per run and scorer (the rules: runner.store.scores).

A worker runs a due scorer in three transactions: the claim (the row `scoring` under a new
epoch, one more start counted), the scorer itself (no transaction: a model-judged one calls
a model, drawing from the provider limits), and its result, written only while the claim is
still the worker's. Meanwhile a thread renews the claim's lease. A crash between claim and
result leaves the row to lapse; the next worker starts the scorer again, once: a row started
twice whose lease lapsed again is failed.

A worker's threads for scorers, and when it looks for scores due: runner.service.scorer_pool.
What a scorer is and the model-judged one: runner.core.scoring; the rules of a claim:
runner.store.scores; their SQL: runner.sql.scores (runner.testing.memory_scores in memory);
`runner score`: runner.cli.scores; the means per release: runner.history.score_stats.
"""

from __future__ import annotations

import threading

from runner.core.agent import Agent
from runner.core.faults import fault
from runner.core.journal import transcript_of
from runner.core.scoring import ScoredRun, as_score, check_name, check_value, cut_note
from runner.core.status import RunStatus
from runner.errors import RequestRefused
from runner.service.runner_base import RunnerBase
from runner.store.protocol import RunStore
from runner.store.scores import DueScore, ScoreClaim, ScoreRow


class Scoring(RunnerBase):
    """The `Runner`'s part that keeps scores of runs."""

    def score(self, run_id: str, name: str, value: float, note: str | None = None) -> ScoreRow:
        """Keep a score of the run (a unique id prefix works): `value` a finite number (a
        bool is 1 or 0), `note` why. A score of the same name replaces the run's earlier one,
        a scorer's not yet kept included (the scorer's result is then not kept)."""
        run = self.store.find_run(run_id)
        return self.store.record_score(run.id, check_name(name), check_value(value), cut_note(note))

    def scores(self, run_id: str) -> list[ScoreRow]:
        """The run's scores by name: kept, failed, and scorers' not yet run."""
        return self.store.run_scores(self.store.find_run(run_id).id)

    def run_scorers(self, run_id: str, agent: Agent | None = None) -> list[ScoreRow]:
        """Run here the scorers of an ended run that are still due (as a worker would, with
        the same claims: each is kept once, whoever runs it), and return the run's scores.
        `agent`: the run's agent (default: imported from the run's reference)."""
        run = self.store.find_run(run_id)
        if run.status is not RunStatus.FINISHED:
            raise RequestRefused(f"run {run.id} has not ended: its scorers run once it has")
        agent = agent if agent is not None else self._stored_agent(run)
        if agent.scorers:
            self.store.plan_scores(run.id, list(agent.scorers))
        for name in agent.scorers:
            run_scorer(self.store, DueScore(run.id, name, run.agent), agent, self.lease_seconds)
        return self.store.run_scores(run.id)

    def run_scorer(self, due: DueScore, agent: Agent) -> bool | None:
        """Run one due scorer of an ended run with `agent`'s scorers: True if its score (or
        its failure) was kept, False if the claim was lost before, None if another worker
        has it or it is done."""
        return run_scorer(self.store, due, agent, self.lease_seconds)


def plan(store: RunStore, run_id: str, agent: Agent, ref: str | None) -> None:
    """The rows of the run's scorers, pending, before it runs (a crash after its end leaves
    them for any worker to find): only for a run a worker can find the agent of (`ref`)."""
    if agent.scorers and ref is not None:
        store.plan_scores(run_id, list(agent.scorers))


def run_scorer(store: RunStore, due: DueScore, agent: Agent, lease_seconds: float) -> bool | None:
    held = store.claim_score(due.run_id, due.name, lease_seconds)
    if held is None:
        return None
    scorer = agent.scorers.get(due.name)
    if scorer is None:
        return store.finish_score(held, None, f"agent {agent.ref} has no scorer {due.name!r}")
    with _renewing(store, held, lease_seconds):
        run = store.get_run(due.run_id)
        entries = [entry for entry, _epoch in store.load_entries(run.id)]
        shown = ScoredRun(
            id=run.id,
            task=run.task,
            output=run.output,
            stop_reason=None if run.stop_reason is None else str(run.stop_reason),
            agent_name=run.agent_name,
            release=run.release,
            steps=run.steps,
            tokens=run.tokens,
            cost=run.cost,
            transcript=transcript_of(entries),
            limits=store.scorer_limits(run.id),
        )
        value: float | None
        try:
            score = as_score(scorer.fn(shown))
            value, note = score.value, score.note
        except Exception as exc:
            value, note = None, cut_note(f"{type(exc).__name__}: {exc}")
        fault("before_score_commit")
        kept = store.finish_score(held, value, note)
    fault("after_score_commit")
    return kept


class _renewing:
    """Renews a scorer's claim every third of its lease while the scorer runs."""

    def __init__(self, store: RunStore, held: ScoreClaim, lease_seconds: float) -> None:
        self.store, self.held, self.lease_seconds = store, held, lease_seconds
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._beat, name="runner-score-lease", daemon=True)

    def _beat(self) -> None:
        while not self.done.wait(self.lease_seconds / 3):
            try:
                if not self.store.renew_score(self.held, self.lease_seconds):
                    return  # lost: its result will not be kept
            except self.store.outages:
                continue  # the next beat tries again; a lapse lets another worker score

    def __enter__(self) -> _renewing:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()
