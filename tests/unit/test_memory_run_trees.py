"""Trees of runs on the in-memory store, and how rows become a tree: the same shape as the
SQL store reads (tests/integration/test_run_trees.py), and no run read is ever left out."""

from __future__ import annotations

from runner import Agent, Runner
from runner.store.rows import new_run
from runner.store.run_trees import tree_of
from runner.testing import ScriptedModel

from .store_support import memory_runner


def child(runner: Runner, parent_id: str, key: str, run_id: str) -> None:
    parent = runner.row(parent_id)
    row = new_run(
        run_id=run_id, agent=None, agent_name="sub", release=None, task="t", budgets={},
        at=runner.now(), parent_id=parent.id, root_id=parent.root_id, parent_call_key=key,
    )  # fmt: skip
    assert runner.store.create_run(row)


def test_the_in_memory_store_reads_a_tree_as_the_sql_store_does() -> None:
    runner, _, clock = memory_runner()
    runner.run(Agent(ScriptedModel([{"type": "final", "content": "ok", "usage": 7}])), "t", id="r")
    for key, run_id in (("r-1", "a"), ("r-2", "b")):
        clock.advance(1)
        child(runner, "r", key, run_id)
    clock.advance(1)
    child(runner, "a", "a-1", "a1")
    runner.run(Agent(ScriptedModel(["alone"])), "t", id="other")
    tree = runner.tree("a1")
    assert [(t.row.id, [c.row.id for c in t.children]) for t in tree.walk()] == [
        ("r", ["a", "b"]), ("a", ["a1"]), ("a1", []), ("b", []),
    ]  # fmt: skip
    assert (tree.runs, tree.tokens, tree.cut) == (4, 7, False)
    assert [t.row.state for t in tree.walk()] == ["finished", "queued", "queued", "queued"]
    assert runner.tree("other").runs == 1


def test_a_run_whose_parent_is_gone_hangs_from_the_root_and_a_gone_root_is_replaced() -> None:
    runner, _, _ = memory_runner()
    runner.run(Agent(ScriptedModel(["x"])), "t", id="r")
    child(runner, "r", "r-1", "a")
    child(runner, "a", "a-1", "a1")
    rows = [runner.row(i) for i in ("r", "a", "a1")]
    pruned = [rows[0], rows[2]]  # a was pruned: a1 is still shown, under the root
    assert [(t.row.id, len(t.children)) for t in tree_of(pruned, "r").walk()] == [
        ("r", 1), ("a1", 0),
    ]  # fmt: skip
    headless = tree_of(rows[1:], "r")  # the root itself is gone: the oldest run read leads
    assert [t.row.id for t in headless.walk()] == ["a", "a1"]
