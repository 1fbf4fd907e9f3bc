"""`show` says which attempt gave a call's outcome when the call ran more than once (a crash
in the call, run again with its key); a call run once reads as before."""

from __future__ import annotations

from runner.cli import run_output as output
from runner.core.actions import ActionKind
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind
from runner.core.result import AgentResult
from runner.core.stop_reasons import StopReason
from tests.unit.test_operating_output import NOW, a_row


def journal(attempt: int) -> list[Entry]:
    step = Counters(steps=1)
    return [
        Entry(EntryKind.TASK, 0, Counters(), content="t"),
        Entry(EntryKind.ACTION, 1, step, tool="charge", args={"amount": 5},
              action_type=ActionKind.TOOL, idempotency_key="r1-1"),
        Entry(EntryKind.OBSERVATION, 1, step, content="charged", tool="charge",
              idempotency_key="r1-1", attempt=attempt),
        Entry(EntryKind.FINAL, 2, step, content="35"),
    ]  # fmt: skip


def test_a_call_run_again_names_its_attempt() -> None:
    result = AgentResult(StopReason.FINAL, "35", 2, [], tokens=1)
    again = output.render_run(result, a_row(), journal(2), NOW)
    assert "  <- charge [ok, attempt 2]  charged" in again
    once = output.render_run(result, a_row(), journal(1), NOW)
    assert "  <- charge [ok]  charged" in once
