"""partitioned journal: on PostgreSQL, `entries` partitioned by month of `created_at`

- PostgreSQL: `entries` becomes a table partitioned by range of `created_at`, one partition
  a month (`entries_pYYYYMM`, from the month of its oldest entry to two months ahead) and a
  default partition (`entries_default`) for any entry no month partition takes. Its rows
  are copied over in one statement; its primary key becomes (run_id, seq, created_at) (a
  partitioned table's unique keys must hold its partition key), and each partition keeps
  (run_id, seq) unique on its own, so that a write retried after its answer was lost is
  still refused as a duplicate (runner.sql.journal: every try of one write carries the
  same created_at, so it lands in the same month); the foreign key to
  `runs`, the follow trigger of revision 0017, the views that read it and the reader role's
  SELECT come back as they were. `runner prune` then drops a month whose entries all belong
  to runs it deletes (runner.sql.partitions), instead of deleting them row by row.
- SQLite: unchanged.

The copy takes a lock on the journal for as long as it runs: about 10 s a million entries
on a small server. Downgrade copies the rows back into one plain table.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COMMENT = "the journal: one row per transcript entry, append-only"
TRIGGER = (
    "CREATE TRIGGER entries_notify_followers AFTER INSERT ON entries "
    "REFERENCING NEW TABLE AS written FOR EACH STATEMENT "
    "EXECUTE FUNCTION runner_notify_followers()"
)
# The views that read `entries`, directly or through another view, oldest first (a view is
# created after those it reads), with their definitions and comments.
_DEPENDENT_VIEWS = """
WITH RECURSIVE reading(oid) AS (
    SELECT DISTINCT r.ev_class FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid
    WHERE d.refobjid = 'entries'::regclass AND r.ev_class <> 'entries'::regclass
    UNION
    SELECT r.ev_class FROM reading JOIN pg_depend d ON d.refobjid = reading.oid
    JOIN pg_rewrite r ON r.oid = d.objid WHERE r.ev_class <> reading.oid
)
SELECT c.relname, pg_get_viewdef(c.oid), obj_description(c.oid, 'pg_class')
FROM pg_class c WHERE c.oid IN (SELECT oid FROM reading) AND c.relkind = 'v'
ORDER BY c.oid
"""
_GRANT = (
    "DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'runner_reader') "
    "THEN GRANT SELECT ON {names} TO runner_reader; END IF; END $$"
)


def _views() -> list[tuple[str, str, str | None]]:
    rows = op.get_bind().execute(sa.text(_DEPENDENT_VIEWS)).all()
    return [(name, definition, comment) for name, definition, comment in rows]


def _swap(create: str, primary_key: str, copy_partitions: bool) -> None:
    """Replace `entries` by a new table made with `create` (its name `entries_new`), the
    rows copied, the views, keys, trigger and grants as they were."""
    views = _views()
    for name, _definition, _comment in reversed(views):
        op.execute(f"DROP VIEW {name}")
    op.execute(create)
    if copy_partitions:
        _month_partitions()
    op.execute("INSERT INTO entries_new SELECT * FROM entries")
    op.execute("DROP TABLE entries")
    op.execute("ALTER TABLE entries_new RENAME TO entries")
    op.execute(f"ALTER TABLE entries ADD CONSTRAINT entries_pkey PRIMARY KEY ({primary_key})")
    op.execute(
        "ALTER TABLE entries ADD CONSTRAINT entries_run_id_fkey FOREIGN KEY (run_id) "
        "REFERENCES runs (id) ON DELETE CASCADE"
    )
    op.execute(f"COMMENT ON TABLE entries IS '{COMMENT}'")
    op.execute(TRIGGER)
    for name, definition, comment in views:
        # On the driver: a definition may hold a `:name` that text() would take for a bind
        # (and its `%` are the driver's escapes, doubled).
        create = f"CREATE VIEW {name} AS {definition}".replace("%", "%%")
        op.get_bind().exec_driver_sql(create)
        if comment is not None:
            op.execute(sa.text(f"COMMENT ON VIEW {name} IS :comment").bindparams(comment=comment))
    op.execute(_GRANT.format(names=", ".join(["entries", *(name for name, _, _ in views)])))


def _month_partitions() -> None:
    # From the month of the oldest entry (or this one) to two months ahead, then the default.
    op.execute(
        """
        DO $$
        DECLARE
            first date := date_trunc('month', LEAST(
                (SELECT min(created_at) FROM entries), now()) AT TIME ZONE 'UTC')::date;
            last date := (date_trunc('month', now() AT TIME ZONE 'UTC')
                          + interval '2 months')::date;
            month date := first;
        BEGIN
            WHILE month <= last LOOP
                EXECUTE format(
                    'CREATE TABLE %I PARTITION OF entries_new FOR VALUES FROM (%L) TO (%L)',
                    'entries_p' || to_char(month, 'YYYYMM'),
                    month::timestamp AT TIME ZONE 'UTC',
                    (month + interval '1 month')::timestamp AT TIME ZONE 'UTC');
                EXECUTE format('CREATE UNIQUE INDEX %I ON %I (run_id, seq)',
                    'entries_p' || to_char(month, 'YYYYMM') || '_run_id_seq',
                    'entries_p' || to_char(month, 'YYYYMM'));
                month := (month + interval '1 month')::date;
            END LOOP;
        END $$
        """
    )
    op.execute("CREATE TABLE entries_default PARTITION OF entries_new DEFAULT")
    op.execute("CREATE UNIQUE INDEX entries_default_run_id_seq ON entries_default (run_id, seq)")


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    _swap(
        "CREATE TABLE entries_new (LIKE entries INCLUDING DEFAULTS INCLUDING COMMENTS) "
        "PARTITION BY RANGE (created_at)",
        "run_id, seq, created_at",
        copy_partitions=True,
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    _swap(
        "CREATE TABLE entries_new (LIKE entries INCLUDING DEFAULTS INCLUDING COMMENTS)",
        "run_id, seq",
        copy_partitions=False,
    )
