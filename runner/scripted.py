"""`agent_loop`: seed 004's scripted contract, as a thin adapter over the same step machine.

The seed differs from seed 000 only in its shapes: moves are a list (the move for step n is
`model_outputs[n - 1]`), tools are lookup tables (`tools[name][arg]`), a final carries
`text`, and the statuses are `answered` / `max_steps`. It has no token, repeat or error
budgets, so the adapter turns those off and lets the step cap and the moves bound the run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from runner.budgets import Budgets, StopReason
from runner.journal import EntryKind, MemoryJournal
from runner.loop import drive
from runner.tools import Tool

UNKNOWN_TOOL = "unknown_tool"
UNKNOWN_ARG = "unknown_arg"


def agent_loop(
    model_outputs: Sequence[Mapping[str, Any]],
    tools: Mapping[str, Mapping[Any, Any]],
    max_steps: int,
) -> dict[str, Any]:
    """Play scripted moves against lookup-table tools; return answer, steps, observations, status."""
    moves = list(model_outputs)
    # The model is asked exactly once per step (no retries), so the move for step n is the
    # n-th one read: the seed's `model_outputs[steps]` before `steps` increments.
    script = iter(moves)

    def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        move = next(script)
        if move["type"] == "final":
            return {"type": "final", "content": move["text"]}
        return {"type": "tool", "name": move["name"], "args": {"arg": move["arg"]}}

    # Observations are raw table values; an index into `values` keeps them exact (not str()).
    values: list[Any] = []

    def lookup(table: Mapping[Any, Any]) -> Tool:
        def call(arg: Any) -> int:
            try:
                found = arg in table
            except TypeError:  # an unhashable arg cannot be a key of the table
                found = False
            values.append(table[arg] if found else UNKNOWN_ARG)
            return len(values) - 1

        return Tool(call)

    budgets = Budgets(
        max_steps=max(0, min(max_steps, len(moves))),
        max_tokens=None,
        max_consecutive_errors=None,
        max_repeats=None,
        model_retries=0,
    )
    journal = MemoryJournal()
    tool_set = {name: lookup(table) for name, table in tools.items()}
    result = drive(model, tool_set, "", budgets, journal)

    observations: list[Any] = []
    for entry in journal.entries:
        if entry.kind is not EntryKind.OBSERVATION:
            continue
        # The only error an observation can carry here is the loop's unknown-tool lookup.
        observations.append(UNKNOWN_TOOL if entry.is_error else values[int(entry.content)])
    answered = result.stop_reason is StopReason.FINAL
    return {
        "answer": result.output if answered else None,
        "steps": result.steps,
        "observations": observations,
        "status": "answered" if answered else "max_steps",
    }
