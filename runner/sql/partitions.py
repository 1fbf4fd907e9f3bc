"""The journal's partitions on PostgreSQL (revision 0022): `entries` is partitioned by range
of `created_at`, one partition a month (`entries_pYYYYMM`) and a default partition that
takes any entry no month does. SQLite's journal is one table (Backend.partitions_journal).

A month is made ahead of time (`ensure_months`, by `runner prune` and the workers'
retention pass): an entry written in a month without its partition lands in the default
one, which holds it until a prune deletes its run. `drop_past` drops a whole month whose
entries all belong to runs a prune deletes: one statement instead of a DELETE of each row
(and no dead rows left for VACUUM).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from sqlalchemy import ColumnElement, Connection, column, exists, not_, select, table, text

from runner.sql.schema import runs

# A month's partition, and the default one (never dropped).
_MONTH = re.compile(r"entries_p(\d{4})(\d{2})$")
DEFAULT = "entries_default"
# How many months past this one have their partition made ahead.
AHEAD = 2
# The advisory lock key under which a month's partition is made: "runpart" in ASCII.
PARTITIONS_LOCK = 0x72756E70617274

_PARTITIONS = text(
    "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
    "WHERE i.inhparent = to_regclass('entries')"
)


def is_partition(name: str | None) -> bool:
    """Whether `name` is one of the journal's partitions (not a table of the schema)."""
    return name is not None and (name == DEFAULT or _MONTH.match(name) is not None)


def include_name(name: str | None, kind: str, _parents: object) -> bool:
    """Alembic's `include_name`: the schema's comparison leaves the partitions out (the
    declared `entries` is their parent)."""
    return not (kind == "table" and is_partition(name))


def month_of(moment: datetime) -> datetime:
    at = moment.astimezone(UTC)
    return datetime(at.year, at.month, 1, tzinfo=UTC)


def next_month(month: datetime) -> datetime:
    return month.replace(year=month.year + month.month // 12, month=month.month % 12 + 1)


def months(connection: Connection) -> dict[str, datetime]:
    """The journal's month partitions by name, each with its first moment."""
    found: dict[str, datetime] = {}
    for name in connection.execute(_PARTITIONS).scalars():
        month = _MONTH.match(name)
        if month is not None:
            found[name] = datetime(int(month[1]), int(month[2]), 1, tzinfo=UTC)
    return found


def ensure_months(connection: Connection, now: datetime, ahead: int = AHEAD) -> list[str]:
    """Make the partitions of this month and the next `ahead` where missing; their names.
    A month the default partition already holds entries of is left to it."""
    if not partitioned(connection):
        return []
    have = set(months(connection))
    wanted = [month_of(now)]
    for _ in range(ahead):
        wanted.append(next_month(wanted[-1]))
    if all(f"entries_p{month:%Y%m}" in have for month in wanted):
        return []  # the common case: one look at the catalog
    # Two workers making the same month at once: the second waits, then finds it made.
    connection.execute(text(f"SELECT pg_advisory_xact_lock({PARTITIONS_LOCK})"))
    # A partition's foreign key takes `runs` in SHARE ROW EXCLUSIVE mode, after the default
    # partition in ACCESS EXCLUSIVE: taken first here, as a claim takes `runs` before it
    # reads `entries`, so that the two wait for each other instead of deadlocking.
    connection.execute(text("LOCK TABLE runs IN SHARE ROW EXCLUSIVE MODE"))
    have = set(months(connection))
    made: list[str] = []
    month = month_of(now)
    for _ in range(ahead + 1):
        name = f"entries_p{month:%Y%m}"
        if name not in have and not _default_holds(connection, month):
            after = next_month(month)
            connection.execute(
                text(
                    f"CREATE TABLE {name} PARTITION OF entries "
                    f"FOR VALUES FROM ('{month.isoformat()}') TO ('{after.isoformat()}')"
                )
            )
            # (run_id, seq) unique within the month (see revision 0022).
            connection.execute(
                text(f"CREATE UNIQUE INDEX {name}_run_id_seq ON {name} (run_id, seq)")
            )
            made.append(name)
        month = next_month(month)
    return made


def partitioned(connection: Connection) -> bool:
    """Whether the journal is partitioned here (a database not yet at revision 0022 is not,
    nor one a downgrade took back)."""
    return bool(
        connection.execute(
            text(
                "SELECT EXISTS (SELECT FROM pg_partitioned_table WHERE partrelid = "
                "to_regclass('entries'))"
            )
        ).scalar_one()
    )


def _default_holds(connection: Connection, month: datetime) -> bool:
    # Making the month's partition would have to move these rows: left to the default.
    return bool(
        connection.execute(
            text(
                f"SELECT EXISTS (SELECT FROM {DEFAULT} WHERE created_at >= :first "
                "AND created_at < :after)"
            ),
            {"first": month, "after": next_month(month)},
        ).scalar_one()
    )


def drop_past(
    connection: Connection, cutoff: datetime, doomed: ColumnElement[bool]
) -> dict[str, int]:
    """Drop each month partition that ended by `cutoff` and holds no entry of a run that is
    not `doomed` (true of the runs this prune deletes): its name with how many entries it
    held. Each is locked first, so no entry lands in it meanwhile."""
    dropped: dict[str, int] = {}
    for name, first in sorted(months(connection).items(), key=lambda item: item[1]):
        if next_month(first) > cutoff:
            continue
        connection.execute(text(f"LOCK TABLE {name} IN ACCESS EXCLUSIVE MODE"))
        held_by = table(name, column("run_id"))
        kept = connection.execute(
            select(exists().where(held_by.c.run_id == runs.c.id, not_(doomed)).select_from(held_by))
        ).scalar_one()
        if kept:
            continue
        held = connection.execute(text(f"SELECT count(*) FROM {name}")).scalar_one()
        connection.execute(text(f"DROP TABLE {name}"))
        dropped[name] = int(held)
    return dropped
