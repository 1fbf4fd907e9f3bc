"""waiting runs: people in the loop

A run may wait for a person's answer (`status = 'waiting'`): `runs.waiting_since` and
`runs.wait_expires_at` say since when and until when (approval_timeout), indexed with the
status so a claim finds the waits that timed out. The journal records the wait and its
answer as entries (`kind` `wait` and `answer`) with three new columns: `waits_for`
(approval or reply), `answer` (approved, denied, replied, timed_out) and `answered_by`.

The view `approvals` lists every wait with its answer. `tool_calls` is made again: a call
that waited has its wait and answer between its action and its observation, and the view
says `waiting`, `denied` or `unanswered` for it.

Only nullable columns are added, with plain ALTER TABLE on both databases: on SQLite a
batch rebuild of `runs` would drop the old table, and with foreign keys on, SQLite's
implicit DELETE of it would cascade to every journal entry. For the same reason the
downgrade drops the columns with ALTER TABLE ... DROP COLUMN (SQLite 3.35 or later), after
dropping the views that read the tables, which revision 0002's own SQL then makes again.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-05
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _revision(name: str) -> Any:
    # Alembic loads revisions by path, not as a package: load earlier ones the same way.
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"runner_revision_{name[:4]}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _revision_0002() -> Any:
    return _revision("0002_history_views_and_indexes")


def _grant_reader(views: tuple[str, ...], dialect: str) -> None:
    """Views made anew have no grants: give revision 0004's reader its SELECT on them."""
    if dialect != "postgresql":
        return
    grants = " ".join(f"GRANT SELECT ON {view} TO runner_reader;" for view in views)
    op.execute(
        "DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'runner_reader') "
        f"THEN {grants} END IF; END $$"
    )


# A call that waited for a person is journaled action, wait, answer, observation (seq n to
# n + 3, one step); any other call action, observation. Each join is a primary-key probe.
# Its duration runs from the answer when there is one: the tool's time, not the person's.
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
    {call_seconds} AS duration_seconds
FROM entries a
JOIN runs r ON r.id = a.run_id
LEFT JOIN entries w
    ON w.run_id = a.run_id
    AND w.seq = a.seq + 1
    AND w.kind = 'wait'
LEFT JOIN entries n
    ON n.run_id = a.run_id
    AND n.seq = w.seq + 1
    AND n.kind = 'answer'
LEFT JOIN entries o
    ON o.run_id = a.run_id
    AND o.seq = a.seq + CASE WHEN w.seq IS NULL THEN 1 ELSE 3 END
    AND o.kind = 'observation'
    AND o.step = a.step
WHERE a.kind = 'action' AND a.action_type = 'tool'
"""

# The answer to a wait is the entry right after it, so this join is a primary-key probe too.
_APPROVALS = """
CREATE VIEW approvals AS
SELECT
    w.run_id,
    w.step,
    w.idempotency_key,
    w.tool,
    w.args,
    w.waits_for,
    w.content AS question,
    w.created_at AS asked_at,
    n.answer,
    n.answered_by,
    n.created_at AS answered_at,
    n.content AS note,
    r.status AS run_status,
    r.agent_name,
    r.release,
    {wait_seconds} AS waited_seconds
FROM entries w
JOIN runs r ON r.id = w.run_id
LEFT JOIN entries n
    ON n.run_id = w.run_id
    AND n.seq = w.seq + 1
    AND n.kind = 'answer'
WHERE w.kind = 'wait'
"""

# Comments PostgreSQL keeps on columns whose values this revision adds to.
_COMMENTS = {
    ("runs", "status"): ("queued, running or finished", "queued, running, waiting or finished"),
    ("entries", "kind"): (
        "task/action/observation/final/...",
        "task/action/observation/final/wait/...",
    ),
}


def _views(dialect: str) -> list[str]:
    old = _revision_0002()
    seconds = old._POSTGRESQL_SECONDS if dialect == "postgresql" else old._SQLITE_SECONDS
    call = seconds.format(start="COALESCE(n.created_at, a.created_at)", end="o.created_at")
    waited = seconds.format(start="w.created_at", end="n.created_at")
    return [_TOOL_CALLS.format(call_seconds=call), _APPROVALS.format(wait_seconds=waited)]


def _comments(dialect: str, *, new: bool) -> None:
    if dialect != "postgresql":
        return  # SQLite keeps no column comments
    for (table, column), (before, after) in _COMMENTS.items():
        op.alter_column(
            table,
            column,
            existing_type=sa.String(length=16),
            existing_nullable=False,
            comment=after if new else before,
            existing_comment=before if new else after,
        )


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.execute("DROP VIEW IF EXISTS tool_calls")

    op.add_column(
        "runs",
        sa.Column(
            "waiting_since",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="when the run began to wait",
        ),
    )
    op.add_column(
        "runs",
        sa.Column(
            "wait_expires_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="when its wait times out",
        ),
    )
    op.create_index(
        "ix_runs_status_wait_expires_at", "runs", ["status", "wait_expires_at"], unique=False
    )
    op.add_column(
        "entries",
        sa.Column(
            "waits_for", sa.String(length=16), nullable=True, comment="on a wait: approval or reply"
        ),
    )
    op.add_column(
        "entries",
        sa.Column(
            "answer",
            sa.String(length=16),
            nullable=True,
            comment="approved/denied/replied/timed_out",
        ),
    )
    op.add_column(
        "entries",
        sa.Column(
            "answered_by", sa.String(length=200), nullable=True, comment="on an answer: who gave it"
        ),
    )
    _comments(dialect, new=True)

    for statement in _views(dialect):
        op.execute(statement)
    _grant_reader(("tool_calls", "approvals"), dialect)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    for view in ("approvals", "tool_calls", "run_summary"):
        op.execute(f"DROP VIEW IF EXISTS {view}")

    _comments(dialect, new=False)
    op.drop_column("entries", "answered_by")
    op.drop_column("entries", "answer")
    op.drop_column("entries", "waits_for")
    op.drop_index("ix_runs_status_wait_expires_at", table_name="runs")
    op.drop_column("runs", "wait_expires_at")
    op.drop_column("runs", "waiting_since")

    # The views as revision 0005 left them: its run_summary, and 0002's tool_calls.
    old_tool_calls = _revision_0002()._views(dialect)[1]
    op.execute(_revision("0005_operating_runs")._run_summary(dialect))
    op.execute(old_tool_calls)
    _grant_reader(("run_summary", "tool_calls"), dialect)
