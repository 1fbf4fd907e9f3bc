"""The write path sits at the floor: counted transactions and statements, not timings.

A durable tool step commits twice (its action with the pending call, then the observation)
and a final step once, and nothing on the per-step path re-reads the journal.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import event

from runner import Agent, Runner


def counting_model(tool_steps: int) -> Any:
    def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        done = sum(1 for m in transcript if m["role"] == "tool")
        if done >= tool_steps:
            return {"type": "final", "content": f"{done} steps"}
        return {"type": "tool", "name": "echo", "args": {"i": done}}

    return model


def agent_with(tool_steps: int) -> Agent:
    return Agent(
        counting_model(tool_steps),
        {"echo": lambda i: f"echo {i}"},
        max_steps=tool_steps + 1,
        max_repeats=None,
    )


@dataclass
class Tally:
    commits: int = 0
    statements: list[str] = field(default_factory=list)


@contextmanager
def tally(runner: Runner) -> Iterator[Tally]:
    counts = Tally()

    def on_commit(_connection: Any) -> None:
        counts.commits += 1

    def on_statement(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        counts.statements.append(" ".join(statement.split()))

    event.listen(runner.engine, "commit", on_commit)
    event.listen(runner.engine, "before_cursor_execute", on_statement)
    try:
        yield counts
    finally:
        event.remove(runner.engine, "commit", on_commit)
        event.remove(runner.engine, "before_cursor_execute", on_statement)


def measure(runner: Runner, tool_steps: int, run_id: str | None = None) -> Tally:
    with tally(runner) as counts:
        result = runner.run(agent_with(tool_steps), "count", id=run_id)
    assert result.stop_reason == "final" and result.steps == tool_steps + 1
    return counts


def test_commits_per_step_are_at_the_floor(db_url: str) -> None:
    # A long lease: no heartbeat commits land in the count.
    with Runner(db_url, lease_seconds=600) as runner:
        for tool_steps in (0, 1, 5, 20):
            counts = measure(runner, tool_steps)
            # create the run claimed with its task (one transaction); 2 per tool step; 1 for
            # the final.
            assert counts.commits == 1 + 2 * tool_steps + 1, (tool_steps, counts.commits)


def test_a_run_given_a_new_id_starts_in_one_commit_too(db_url: str) -> None:
    with Runner(db_url, lease_seconds=600) as runner:
        counts = measure(runner, 3, run_id="given-id")
        assert counts.commits == 1 + 2 * 3 + 1, counts.commits
        # Asked again, the same run is returned as it ended: nothing written.
        before = (runner.row("given-id"), runner.store.load_entries("given-id"))
        result = runner.run(agent_with(3), "count", id="given-id")
        assert result.run_id == "given-id" and result.stop_reason == "final"
        assert (runner.row("given-id"), runner.store.load_entries("given-id")) == before


def test_no_per_step_statement_grows_with_the_transcript(db_url: str) -> None:
    with Runner(db_url, lease_seconds=600) as runner:
        short, long, longer = (measure(runner, n) for n in (10, 20, 40))
    per_step = (len(long.statements) - len(short.statements)) / 10
    assert len(longer.statements) - len(long.statements) == 20 * per_step
    # BEGIN and COMMIT may be emitted as statements (SQLite's BEGIN IMMEDIATE is): beyond
    # them a tool step is exactly two INSERTs, one per entry.
    inserts = [s for s in longer.statements if s.startswith(("INSERT INTO entries", "WITH"))]
    assert len(inserts) == 1 + 2 * 40 + 1
    journal_reads = [s for s in longer.statements if "FROM entries" in s and "SELECT" in s[:7]]
    # Read once when the run is claimed (count) and once when its journal is loaded.
    assert len(journal_reads) <= 2, journal_reads
