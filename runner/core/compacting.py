"""Asking for a summary of a run's older steps (runner.core.compaction) and making the entry
that journals it, with what its model call spent charged to the run's counters."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from runner.core.actions import ActionKind, parse_action
from runner.core.compaction import Compacted, Due
from runner.core.journal import Entry, EntryKind
from runner.core.model_call import ModelCall, ModelFailed
from runner.core.stop_rules import StopRules


@dataclass
class Compacting:
    """A run's summaries (`compacted`) and the model call that writes them (`call`: the
    run's own, or the policy's model under the run's deadline, cancel, tree and limits)."""

    compacted: Compacted
    call: ModelCall

    def summarise(
        self, transcript: list[dict[str, Any]], due: Due, rules: StopRules, step: int
    ) -> Entry:
        """The compaction entry of `step`: the summary model's answer for `due`, its spend
        added to the run's counters (ModelFailed if it gave no summary)."""
        output = self.call.ask(self.compacted.request(transcript, due), rules.budgets, step)
        action = parse_action(output)
        if action.kind is not ActionKind.FINAL or not str(action.content or "").strip():
            self.journaled()
            why = action.error or "it called a tool instead of answering"
            raise ModelFailed(f"the summary model gave no summary: {why}")
        c = rules.counters
        counters = replace(c, tokens=c.tokens + action.tokens, cost=c.cost + action.cost)
        return Entry(
            EntryKind.COMPACTION,
            step,
            counters,
            content=str(action.content),
            args=Compacted.record(due),
            tokens=action.tokens,
            cost=action.cost,
        )

    def journaled(self) -> None:
        """End the summary call's hold on the tree's budget: its entry is written (and
        charged what it spent), and the hold is of the step whose call comes next."""
        held, self.call.held = self.call.held, None
        self.call.release_tree(held)
