"""a read-only role for runner sql (PostgreSQL)

`runner sql` used to run its statement with the privileges of whoever connected: as the
PostgreSQL superuser (the README's own URL), a READ ONLY transaction still let through
`COPY ... TO PROGRAM`, `pg_read_file`, dblink, replication slots and
`pg_terminate_backend`. This revision adds what lets every query run with the privileges
of a reader instead:

- `runner_reader`, a NOLOGIN role with USAGE on the schema and SELECT on `runs`,
  `entries`, `run_summary` and `tool_calls`, and nothing else;
- `runner_read(query text)`, a SECURITY DEFINER function owned by that role that runs
  one query and returns its rows. `runner sql` takes the role with SET LOCAL ROLE and runs
  the user's statement through this function: inside a security-definer function
  PostgreSQL refuses `set_config('role', ...)` and `session_authorization`, which a
  superuser's session could otherwise call mid-query to take its own privileges back.

Roles belong to the whole server, not to one database, and many databases (the test
suite's, under xdist, at once) may run this revision together: creating the role tolerates
one that exists or that another transaction is creating. Downgrade revokes this
database's grants and drops its function, and keeps the role, which other databases on
the server may still use (and which an administrator may have granted to people).

Making `runner_reader` own the function takes a superuser, or a migrating role that is a
member of `runner_reader` while `runner_reader` may CREATE in the schema; otherwise this
revision fails and says so (the README's security notes give the SQL).

Hazard for later migrations: dropping and creating the views again (as 0003 does) drops
their grants: grant SELECT on them to runner_reader again.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The documented tables and views, and only those (not alembic_version).
READABLE = "runs, entries, run_summary, tool_calls"

UPGRADE = f"""
DO $$
BEGIN
    BEGIN
        CREATE ROLE runner_reader NOLOGIN;
    EXCEPTION
        -- Made by an earlier upgrade, or by one of another database right now (which
        -- reports the clash on pg_authid's unique index).
        WHEN duplicate_object OR unique_violation THEN NULL;
        WHEN insufficient_privilege THEN
            IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'runner_reader') THEN
                RAISE EXCEPTION 'runner needs the role runner_reader for runner sql, and '
                    '% may not create roles: as a superuser, run CREATE ROLE runner_reader '
                    'NOLOGIN, then runner db upgrade again (see the README''s security notes)',
                    current_user;
            END IF;
    END;
    EXECUTE 'GRANT USAGE ON SCHEMA ' || quote_ident(current_schema()) || ' TO runner_reader';
    GRANT SELECT ON {READABLE} TO runner_reader;

    -- No fixed search_path: the query resolves names as the caller's session does, and
    -- the definer has fewer privileges than any caller, so there is nothing to hijack.
    CREATE FUNCTION runner_read(query text) RETURNS SETOF record
        LANGUAGE plpgsql SECURITY DEFINER
        AS 'BEGIN RETURN QUERY EXECUTE query; END';
    REVOKE ALL ON FUNCTION runner_read(text) FROM PUBLIC;
    BEGIN
        ALTER FUNCTION runner_read(text) OWNER TO runner_reader;
    EXCEPTION WHEN insufficient_privilege THEN
        -- Never leave a SECURITY DEFINER function owned by the migrating role: the whole
        -- revision rolls back.
        RAISE EXCEPTION 'runner_read(text) must belong to runner_reader, and % cannot give '
            'it: run runner db upgrade as a superuser, or GRANT runner_reader TO % and GRANT '
            'CREATE ON SCHEMA % TO runner_reader first (see the README''s security notes)',
            current_user, current_user, current_schema();
    END;
    GRANT EXECUTE ON FUNCTION runner_read(text) TO runner_reader;
END
$$
"""

DOWNGRADE = f"""
DO $$
BEGIN
    DROP FUNCTION IF EXISTS runner_read(text);
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'runner_reader') THEN
        REVOKE ALL ON {READABLE} FROM runner_reader;
        EXECUTE 'REVOKE ALL ON SCHEMA ' || quote_ident(current_schema()) || ' FROM runner_reader';
    END IF;
END
$$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(UPGRADE)
    # SQLite has no roles: `runner sql` opens the file read-only, with an authorizer.


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(DOWNGRADE)
