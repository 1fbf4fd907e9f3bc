"""Revision 0010 (trees of runs) carries a populated 0009 database forward: a fork keeps where
it came from under the new names, every stored run becomes a root of its own, `root_spend`
sums each tree, and the downgrade gives the fork's columns back their old names and values.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, text

from runner.sql.database import downgrade, upgrade

_INSERT = (
    "INSERT INTO runs (id, task, budgets, status, stop_reason, wrapped_up, steps, tokens, cost,"
    " resumes, stalled_resumes, progress_seq, cancel_requested, lease_epoch, created_at,"
    " updated_at, finished_at, parent_run_id, parent_step) VALUES (:id, 't', '{}', 'finished',"
    " 'final', false, :steps, :tokens, :cost, 0, 0, 0, false, 0, :at, :at, :at, :forked_from,"
    " :at_step)"
)
_AT = "2026-12-01 09:00:00"


def rows(engine: Engine, sql: str) -> list[dict[str, Any]]:
    with engine.connect() as connection:
        return [dict(row._mapping) for row in connection.execute(text(sql))]


def test_revision_0010_renames_the_fork_and_makes_every_stored_run_a_root(engine: Engine) -> None:
    upgrade(engine, "0009")
    with engine.begin() as connection:
        for run_id, steps, forked_from, at_step in (("a", 3, None, None), ("f", 5, "a", 2)):
            values = {"id": run_id, "steps": steps, "tokens": 10 * steps, "cost": 0.5 * steps}
            values.update(at=_AT, forked_from=forked_from, at_step=at_step)
            connection.execute(text(_INSERT), values)

    upgrade(engine, "0010")
    runs = rows(
        engine,
        "SELECT id, forked_from_id, forked_at_step, parent_id, root_id, parent_call_key"
        " FROM runs ORDER BY id",
    )
    assert runs == [
        {"id": "a", "forked_from_id": None, "forked_at_step": None, "parent_id": None,
         "root_id": "a", "parent_call_key": None},
        {"id": "f", "forked_from_id": "a", "forked_at_step": 2, "parent_id": None,
         "root_id": "f", "parent_call_key": None},
    ]  # fmt: skip
    summary = rows(engine, "SELECT id, forked_from_id, parent_id, root_id FROM run_summary")
    assert sorted(summary, key=lambda r: r["id"]) == [
        {"id": "a", "forked_from_id": None, "parent_id": None, "root_id": "a"},
        {"id": "f", "forked_from_id": "a", "parent_id": None, "root_id": "f"},
    ]
    # A fork is a root of its own: its spend is not its origin's.
    spend = rows(engine, "SELECT root_id, runs, steps, tokens, cost FROM root_spend ORDER BY 1")
    assert [(r["root_id"], r["runs"], r["steps"], r["tokens"], r["cost"]) for r in spend] == [
        ("a", 1, 3, 30, 1.5),
        ("f", 1, 5, 50, 2.5),
    ]

    downgrade(engine, "0009")
    back = rows(engine, "SELECT id, parent_run_id, parent_step FROM runs ORDER BY id")
    assert back == [
        {"id": "a", "parent_run_id": None, "parent_step": None},
        {"id": "f", "parent_run_id": "a", "parent_step": 2},
    ]
    summary = rows(engine, "SELECT id, parent_run_id FROM run_summary ORDER BY id")
    assert summary == [{"id": "a", "parent_run_id": None}, {"id": "f", "parent_run_id": "a"}]
    with engine.connect() as connection:
        assert "root_spend" not in connection.dialect.get_view_names(connection)
