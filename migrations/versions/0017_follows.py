"""follows: runs followed live, whose writes NOTIFY their followers (PostgreSQL)

- the table `follows` (run_id, followed_until): a process that follows runs (`runner
  tail --follow`, the API's event stream, `Runner.events(follow=True)`) marks each until a
  minute ahead and renews the marks of all its runs in one transaction well before then;
- on PostgreSQL, three triggers send `NOTIFY runner_follow, '<run id>'` in the writing
  transaction, for followed runs only: a statement-level AFTER INSERT trigger on `entries`
  and one on `deltas` (transition tables: one query a statement, whatever its rows), and a
  row-level AFTER UPDATE OF status trigger on `runs` (the run finishing or waiting). An
  unfollowed run's write pays the trigger's one probe of `follows`, and no NOTIFY
  (PostgreSQL serialises notifying commits: runner.sql.follows says why it matters).

SQLite has no notifications: the table exists (one schema for both) and stays empty; a
process follows runs there by polling (runner.sql.follows). No foreign key to `runs`,
as for `deltas`: a mark lives a minute, and `runner prune` need not wait for it. The
reader role of revision 0004 may SELECT the table.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-16
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The written rows' runs that are followed, one NOTIFY each (PostgreSQL folds duplicates of
# one transaction). now() is the transaction's start: a mark seen as live is never late.
_WRITTEN = """
CREATE FUNCTION runner_notify_followers() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('runner_follow', follows.run_id)
    FROM follows
    WHERE follows.run_id IN (SELECT DISTINCT written.run_id FROM written)
      AND follows.followed_until > now();
    RETURN NULL;
END
$$
"""

_STATUS = """
CREATE FUNCTION runner_notify_run_followers() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('runner_follow', follows.run_id)
    FROM follows
    WHERE follows.run_id = NEW.id AND follows.followed_until > now();
    RETURN NULL;
END
$$
"""


def upgrade() -> None:
    op.create_table(
        "follows",
        sa.Column(
            "run_id", sa.String(length=32), nullable=False, comment="the run a process follows"
        ),
        sa.Column(
            "followed_until",
            sa.DateTime(timezone=True),
            nullable=False,
            comment="until when its writes NOTIFY (PostgreSQL); the follower renews it well before",
        ),
        sa.PrimaryKeyConstraint("run_id"),
        comment="runs followed live: their journal and delta writes NOTIFY runner_follow",
    )
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(_WRITTEN)
    op.execute(_STATUS)
    for table in ("entries", "deltas"):
        op.execute(
            f"CREATE TRIGGER {table}_notify_followers AFTER INSERT ON {table} "
            "REFERENCING NEW TABLE AS written FOR EACH STATEMENT "
            "EXECUTE FUNCTION runner_notify_followers()"
        )
    op.execute(
        "CREATE TRIGGER runs_notify_followers AFTER UPDATE OF status ON runs FOR EACH ROW "
        "WHEN (OLD.status IS DISTINCT FROM NEW.status) "
        "EXECUTE FUNCTION runner_notify_run_followers()"
    )
    # A new table has no grants: give revision 0004's reader its SELECT on it.
    op.execute(
        "DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'runner_reader') "
        "THEN GRANT SELECT ON follows TO runner_reader; END IF; END $$"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER runs_notify_followers ON runs")
        op.execute("DROP TRIGGER deltas_notify_followers ON deltas")
        op.execute("DROP TRIGGER entries_notify_followers ON entries")
        op.execute("DROP FUNCTION runner_notify_run_followers()")
        op.execute("DROP FUNCTION runner_notify_followers()")
    op.drop_table("follows")
