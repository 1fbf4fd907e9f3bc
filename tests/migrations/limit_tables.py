"""The limit tables as the migration tests write them, in their columns of the revisions
under test (lightweight tables: no model of the schema as it is today)."""

from __future__ import annotations

import sqlalchemy as sa

LIMITS = sa.table(
    "limits",
    sa.column("name", sa.String()),
    sa.column("updated_at", sa.DateTime(timezone=True)),
)


def limit_reservations(*, counted_from: bool = True) -> sa.TableClause:
    """`limit_reservations`; without `counted_from` as before revision 0023 added it."""
    columns = [
        sa.column("id", sa.String()),
        sa.column("limit_name", sa.String()),
        sa.column("run_id", sa.String()),
        sa.column("lease_epoch", sa.Integer()),
        sa.column("tokens", sa.Integer()),
        sa.column("settled", sa.Boolean()),
        sa.column("reserved_at", sa.DateTime(timezone=True)),
        sa.column("settled_at", sa.DateTime(timezone=True)),
    ]
    if counted_from:
        columns.append(sa.column("counted_from", sa.DateTime(timezone=True)))
    return sa.table("limit_reservations", *columns)
