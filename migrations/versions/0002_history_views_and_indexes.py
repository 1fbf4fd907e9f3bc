"""history views and indexes

The views `run_summary` and `tool_calls` answer the questions people ask of the history in
short SQL (the README documents them column by column). They are written here per
dialect, not in runner.schema: Alembic's autogenerate compares tables only, so the views never
show up as drift, and a migration keeps the exact SQL it shipped.

Hazard for later migrations: on SQLite, a batch migration that rebuilds `runs` or `entries`
(drop and rename) fails while these views point at the table. Drop the views first and
create them again afterwards.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The dialects differ in the date and duration expressions, and in how an unfinished run's
# counters are found (below). `day` is text 'YYYY-MM-DD' (UTC) on both, so a per-day query
# reads and sorts the same everywhere. Durations are seconds rounded to the microsecond on
# both. SQLite stores timestamps as UTC text 'YYYY-MM-DD HH:MM:SS.ffffff': whole seconds
# from strftime('%s'), the fraction from the text itself (julianday() keeps milliseconds).
_SQLITE_SECONDS = (
    "round((strftime('%s', {end}) - strftime('%s', {start})) "
    "+ (CAST(substr({end}, 20) AS REAL) - CAST(substr({start}, 20) AS REAL)), 6)"
)
_POSTGRESQL_SECONDS = (
    "CAST(ROUND(CAST(EXTRACT(EPOCH FROM {end} - {start}) AS NUMERIC), 6) AS DOUBLE PRECISION)"
)

# A finished run stores its final counters; an unfinished one has them only in its journal.
# SQLite: a CASE whose lookup (one primary-key probe) runs for unfinished runs only, and
# not at all when the column is not selected. PostgreSQL costs such a subquery as if it ran
# for every run, which on a large history makes it JIT-compile each query (0.3 s or more):
# there, a LEFT JOIN to the unfinished runs' counters, which the planner drops when unused.
# The counters only grow along a journal, so their maximum is their latest value.
_SQLITE_SO_FAR = (
    "CASE WHEN r.status = 'finished' THEN r.{name} ELSE COALESCE((SELECT e.{name} "
    "FROM entries e WHERE e.run_id = r.id ORDER BY e.seq DESC LIMIT 1), {zero}) END"
)
_POSTGRESQL_SO_FAR = (
    "CASE WHEN r.status = 'finished' THEN r.{name} ELSE COALESCE(so_far.{name}, {zero}) END"
)
_POSTGRESQL_SO_FAR_JOIN = """
LEFT JOIN (
    SELECT e.run_id, MAX(e.steps) AS steps, MAX(e.tokens) AS tokens, MAX(e.cost) AS cost
    FROM runs u
    JOIN entries e ON e.run_id = u.id
    WHERE u.status <> 'finished'
    GROUP BY e.run_id
) so_far ON so_far.run_id = r.id"""
_ZEROS = (("steps", "0"), ("tokens", "0"), ("cost", "0.0"))

_SQLITE = {
    "run_seconds": _SQLITE_SECONDS.format(start="r.created_at", end="r.finished_at"),
    "call_seconds": _SQLITE_SECONDS.format(start="a.created_at", end="o.created_at"),
    "day": "substr(r.created_at, 1, 10)",
    "so_far_join": "",
    **{name: _SQLITE_SO_FAR.format(name=name, zero=zero) for name, zero in _ZEROS},
}
_POSTGRESQL = {
    "run_seconds": _POSTGRESQL_SECONDS.format(start="r.created_at", end="r.finished_at"),
    "call_seconds": _POSTGRESQL_SECONDS.format(start="a.created_at", end="o.created_at"),
    "day": "to_char(r.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')",
    "so_far_join": _POSTGRESQL_SO_FAR_JOIN,
    **{name: _POSTGRESQL_SO_FAR.format(name=name, zero=zero) for name, zero in _ZEROS},
}

_RUN_SUMMARY = """
CREATE VIEW run_summary AS
SELECT
    r.id,
    r.agent,
    r.agent_name,
    r.release,
    r.task,
    r.status,
    r.stop_reason,
    r.wrapped_up,
    r.error,
    {steps} AS steps,
    {tokens} AS tokens,
    {cost} AS cost,
    r.resumes,
    r.created_at,
    r.finished_at,
    {run_seconds} AS duration_seconds,
    {day} AS day
FROM runs r{so_far_join}
"""

# A call's outcome is the observation written right after its action: the step protocol
# commits the two back to back (seq n and n + 1, same step), so the join is one primary-key
# probe and needs no index of its own on the journal's write path.
_TOOL_CALLS = """
CREATE VIEW tool_calls AS
SELECT
    a.run_id,
    a.step,
    a.tool,
    a.args,
    a.idempotency_key,
    CASE
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
LEFT JOIN entries o
    ON o.run_id = a.run_id
    AND o.seq = a.seq + 1
    AND o.kind = 'observation'
    AND o.step = a.step
WHERE a.kind = 'action' AND a.action_type = 'tool'
"""


def _views(dialect: str) -> list[str]:
    expressions = _POSTGRESQL if dialect == "postgresql" else _SQLITE
    return [_RUN_SUMMARY.format(**expressions), _TOOL_CALLS.format(**expressions)]


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index("ix_runs_status_finished_at", ["status", "finished_at"], unique=False)
        batch_op.create_index("ix_runs_release_created_at", ["release", "created_at"], unique=False)
        batch_op.create_index(
            "ix_runs_stop_reason_created_at", ["stop_reason", "created_at"], unique=False
        )

    for statement in _views(op.get_bind().dialect.name):
        op.execute(statement)


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS tool_calls")
    op.execute("DROP VIEW IF EXISTS run_summary")

    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_stop_reason_created_at")
        batch_op.drop_index("ix_runs_release_created_at")
        batch_op.drop_index("ix_runs_status_finished_at")
