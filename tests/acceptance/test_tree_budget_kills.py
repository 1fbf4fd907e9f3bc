"""Acceptance: a tree's budget with real `runner` processes, on SQLite and PostgreSQL. A
worker SIGKILLed right after a child's model call was held against the tree's budget leaves
the hold behind: it counts while the dead lease is the run's, and ends when another worker
takes the run over, so the tree finishes (nothing waits for ever) having spent what its runs
journaled, within its budget."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import create_engine, select

from runner.sql.schema import runs, tree_reservations
from tests.conditions import wait_until

from .harness import cli, described

AGENT = f"{Path(__file__).resolve().with_name('tree_budget_agents.py')}:root"


def test_a_worker_killed_holding_a_childs_call_blocks_nothing_past_its_lease(
    db_url: str, ledger: Path
) -> None:
    submitted = cli(
        "submit", AGENT, "go", "--id", "tree", "--max-tokens", "1000",
        db_url=db_url, ledger=ledger,
    )  # fmt: skip
    assert submitted.returncode == 0, described(submitted)
    killed = cli(
        "worker", "--once", "--lease", "3", "--concurrency", "2",
        db_url=db_url, ledger=ledger, fault="after_tree_hold",
    )  # fmt: skip
    assert killed.returncode == -9, described(killed)
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            holds = list(connection.execute(select(tree_reservations)))
            held = [hold.run_id for hold in holds]
            states = connection.execute(select(runs.c.status).where(runs.c.id.in_(held)))
            assert set(states.scalars()) == {"running"}
        # One child's hold, or both (the other child's may have been committed before the
        # kill), each of step 1 of the tree.
        assert holds and {(hold.root_id, hold.step) for hold in holds} == {("tree", 1)}

        def lapsed() -> bool:
            with engine.connect() as connection:
                ends = connection.execute(
                    select(runs.c.lease_expires_at).where(runs.c.id.in_(held))
                ).scalars()
                return all(_aware(end) < datetime.now(UTC) for end in ends)

        wait_until(lapsed, what="the dead worker's leases to lapse")
    finally:
        engine.dispose()
    resumed = cli(
        "worker", "--once", "--lease", "3", "--concurrency", "2", db_url=db_url, ledger=ledger
    )
    assert resumed.returncode == 0, described(resumed)
    shown = cli("show", "tree", "--json", db_url=db_url, ledger=ledger)
    root = json.loads(shown.stdout)
    assert root["stop_reason"] == "final", described(shown)
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            row = connection.execute(select(runs).where(runs.c.id == "tree")).one()
    finally:
        engine.dispose()
    # The root's two calls and each leaf's three, once each: 800 of the 1,000 tokens.
    assert row.tokens + row.below_tokens == 800


def _aware(moment: datetime | str) -> datetime:
    if isinstance(moment, str):  # SQLite through a plain engine: text
        moment = datetime.fromisoformat(moment)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
