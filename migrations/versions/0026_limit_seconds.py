"""limit seconds: a limit's settled calls summed by the second their minutes start, kept by
triggers on PostgreSQL, so that a busy limit's minute is read as about 60 sums, not every
call of the minute

- `limit_seconds` (both databases; filled on PostgreSQL only): one row a limit and a whole
  second, the tokens and the count of its settled calls whose `counted_from` falls in that
  second. A trigger adds every row of `limit_reservations` inserted settled or settled by an
  update (and takes back a settled row's old charge if it is changed again). A deleted row
  is not taken back: rows are deleted settled only past their minutes (the sweep, which
  deletes these rows as old too) or with their limit. The minute's sum (runner.sql.limits)
  reads the seconds wholly in the minute here, and the calls of its first second and the
  calls not settled from `limit_reservations`: the same total as before, exactly.
  It has no foreign key to `limits`: the check would share-lock the limit's row from
  inside a settle, which deadlocks with a settle under a concurrency (that holds the row
  FOR UPDATE) inserting the same second; removing a limit deletes its rows here.
- Existing settled calls are summed into it.

Downgrade drops the triggers, their function and the table.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The whole second of a timestamp, in UTC whatever the session's zone.
_SECOND = "date_trunc('second', {0}, 'UTC')"
_FUNCTION = f"""
CREATE FUNCTION limit_seconds_charge() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.settled THEN
        UPDATE limit_seconds SET tokens = tokens - OLD.tokens, calls = calls - 1
        WHERE limit_name = OLD.limit_name AND second = {_SECOND.format("OLD.counted_from")};
    END IF;
    IF NEW.settled THEN
        INSERT INTO limit_seconds AS s (limit_name, second, tokens, calls)
        VALUES (NEW.limit_name, {_SECOND.format("NEW.counted_from")}, NEW.tokens, 1)
        ON CONFLICT (limit_name, second)
        DO UPDATE SET tokens = s.tokens + EXCLUDED.tokens, calls = s.calls + 1;
    END IF;
    RETURN NULL;
END
$$
"""
_TRIGGERS = (
    "CREATE TRIGGER limit_reservations_settled_insert AFTER INSERT ON limit_reservations "
    "FOR EACH ROW WHEN (NEW.settled) EXECUTE FUNCTION limit_seconds_charge()",
    "CREATE TRIGGER limit_reservations_settled_update AFTER UPDATE ON limit_reservations "
    "FOR EACH ROW WHEN (NEW.settled OR OLD.settled) EXECUTE FUNCTION limit_seconds_charge()",
)
_FILL = f"""
INSERT INTO limit_seconds (limit_name, second, tokens, calls)
SELECT limit_name, {_SECOND.format("counted_from")}, sum(tokens), count(*)
FROM limit_reservations WHERE settled
GROUP BY limit_name, {_SECOND.format("counted_from")}
"""


def upgrade() -> None:
    op.create_table(
        "limit_seconds",
        sa.Column("limit_name", sa.String(200), nullable=False),
        sa.Column(
            "second",
            sa.DateTime(timezone=True),
            nullable=False,
            comment="the whole second (UTC) the calls' counted_from falls in",
        ),
        sa.Column(
            "tokens",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            nullable=False,
            comment="their usage summed",
        ),
        sa.Column(
            "calls",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            nullable=False,
            comment="how many calls",
        ),
        sa.PrimaryKeyConstraint("limit_name", "second"),
        comment="settled calls charged to a limit by the second (PostgreSQL; older rows deleted)",
    )
    if op.get_bind().dialect.name != "postgresql":
        return
    # A new table has no grants: give revision 0004's reader its SELECT on it.
    op.execute(
        "DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'runner_reader') "
        "THEN GRANT SELECT ON limit_seconds TO runner_reader; END IF; END $$"
    )
    op.execute(_FUNCTION)
    for trigger in _TRIGGERS:
        op.execute(trigger)
    op.execute(_FILL)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER limit_reservations_settled_update ON limit_reservations")
        op.execute("DROP TRIGGER limit_reservations_settled_insert ON limit_reservations")
        op.execute("DROP FUNCTION limit_seconds_charge()")
    op.drop_table("limit_seconds")  # its grant goes with it
