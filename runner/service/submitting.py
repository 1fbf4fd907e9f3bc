"""Putting runs in the queue: one, many, a fork of another; and the queues' limits."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from runner.core.agent import Agent
from runner.errors import AgentLoadError
from runner.service import submissions
from runner.service.delays import start_time
from runner.service.runner_base import RunnerBase
from runner.store.rows import QueueInfo
from runner.store.rules import Expired, Rules, check_keep_runs, check_keep_seconds


class Submitting(RunnerBase):
    """The `Runner`'s part that queues runs for workers."""

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
        return submissions.submit_items(self.store, items, batch_size=batch_size, wake=wake)

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
        self.store.set_queue_limit(name, limit)

    def queues(self) -> list[QueueInfo]:
        """Every queue with a limit, retention rules or an unfinished run: its limit and
        rules, and its runs queued, delayed, running (under a live lease: what the limit
        counts) and waiting. The default rules of every queue are the row named `*`."""
        return self.store.list_queues(self.now())

    def set_retention(
        self,
        name: str,
        *,
        keep: float | timedelta | None = None,
        keep_runs: int | None = None,
    ) -> None:
        """Workers delete the finished runs of queue `name` (`*`: of every queue whose own
        rules leave one unset), with their journals, once they finished longer than `keep`
        (seconds or a timedelta) ago, or are not among its newest `keep_runs` finished runs.
        None: no such rule. Both rules are set as given. Runs not finished, or in a tree
        with a run not finished, are never deleted."""
        self.store.set_retention(name, Rules(check_keep_seconds(keep), check_keep_runs(keep_runs)))

    def prune_expired(self, now: datetime | None = None) -> Expired:
        """Delete what the queues' retention rules expire at `now` (default: the database's
        clock), as a worker does every minute: at most ten batches of 100 runs, one
        transaction each (call again while `runs` comes back 1,000)."""
        return self.store.prune_expired(self.now() if now is None else now)

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

        parent = self.store.find_run(run_id)
        journal = [entry for entry, _ in self.store.load_entries(parent.id)]
        copied = fork.prefix(parent, journal, at_step)
        chosen = fork.fork_budgets(parent, copied, budgets)
        if agent is not None:
            loaded = self._agent(agent)
            ref, name, release = loaded.reference(), loaded.name, loaded.release
        else:
            ref, name, release = parent.agent, parent.agent_name, parent.release
        new_id = self._new_id(id)
        created = fork.create_fork(
            self.store,
            parent,
            copied,
            run_id=new_id,
            agent=ref,
            agent_name=name,
            release=release,
            budgets=chosen,
        )
        if not created:
            origin = (parent.id, at_step)
            existing = self.store.get_run(new_id)
            submissions.refuse_another(
                existing, self.store, ref, name, parent.task, chosen.as_dict(), forked_from=origin
            )
        return new_id
