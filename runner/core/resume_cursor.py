"""What a resumed loop takes from its journal instead of asking again: the entries a previous
process recorded, in their order, each checked against what the loop now expects."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from runner.core.actions import ActionKind
from runner.core.budget_changes import CHANGE_KINDS
from runner.core.journal import Entry, EntryKind, Stop
from runner.errors import ReplayMismatch

# What a step's first entry may be: a call, an answer, or an action a stop rule refused.
ACTION_KINDS = (EntryKind.ACTION, EntryKind.FINAL, EntryKind.REFUSED)
# What the cursor takes by itself wherever it comes: budget changes (applied) and the record
# of a wait for a provider limit (runner.core.limits: nothing to replay).
_PASSED_OVER = (*CHANGE_KINDS, EntryKind.LIMIT_WAIT)


@dataclass
class Recorded:
    """A cursor over the entries a previous process recorded.

    Budget changes (revivals, extensions) are applied where they were recorded, by
    `on_change`, and waits for a limit passed over: every other entry is taken by the loop
    in its order.
    """

    entries: Sequence[Entry]
    on_change: Callable[[Entry], None]
    position: int = 0

    def take(self, step: int, kinds: tuple[EntryKind, ...]) -> Entry | None:
        entry = self._next()
        if entry is None:
            return None
        if entry.step != step or entry.kind not in kinds:
            expected = "/".join(kinds)
            raise ReplayMismatch(
                f"journal entry {self.position} is {entry.kind} of step {entry.step}, "
                f"but the loop expected {expected} of step {step}: the agent's budgets or "
                "code changed since the run started",
                step=min(step, entry.step),
                recorded=entry,
                now=f"expects {expected} of step {step}",
            )
        self.position += 1
        return entry

    def _next(self) -> Entry | None:
        """The entry to take next, past the changes recorded before it (applied); None when
        all are taken (a fresh run's every call: nothing to look at)."""
        if self.position >= len(self.entries):
            return None
        entry = self.entries[self.position]
        if entry.kind not in _PASSED_OVER:  # the common case: no change to apply first
            return entry
        self.changes()
        return self.entries[self.position] if self.position < len(self.entries) else None

    def changes(self) -> bool:
        """Apply the budget changes recorded next; True if there was one (a stop the loop
        just replayed was lifted by it, and the run went on)."""
        found = False
        while self.position < len(self.entries) and self.entries[self.position].kind in (
            _PASSED_OVER
        ):
            entry = self.entries[self.position]
            if entry.kind in CHANGE_KINDS:
                self.on_change(entry)
                found = True
            self.position += 1
        return found

    def expect_end(self, step: int, stop: Stop) -> None:
        """The loop stops here: the journal must not go on (else the code now stops where
        the recorded run did not)."""
        while (
            self.position < len(self.entries)
            and self.entries[self.position].kind is EntryKind.LIMIT_WAIT
        ):
            self.position += 1  # it waited for its limit, then stopped before the call
        if self.position >= len(self.entries):
            return
        entry = self.entries[self.position]
        raise ReplayMismatch(
            f"the loop stops at step {step} ({stop.reason}) but journal entry "
            f"{self.position} is {entry.kind} of step {entry.step}: the agent's budgets or "
            "code changed since the run started",
            step=step,
            recorded=entry,
            now=f"stops with {stop.reason}",
        )

    def take_if(self, step: int, kind: EntryKind) -> Entry | None:
        """The next entry if it is `kind` of `step`; else None, and nothing is taken."""
        entry = self._next()
        if entry is not None and entry.step == step and entry.kind is kind:
            self.position += 1
            return entry
        return None

    @property
    def done(self) -> bool:
        return self.position >= len(self.entries)

    def take_action(self, step: int) -> tuple[Entry, ...]:
        """The step's recorded action: one row, or one per call of a step of several."""
        first = self.take(step, ACTION_KINDS)
        if first is None:
            return ()
        rows = [first]
        if first.action_type is ActionKind.TOOL:
            while self.position < len(self.entries):
                entry = self.entries[self.position]
                if entry.step != step or entry.kind is not first.kind:
                    break
                rows.append(entry)
                self.position += 1
        return tuple(rows)
