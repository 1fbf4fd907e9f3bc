"""An agent whose steps take every shape a step can take, and whose tools write each call they
really make to a ledger file: what forks and replays must copy or read without running again.

Step 1 makes two calls at once (a plain tool, whose pending call is never run again, and an
idempotent one, which would be); step 2 is one call that waits for a person's approval; step
3 makes three calls at once; step 4 answers with every result. Cut its journal anywhere and
each boundary inside a step is there: after a step's calls, between their results, after a
wait, after its answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from runner import Agent, Runner, current_call, tool
from runner.core.journal import Entry, EntryKind
from runner.core.result import AgentResult

Transcript = list[dict[str, Any]]

STEPS: dict[int, dict[str, Any]] = {
    1: {"type": "tool", "text": "Both at once.", "usage": 10, "calls": [
        {"id": "c1", "name": "note", "args": {"text": "a"}},
        {"id": "c2", "name": "keyed", "args": {"n": 1}},
    ]},
    2: {"type": "tool", "name": "refund", "args": {"amount": 250}, "usage": 10},
    3: {"type": "tool", "usage": 10, "calls": [
        {"id": "c3", "name": "keyed", "args": {"n": 2}},
        {"id": "c4", "name": "note", "args": {"text": "b"}},
        {"id": "c5", "name": "note", "args": {"text": "c"}},
    ]},
}  # fmt: skip
CALLS_BY_STEP = {1: 2, 2: 1, 3: 3}


class LedgeredSteps:
    """The agent, and the ledger its tools append `<key> <tool> <attempt>` lines to."""

    def __init__(self, ledger: Path) -> None:
        self.path = ledger
        ledger.touch()

        def write(name: str) -> None:
            call = current_call()
            assert call is not None
            with ledger.open("a") as file:
                file.write(f"{call.idempotency_key} {name} {call.attempt}\n")

        def note(text: str) -> str:
            write("note")
            return f"noted {text}"

        @tool(idempotent=True)
        def keyed(n: int) -> str:
            write("keyed")
            return f"keyed {n}"

        @tool(approval=lambda args: True)
        def refund(amount: int) -> str:
            write("refund")
            return f"refunded {amount}"

        self.agent = Agent(
            model, {"note": note, "keyed": keyed, "refund": refund}, name="ledgered-steps"
        )

    def calls(self) -> list[str]:
        """The idempotency key of each call the tools really made, in order."""
        return [line.split()[0] for line in self.path.read_text().splitlines()]


def model(transcript: Transcript) -> dict[str, Any]:
    step = sum(message["role"] == "assistant" for message in transcript) + 1
    if step in STEPS:
        return STEPS[step]
    results = [str(m["content"]) for m in transcript if m["role"] == "tool"]
    return {"type": "final", "content": " | ".join(results), "usage": 10}


def run_to_the_end(runner: Runner, agent: Agent, run_id: str, task: str | None) -> AgentResult:
    """Run (task given) or resume `run_id`, approving each call it waits on, to its stop."""
    if task is None:
        result = runner.resume(run_id, agent=agent)
    else:
        result = runner.run(agent, task, id=run_id)
    while result.status == "waiting":
        runner.approve(run_id, by="test")
        result = runner.resume(run_id, agent=agent)
    return result


def complete_steps(journal: Sequence[Entry]) -> set[int]:
    """The steps of `journal` that are tool calls with every result recorded."""
    calls: dict[int, set[str | None]] = {}
    results: dict[int, set[str | None]] = {}
    for entry in journal:
        if entry.kind is EntryKind.ACTION:
            calls.setdefault(entry.step, set()).add(entry.idempotency_key)
        elif entry.kind is EntryKind.OBSERVATION:
            results.setdefault(entry.step, set()).add(entry.idempotency_key)
    return {step for step, keys in calls.items() if keys <= results.get(step, set())}


def copy_end(journal: Sequence[Entry], at_step: int) -> int:
    """How many entries a fork at `at_step` copies: through the step's last result."""
    if at_step == 0:
        return 1
    return 1 + max(
        i for i, e in enumerate(journal) if e.step == at_step and e.kind is EntryKind.OBSERVATION
    )
