"""waits in steps of several calls: `tool_calls` and `approvals` pair rows by key

A step of several tool calls may now wait for people: its action rows (one per call), then
one `wait` row per call that needs an answer (in call order, in the commit that moves the
run to `waiting`), then the answers in the order people give them, then the observations.
A call's wait is therefore no longer the row right after its action, nor an answer the row
right after its wait. Both views find them by idempotency key instead, as revision 0007's
`tool_calls` already finds a call's observation:

- `tool_calls`: a call's wait is the first `wait` with its key after its action and before
  its observation; its answer the first `answer` with its key after the wait and before the
  observation. Bounded by the observation, each lookup reads only the step's own few rows
  along the primary key (a call with no observation yet belongs to the run's last step).
- `approvals`: a wait's answer is the first `answer` with its key after it.

No column changes: a single-call step's rows (action, wait, answer, observation) read back
exactly as before. The `start` entries of tools declared `mark_start` are new rows of an
existing column (`entries.kind`) that neither view selects.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-12
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_LAST_SEQ = "9223372036854775807"  # no observation yet: the wait may be anywhere after

# The first row of `kind` with the call's key after `after`, before `before`.
_SQLITE_ROW = """
LEFT JOIN entries {alias}
    ON {alias}.run_id = a.run_id
    AND {alias}.seq = (
        SELECT x.seq
        FROM entries x
        WHERE x.run_id = a.run_id
            AND x.seq > {after}
            AND x.seq < COALESCE(o.seq, {last})
            AND x.idempotency_key = a.idempotency_key
            AND x.kind = '{kind}'
        ORDER BY x.seq
        LIMIT 1
    )"""
_POSTGRESQL_ROW = """
LEFT JOIN LATERAL (
    SELECT x.seq, x.answer, x.created_at
    FROM entries x
    WHERE x.run_id = a.run_id
        AND x.seq > {after}
        AND x.seq < COALESCE(o.seq, {last})
        AND x.idempotency_key = a.idempotency_key
        AND x.kind = '{kind}'
    ORDER BY x.seq
    LIMIT 1
) {alias} ON true"""

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
JOIN runs r ON r.id = a.run_id{observation}{wait}{answer}
WHERE a.kind = 'action' AND a.action_type = 'tool'
"""

# A wait's answer: the first answer with its key after it (a step's answers come in the
# order people give them, after all of the step's waits).
_SQLITE_ANSWER = """
LEFT JOIN entries n
    ON n.run_id = w.run_id
    AND n.seq = (
        SELECT x.seq
        FROM entries x
        WHERE x.run_id = w.run_id
            AND x.seq > w.seq
            AND x.idempotency_key = w.idempotency_key
            AND x.kind = 'answer'
        ORDER BY x.seq
        LIMIT 1
    )"""
_POSTGRESQL_ANSWER = """
LEFT JOIN LATERAL (
    SELECT x.answer, x.answered_by, x.created_at, x.content
    FROM entries x
    WHERE x.run_id = w.run_id
        AND x.seq > w.seq
        AND x.idempotency_key = w.idempotency_key
        AND x.kind = 'answer'
    ORDER BY x.seq
    LIMIT 1
) n ON true"""

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
JOIN runs r ON r.id = w.run_id{answer}
WHERE w.kind = 'wait'
"""


def _revision(name: str) -> Any:
    # Alembic loads revisions by path, not as a package: load earlier ones the same way.
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"runner_revision_{name[:4]}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _views(dialect: str) -> list[str]:
    views = _revision("0002_history_views_and_indexes")
    calls = _revision("0007_parallel_tool_calls")
    postgresql = dialect == "postgresql"
    seconds = views._POSTGRESQL_SECONDS if postgresql else views._SQLITE_SECONDS
    observation = calls._POSTGRESQL_OBSERVATION if postgresql else calls._SQLITE_OBSERVATION
    row = _POSTGRESQL_ROW if postgresql else _SQLITE_ROW
    # From the answer when there is one (revision 0006): the tool's time, not the person's.
    call = seconds.format(start="COALESCE(n.created_at, a.created_at)", end="o.created_at")
    tool_calls = _TOOL_CALLS.format(
        call_seconds=call,
        observation=observation,
        wait=row.format(alias="w", after="a.seq", last=_LAST_SEQ, kind="wait"),
        answer=row.format(alias="n", after="w.seq", last=_LAST_SEQ, kind="answer"),
    )
    waited = seconds.format(start="w.created_at", end="n.created_at")
    answer = _POSTGRESQL_ANSWER if postgresql else _SQLITE_ANSWER
    approvals = _APPROVALS.format(wait_seconds=waited, answer=answer)
    return [tool_calls, approvals]


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
    op.execute("DROP VIEW IF EXISTS approvals")
    op.execute("DROP VIEW IF EXISTS tool_calls")
    for statement in _views(dialect):
        op.execute(statement)
    _grant_reader(("tool_calls", "approvals"), dialect)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.execute("DROP VIEW IF EXISTS approvals")
    op.execute("DROP VIEW IF EXISTS tool_calls")
    # As revisions 0007 (tool_calls) and 0006 (approvals) left them.
    op.execute(_revision("0007_parallel_tool_calls")._tool_calls(dialect))
    op.execute(_revision("0006_waiting_runs")._views(dialect)[1])
    _grant_reader(("tool_calls", "approvals"), dialect)
