"""parallel tool calls: provider call ids, and tool_calls paired by key

A model may ask for several tool calls in one response. The journal keeps one action row per
call and one observation row per call, so two columns' worth of change:

- `entries.call_id`: the provider's id of a call (OpenAI's `call_...`, Anthropic's
  `toolu_...`), on the call's action and its observation, so a resumed run sends the
  provider the very ids it gave. NULL for models that give none, and for every row written
  before this revision.
- The `tool_calls` view paired an action with the row right after it (seq + 1). The calls of
  one step are journaled together and their observations land in the order the calls end,
  so a call now finds its observation by idempotency key: the first observation after the
  action with the same key, read forward along the primary key (the step's own few rows; a
  single-call step's observation is still the very next row). The view also shows `call_id`.

Rows written before this revision (one call per step, no ids) read back unchanged, and the
view gives them exactly the rows it gave before, waits for a person (revision 0006)
included: a call that waited is still action, wait, answer, observation, and a step of
several calls never waits (a call that needs an answer is asked of alone).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-08
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CALL_ID_COMMENT = "the provider's id of a tool call"

# The observation of a call: the first row after its action with its key. PostgreSQL reads
# it with a LATERAL subquery (an index scan of the run's rows from the action on, stopped
# at the first match); SQLite has no LATERAL, but probes the primary key with the same
# subquery's answer.
_SQLITE_OBSERVATION = """
LEFT JOIN entries o
    ON o.run_id = a.run_id
    AND o.seq = (
        SELECT x.seq
        FROM entries x
        WHERE x.run_id = a.run_id
            AND x.seq > a.seq
            AND x.idempotency_key = a.idempotency_key
            AND x.kind = 'observation'
        ORDER BY x.seq
        LIMIT 1
    )"""
_POSTGRESQL_OBSERVATION = """
LEFT JOIN LATERAL (
    SELECT x.seq, x.is_error, x.content, x.attempt, x.created_at
    FROM entries x
    WHERE x.run_id = a.run_id
        AND x.seq > a.seq
        AND x.idempotency_key = a.idempotency_key
        AND x.kind = 'observation'
    ORDER BY x.seq
    LIMIT 1
) o ON true"""

_TOOL_CALLS = """
CREATE VIEW tool_calls AS
SELECT
    a.run_id,
    a.step,
    a.tool,
    a.args,
    a.idempotency_key,
    CASE
        WHEN n.answer IN ('denied', 'timed_out') THEN 'denied'
        WHEN w.seq IS NOT NULL AND n.seq IS NULL AND r.status = 'finished' THEN 'unanswered'
        WHEN w.seq IS NOT NULL AND n.seq IS NULL THEN 'waiting'
        WHEN o.seq IS NULL AND r.status = 'finished' THEN 'unknown'
        WHEN o.seq IS NULL THEN 'pending'
        WHEN o.is_error AND o.content LIKE 'OutcomeUnknown:%' THEN 'unknown'
        WHEN o.is_error THEN 'failed'
        ELSE 'done'
    END AS status,
    o.attempt,
    o.content AS result,
    r.agent_name,
    r.release,
    a.created_at AS started_at,
    o.created_at AS finished_at,
    {call_seconds} AS duration_seconds,
    a.call_id
FROM entries a
JOIN runs r ON r.id = a.run_id
LEFT JOIN entries w
    ON w.run_id = a.run_id
    AND w.seq = a.seq + 1
    AND w.kind = 'wait'
LEFT JOIN entries n
    ON n.run_id = a.run_id
    AND n.seq = w.seq + 1
    AND n.kind = 'answer'{observation}
WHERE a.kind = 'action' AND a.action_type = 'tool'
"""


def _revision(name: str) -> Any:
    # Alembic loads revisions by path, not as a package: load earlier ones the same way.
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"runner_revision_{name[:4]}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tool_calls(dialect: str) -> str:
    views = _revision("0002_history_views_and_indexes")
    if dialect == "postgresql":
        seconds, observation = views._POSTGRESQL_SECONDS, _POSTGRESQL_OBSERVATION
    else:
        seconds, observation = views._SQLITE_SECONDS, _SQLITE_OBSERVATION
    # From the answer when there is one (revision 0006): the tool's time, not the person's.
    call = seconds.format(start="COALESCE(n.created_at, a.created_at)", end="o.created_at")
    return _TOOL_CALLS.format(call_seconds=call, observation=observation)


def _grant_reader(views: tuple[str, ...], dialect: str) -> None:
    """Views made anew have no grants: give revision 0004's reader its SELECT on them."""
    if dialect != "postgresql":
        return
    grants = " ".join(f"GRANT SELECT ON {view} TO runner_reader;" for view in views)
    op.execute(
        "DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'runner_reader') "
        f"THEN {grants} END IF; END $$"
    )


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    # Adding a nullable column rebuilds nothing, so the views may stay while it is added.
    op.add_column(
        "entries", sa.Column("call_id", sa.String(200), nullable=True, comment=CALL_ID_COMMENT)
    )
    op.execute("DROP VIEW IF EXISTS tool_calls")
    op.execute(_tool_calls(dialect))
    _grant_reader(("tool_calls",), dialect)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    # SQLite drops a column by rebuilding the table, which fails while a view reads it:
    # the views go first and come back as revisions 0005 and 0006 left them.
    for view in ("approvals", "tool_calls", "run_summary"):
        op.execute(f"DROP VIEW IF EXISTS {view}")
    with op.batch_alter_table("entries", schema=None) as batch_op:
        batch_op.drop_column("call_id")
    op.execute(_revision("0005_operating_runs")._run_summary(dialect))
    for statement in _revision("0006_waiting_runs")._views(dialect):
        op.execute(statement)
    _grant_reader(("run_summary", "tool_calls", "approvals"), dialect)
