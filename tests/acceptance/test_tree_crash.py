"""Sub-agents SIGKILLed, on SQLite and PostgreSQL: the `runner` command driving a tree (a
lead and two concurrent sub-agents, each calling a plain tool with an effect) is killed
while the children are being created, while they run, and while their ends are delivered;
`runner resume` of the lead then finishes the tree. An external ledger shows every child
started exactly once (one child run per call, its id derived from the call's key) and each
child's non-idempotent tool ran at most once; the root's spend is the sum of the tree's.

The same of `runner worker`, killed while it holds a run that a transaction made runnable and
claimed for it at once (its slot handed along the tree, runner.store.rules.Relay): a child
created claimed with its parent's park, a parent claimed back with its last child's end.
Another worker takes each over once its lease lapses, and finishes the tree."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import select

from runner.core.tree import child_run_id
from runner.sql.database import connect
from runner.sql.schema import entries, runs, tree_reservations
from tests.conditions import wait_until

from .harness import KILLED, cli, cli_env, described

AGENTS = Path(__file__).resolve().with_name("tree_agents.py")
ANSWER = "papers done + web done"

FAULTS = [
    "before_wait_commit@1",  # the lead is about to create its children: nothing created
    "after_wait_commit@1",  # children created, the lead parked, no child has run
    # (the lead's call is written with its wait: the children's calls are the action commits)
    "after_action_commit@2",  # both children running: the second's call committed
    "during_tool@1",  # a child's effect done, its outcome not recorded
    "after_final_commit@1",  # a child ended, its end delivered in the same commit
    "before_delivery_commit@1",  # a child's last entry and its delivery, not committed
    "after_delivery_commit@1",  # a child's end delivered
]


def tree(db_url: str, root: str) -> list:  # type: ignore[type-arg]
    engine = connect(db_url)
    try:
        with engine.connect() as connection:
            return list(connection.execute(select(runs).where(runs.c.root_id == root)).all())
    finally:
        engine.dispose()


def written(db_url: str, run_id: str) -> list:  # type: ignore[type-arg]
    engine = connect(db_url)
    try:
        with engine.connect() as connection:
            return list(
                connection.execute(
                    select(entries.c.seq, entries.c.kind, entries.c.lease_epoch)
                    .where(entries.c.run_id == run_id)
                    .order_by(entries.c.seq)
                ).all()
            )
    finally:
        engine.dispose()


def holds(db_url: str, run_id: str) -> list[tuple[int, int]]:
    engine = connect(db_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                select(tree_reservations.c.step, tree_reservations.c.lease_epoch).where(
                    tree_reservations.c.run_id == run_id
                )
            ).all()
    finally:
        engine.dispose()
    return [(row.step, row.lease_epoch) for row in rows]


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
    finished_once(db_url, root, ledger)


# Where a worker dies holding a run claimed for it by the transaction that made it runnable.
RELAY_FAULTS = [
    "after_wait_commit@1",  # the lead parked, its first child created claimed for the worker
    "after_delivery_commit@1",  # the last child's end delivered, the lead claimed back
]


@pytest.mark.parametrize("fault", RELAY_FAULTS)
def test_a_worker_killed_holding_a_run_handed_to_it_leaves_it_to_the_next(
    fault: str, db_url: str, ledger: Path
) -> None:
    root = "relay-" + fault.replace("@", "-")
    submitted = cli(
        "submit", f"{AGENTS}:lead", "research", "--id", root, db_url=db_url, ledger=ledger
    )
    assert submitted.returncode == 0, described(submitted)
    worker = ["worker", "--once", "--lease", "3", "--concurrency", "2"]
    killed = cli(*worker, db_url=db_url, ledger=ledger, fault=fault)
    assert killed.returncode == KILLED, described(killed)
    held = [row for row in tree(db_url, root) if row.status == "running"]
    assert held and all(row.lease_owner is not None for row in held)
    if fault.startswith("after_delivery"):
        assert [row.id for row in held] == [root]  # claimed back with its child's end
    else:
        # The child created claimed has its task and its first model call's hold from the
        # park's own commit (runner.sql.tree_budget.hold_ahead), under its epoch.
        [first] = held
        assert [(seq, kind) for seq, kind, _ in written(db_url, first.id)] == [(0, "task")]
        assert holds(db_url, first.id) == [(1, first.lease_epoch)]

    def lapsed() -> bool:
        ends = [row.lease_expires_at for row in tree(db_url, root) if row.status == "running"]
        return all(_aware(end) < datetime.now(UTC) for end in ends)

    wait_until(lapsed, what="the dead worker's leases to lapse")
    served = cli(*worker, db_url=db_url, ledger=ledger)
    assert served.returncode == 0, described(served)
    shown = cli("show", root, "--json", db_url=db_url, ledger=ledger)
    assert json.loads(shown.stdout)["output"] == ANSWER, described(shown)
    finished_once(db_url, root, ledger)


def _aware(moment: datetime | str) -> datetime:
    if isinstance(moment, str):  # SQLite through a plain engine: text
        moment = datetime.fromisoformat(moment)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def finished_once(db_url: str, root: str, ledger: Path) -> None:
    """The tree of `root` finished: each child started and delivered once, each effect run
    at most once, and the root's spend the tree's."""
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
