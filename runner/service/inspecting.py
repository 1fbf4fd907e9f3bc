"""Reading runs as they stand, and asking one to stop."""

from __future__ import annotations

from collections.abc import Sequence

from runner.core.journal import Entry
from runner.core.result import AgentResult
from runner.core.status import RunStatus
from runner.core.stop_reasons import StopReason
from runner.service.runner_base import RunnerBase
from runner.store.rows import RunRow
from runner.store.run_trees import TREE_LIMIT, RunTree, tree_of


class Inspecting(RunnerBase):
    """The `Runner`'s part that lists and reads runs, and cancels them."""

    def journal(self, run_id: str) -> list[Entry]:
        """The run's journal entries in order, including those never shown to the model."""
        run = self.store.find_run(run_id)
        return [entry for entry, _ in self.store.load_entries(run.id)]

    def list(
        self,
        *,
        status: RunStatus | None = None,
        stop_reason: StopReason | None = None,
        release: str | None = None,
        limit: int = 20,
        state: str | None = None,
        schedule: str | None = None,
    ) -> Sequence[RunRow]:
        """Runs, newest first, as `row` gives them. `state` filters by state: `running`
        leaves out the stalled runs that `status=running` includes; `schedule`: only the
        runs that schedule started."""
        now = self.now()  # before the connection: measuring the clock may take another
        return self.store.list_runs(
            now, status=status, stop_reason=stop_reason, release=release, limit=limit,
            state=state, schedule=schedule,
        )  # fmt: skip

    def tree(self, run_id: str) -> RunTree:
        """The whole tree of runs that run `run_id` is in (a sub-agent's parent, its root,
        their other children), drawn from its root, each run as `row` gives it."""
        run = self.store.find_run(run_id)
        root_id = run.root_id or run.id
        rows = self.store.tree_runs(root_id, TREE_LIMIT + 1)
        now = self.now()
        cut = len(rows) > TREE_LIMIT
        return tree_of(self.store.observe(rows[:TREE_LIMIT], now), root_id, cut=cut)

    def cancel(self, run_id: str) -> AgentResult:
        """Ask the run to stop before its next step (at once if no worker holds it: a queued
        or waiting run finishes `cancelled` there and then), and every run below it (the
        child runs of its sub-agents, theirs, ...); a cancelled child's end is its parent's
        observation."""
        run = self.store.find_run(run_id)
        self.store.request_cancel(run.id)
        return self.get(run.id)
