"""Sub-agents SIGKILLed, on SQLite and PostgreSQL: the `runner` command driving a tree (a
lead and two concurrent sub-agents, each calling a plain tool with an effect) is killed
while the children are being created, while they run, and while their ends are delivered;
`runner resume` of the lead then finishes the tree. An external ledger shows every child
started exactly once (one child run per call, its id derived from the call's key) and each
child's non-idempotent tool ran at most once; the root's spend is the sum of the tree's."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from runner.core.tree import child_run_id
from runner.sql.database import connect
from runner.sql.schema import entries, runs

from .harness import KILLED, cli, cli_env, described

AGENTS = Path(__file__).resolve().with_name("tree_agents.py")
ANSWER = "papers done + web done"

FAULTS = [
    "before_wait_commit@1",  # the lead is about to create its children: nothing created
    "after_wait_commit@1",  # children created, the lead parked, no child has run
    "after_action_commit@3",  # both children running: the second's call committed
    "during_tool@1",  # a child's effect done, its outcome not recorded
    "after_final_commit@1",  # a child ended, its end not yet delivered
    "before_delivery_commit@1",  # a child's end being delivered, not committed
    "after_delivery_commit@1",  # a child's end delivered
]


def tree(db_url: str, root: str) -> list:  # type: ignore[type-arg]
    engine = connect(db_url)
    try:
        with engine.connect() as connection:
            return list(connection.execute(select(runs).where(runs.c.root_id == root)).all())
    finally:
        engine.dispose()


def answers_of(db_url: str, run_id: str) -> list[str | None]:
    engine = connect(db_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                select(entries.c.idempotency_key)
                .where(entries.c.run_id == run_id, entries.c.kind == "answer")
                .order_by(entries.c.seq)
            ).all()
    finally:
        engine.dispose()
    return [row.idempotency_key for row in rows]


@pytest.mark.parametrize("fault", FAULTS)
def test_a_tree_killed_then_resumed_starts_each_child_once(
    fault: str, db_url: str, ledger: Path
) -> None:
    root = "lead-" + fault.replace("@", "-")
    killed = cli(
        "run", f"{AGENTS}:lead", "research", "--id", root,
        db_url=db_url, ledger=ledger, env=cli_env(db_url, ledger, fault=fault),
    )  # fmt: skip
    assert killed.returncode == KILLED, described(killed)

    resumed = cli("resume", root, db_url=db_url, ledger=ledger)
    assert resumed.returncode == 0, described(resumed)
    assert resumed.stdout.strip() == ANSWER

    rows = {row.id: row for row in tree(db_url, root)}
    lead = rows.pop(root)
    # One child per call, each the run its call's key names, finished with its answer.
    keys = {f"{root}-1.1", f"{root}-1.2"}
    assert {row.parent_call_key for row in rows.values()} == keys
    assert set(rows) == {child_run_id(root, key) for key in keys}
    assert sorted(row.output for row in rows.values()) == ["papers done", "web done"]
    # Each child's end delivered exactly once.
    assert sorted(answers_of(db_url, root)) == sorted(keys)
    # The effect ran at most once per call, and only in those children.
    # No ledger at all when the kill came after both children's actions and before either
    # tool ran (one group commit can hold both): each call then ended OutcomeUnknown.
    written = ledger / "tree.ledger"
    lines = written.read_text().splitlines() if written.exists() else []
    effects = [line.split() for line in lines]
    by_key = [key for _, run_id, key, _ in effects]
    assert len(by_key) == len(set(by_key)) and {run_id for _, run_id, *_ in effects} <= set(rows)
    # The root's spend is the tree's: its own plus what was charged below it.
    assert lead.tokens + lead.below_tokens == sum(row.tokens for row in tree(db_url, root))
    assert lead.below_tokens == sum(row.tokens for row in rows.values())
    assert lead.below_steps == sum(row.steps for row in rows.values())
