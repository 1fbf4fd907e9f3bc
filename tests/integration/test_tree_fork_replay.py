"""Fork and replay of a parent whose sub-agents ran as child runs, on SQLite and PostgreSQL.

- `replay` of the parent reuses its children's recorded outcomes (a child's end is the
  parent's observation, journaled as its wait's answer): no model of a child is asked, no
  child run is started, and the replay agrees.
- A fork at a step after the children's call copies their outcomes with the step and starts
  no child; a fork before it starts children of its own, whose ids derive from the fork's
  own call keys. Either way the original's children are neither copied nor re-attached:
  they stay the original's, and the fork is a root of its own.
"""

from __future__ import annotations

from typing import Any

from runner import Agent, Runner
from runner.core.tree import child_run_id
from runner.testing import FunctionModel, tool_results, turns

CHILD_CALLS: list[str] = []  # each child model call: the task it was given


def _child(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    task = str(transcript[0]["content"])
    CHILD_CALLS.append(task)
    return {"type": "final", "content": f"{task}: 42", "usage": 10}


def _lead(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    if turns(transcript) == 0:
        calls = [
            {"name": "web", "args": {"task": "search the web"}},
            {"name": "papers", "args": {"task": "search papers"}},
        ]
        return {"type": "tool", "calls": calls, "usage": 10}
    found = sorted(str(message["content"]) for message in tool_results(transcript))
    return {"type": "final", "content": " | ".join(found), "usage": 10}


web = Agent(FunctionModel(_child), name="web")
papers = Agent(FunctionModel(_child), name="papers")
lead = Agent(
    FunctionModel(_lead),
    {"web": web.as_tool("web"), "papers": papers.as_tool("papers")},
    name="lead",
)
ANSWER = "search papers: 42 | search the web: 42"


def run_tree(runner: Runner) -> list[str]:
    """The lead run `tree` to its end; its children's ids."""
    result = runner.run(lead, "what is the answer?", id="tree", max_tokens=10_000)
    assert (result.stop_reason, result.output) == ("final", ANSWER)
    children = [child.id for child in runner.store.child_runs("tree")]
    assert sorted(children) == sorted(child_run_id("tree", key) for key in ("tree-1.1", "tree-1.2"))
    return children


def test_replay_of_a_parent_reuses_its_childrens_recorded_outcomes(db_url: str) -> None:
    with Runner(db_url) as runner:
        children = run_tree(runner)
        runs_before = runner.tree("tree").runs
        CHILD_CALLS.clear()
        report = runner.replay("tree", agent=lead)
        assert report.agrees, report
        assert CHILD_CALLS == []  # no child's model was asked again
        assert runner.tree("tree").runs == runs_before == 3  # no child run was started
        assert [child.id for child in runner.store.child_runs("tree")] == children


def test_a_fork_after_the_childrens_step_copies_their_outcomes_and_starts_none(
    db_url: str,
) -> None:
    with Runner(db_url) as runner:
        children = run_tree(runner)
        CHILD_CALLS.clear()
        forked = runner.fork("tree", 1, id="after")
        result = runner.resume(forked, agent=lead)
        assert (result.stop_reason, result.output) == ("final", ANSWER)
        assert CHILD_CALLS == []  # the copied step's children's answers were copied
        assert runner.store.child_runs(forked) == []
        row = runner.row(forked)
        assert (row.forked_from_id, row.parent_id, row.root_id) == ("tree", None, forked)
        # The original's children are still its own, and its tree did not grow.
        assert [child.id for child in runner.store.child_runs("tree")] == children
        assert {runner.row(child).parent_id for child in children} == {"tree"}
        assert runner.tree("tree").runs == 3 and runner.tree(forked).runs == 1


def test_a_fork_before_the_childrens_step_starts_children_of_its_own(db_url: str) -> None:
    with Runner(db_url) as runner:
        children = run_tree(runner)
        CHILD_CALLS.clear()
        forked = runner.fork("tree", 0, id="before")
        result = runner.resume(forked, agent=lead)
        assert (result.stop_reason, result.output) == ("final", ANSWER)
        assert sorted(CHILD_CALLS) == ["search papers", "search the web"]
        own = [child.id for child in runner.store.child_runs(forked)]
        # Their ids derive from the fork's own call keys: never the original's children.
        expected = [child_run_id(forked, key) for key in (f"{forked}-1.1", f"{forked}-1.2")]
        assert sorted(own) == sorted(expected) and not set(own) & set(children)
        assert {runner.row(child).root_id for child in own} == {forked}
        assert [child.id for child in runner.store.child_runs("tree")] == children
        assert runner.tree("tree").runs == 3 and runner.tree(forked).runs == 3
