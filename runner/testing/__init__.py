"""Fakes for testing agents and the code around them, shipped with the library.

`InMemoryStore` (`memory_store`, with its rows in `memory_rows`, its answers in
`memory_answers`, its inboxes in `memory_messages`, its provider limits in `memory_limits`, its
releases in `memory_releases`, its journal in `memory_journal`, its deltas in `memory_deltas`,
its schedules in `memory_schedules`, its retention in `memory_retention` and its scores in
`memory_scores`) is the store of durable runs in memory: `Runner(store=InMemoryStore())` and
`Worker(store=...)` run, claim, answer, queue, revive, fork, schedule and prune runs by the SQL
store's rules with no database (`runner.store.protocol` is what both stores provide).
`TestModel`, `FunctionModel` and `ScriptedModel` (`models`) need no provider: an agent's tests
run in milliseconds, the same way every time. The manual's guide docs/guides/testing.md shows
them.

It may import: `runner.core`, `runner.models`, `runner.tracing`, `runner.store`,
`runner.service` and the shared leaves (never `runner.sql`: the fake stands on the store's
contract alone, and importing it loads no SQLAlchemy).
"""

from __future__ import annotations

from runner.testing.memory_journal import MemoryRunJournal
from runner.testing.memory_rows import InMemoryStoreError
from runner.testing.memory_store import InMemoryStore
from runner.testing.models import (
    FunctionModel,
    ScriptedModel,
    TestModel,
    call,
    example_args,
    final,
    tool_results,
    turns,
)

__all__ = [
    "FunctionModel",
    "InMemoryStore",
    "InMemoryStoreError",
    "MemoryRunJournal",
    "ScriptedModel",
    "TestModel",
    "call",
    "example_args",
    "final",
    "tool_results",
    "turns",
]
