"""`agent_loop`: seed 004's scripted contract, as a thin adapter over the same step machine.

The seed differs from seed 000 only in its shapes: moves are a list (the move for step n is
`model_outputs[n - 1]`), tools are lookup tables (`tools[name][arg]`), a final carries
`text`, and the statuses are `answered` / `max_steps`. It has no token, repeat or error
budgets, so the adapter turns those off and lets the step cap and the moves bound the run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from runner.core.budgets import Budgets
from runner.core.journal import EntryKind, MemoryJournal
from runner.core.loop import drive
from runner.core.stop_reasons import StopReason
from runner.core.tools import Tool

UNKNOWN_TOOL = "unknown_tool"
UNKNOWN_ARG = "unknown_arg"


def agent_loop(
    model_outputs: Sequence[Mapping[str, Any]],
    tools: Mapping[Any, Mapping[Any, Any]],
    max_steps: int,
) -> dict[str, Any]:
    """Play scripted moves on lookup-table tools: answer, steps, observations, status."""
    moves = list(model_outputs)
    # The seed's guard, `steps < max_steps and steps < len(model_outputs)`, evaluated as
    # written, so any cap compares as it does there (2.5 allows three moves, -1 none).
    cap = 0
    while cap < max_steps and cap < len(moves):
        cap += 1
    # The model is asked exactly once per step (no retries), so the move for step n is the
    # n-th one read: the seed's `model_outputs[steps]` before `steps` increments.
    script = iter(moves)
    # The loop wants string tool names and JSON args, the seed takes any hashable name and
    # arg: the loop sees an alias of each table and an index into `args`, never a value JSON
    # would change (a tuple would come back as an unhashable list).
    aliases = {name: f"table {i}" for i, name in enumerate(tools)}
    args: list[Any] = []
    # What the seed would raise on a malformed move (a missing key, an unhashable name or
    # arg): the loop would only observe it, so it is kept, the run cancelled, and re-raised.
    failures: list[Exception] = []

    def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        try:
            move = next(script)
            if move["type"] == "final":
                return {"type": "final", "content": move["text"]}
            name, arg = move["name"], move["arg"]
            known = name in tools  # the seed's own test: it raises where the seed's does
        except Exception as exc:
            failures.append(exc)
            raise
        args.append(arg)
        alias = aliases[name] if known else UNKNOWN_TOOL  # never an alias
        return {"type": "tool", "name": alias, "args": {"arg": len(args) - 1}}

    # Observations are raw table values; an index into `values` keeps them exact (not str()).
    values: list[Any] = []

    def lookup(table: Mapping[Any, Any]) -> Tool:
        def call(arg: int) -> int:
            try:
                given = args[arg]
                found = given in table  # the seed's test, then its lookup
                values.append(table[given] if found else UNKNOWN_ARG)
            except Exception as exc:
                failures.append(exc)
                raise
            return len(values) - 1

        return Tool(call)

    budgets = Budgets(
        max_steps=cap,
        max_tokens=None,
        max_consecutive_errors=None,
        max_repeats=None,
        model_retries=0,
    )
    journal = MemoryJournal()
    tool_set = {aliases[name]: lookup(table) for name, table in tools.items()}
    result = drive(model, tool_set, "", budgets, journal, cancel=lambda: bool(failures))
    if failures:
        raise failures[0]

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
