"""What the benchmark scripts share: scratch databases, the floor table, statistics, output.

Not a benchmark itself. Each script imports it as `common` (they are run as files, so this
folder is on sys.path). PostgreSQL is reached through RUNNER_BENCH_POSTGRES_URL (default:
the local server's `test` database, used only to CREATE and DROP scratch databases named
`runner_bench_<random>`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy
from sqlalchemy import Column, Engine, MetaData, Table, create_engine, text
from sqlalchemy.engine import make_url

from runner.sql.database import open_engine, upgrade
from runner.sql.schema import entries

POSTGRES_URL = os.environ.get(
    "RUNNER_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
# When the script started (it imports this module first): the machine's load then.
_STARTED = (time.strftime("%Y-%m-%dT%H:%M:%S%z"), os.getloadavg())


# -- command line -----------------------------------------------------------------------------


def parser(description: str | None) -> argparse.ArgumentParser:
    """The options every script takes: --json, --no-postgres, --postgres, --dir."""
    first = (description or "").strip().splitlines()
    p = argparse.ArgumentParser(description=first[0] if first else None)
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    p.add_argument("--no-postgres", action="store_true", help="SQLite only")
    p.add_argument(
        "--postgres",
        metavar="URL",
        default=POSTGRES_URL,
        help="a PostgreSQL database to create scratch databases from "
        "(default: $RUNNER_BENCH_POSTGRES_URL or the local server)",
    )
    p.add_argument(
        "--dir",
        metavar="DIR",
        default=None,
        help="where scratch SQLite files go (default: the system temp folder; it must be "
        "a real disk, not tmpfs, or fsync costs nothing)",
    )
    return p


# -- statistics and output --------------------------------------------------------------------


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, min and max of repeated measurements."""
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def fmt_spread(s: dict[str, float], digits: int = 0) -> str:
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}-{s['max']:.{digits}f})"


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A plain text table, first column left-aligned, the rest right-aligned."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        parts = [row[0].ljust(widths[0])]
        parts += [cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)]
        return "  ".join(parts)

    print(f"\n{title}")
    print(line(cells[0]))
    print("  ".join("-" * w for w in widths))
    for row in cells[1:]:
        print(line(row))
    sys.stdout.flush()


def machine() -> dict[str, Any]:
    """What the numbers were measured on: they mean little without it."""
    return {
        "host": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "sqlalchemy": sqlalchemy.__version__,
        "sqlite": __import__("sqlite3").sqlite_version,
        "cpus": os.cpu_count(),
        "started": _STARTED[0],
        "load_average_at_start": _STARTED[1],
    }


def write_json(path: str | None, benchmark: str, options: argparse.Namespace, data: Any) -> None:
    if path is None:
        return
    payload = {
        "benchmark": benchmark,
        "machine": machine(),
        "options": {k: v for k, v in vars(options).items() if k != "postgres"},
        "load_average_at_end": os.getloadavg(),
        "results": data,
    }
    Path(path).write_text(json.dumps(payload, indent=2, default=str) + "\n")
    print(f"\nwrote {path}")


# -- scratch databases ------------------------------------------------------------------------


@contextmanager
def scratch_folder(where: str | None) -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="runner-bench-", dir=where))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def sqlite_url(folder: Path, name: str, query: str = "") -> str:
    """A new SQLite file in `folder`, migrated to head; `query` like '?synchronous=normal'."""
    url = f"sqlite:///{folder / name}.db{query}"
    engine = open_engine(url)
    upgrade(engine)
    engine.dispose()
    return url


def postgres_available(url: str) -> bool:
    try:
        engine = create_engine(url)
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        engine.dispose()
    except Exception:
        return False
    return True


@contextmanager
def scratch_postgres(admin_url: str) -> Iterator[str]:
    """A new PostgreSQL database `runner_bench_<random>`, migrated; dropped afterwards."""
    name = f"runner_bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        engine = open_engine(url)
        upgrade(engine)
        engine.dispose()
        yield url
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def postgres_url_or_none(options: argparse.Namespace) -> str | None:
    if options.no_postgres:
        return None
    if not postgres_available(options.postgres):
        print(f"PostgreSQL does not answer at {options.postgres}: SQLite only", file=sys.stderr)
        return None
    return str(options.postgres)


# -- the floor --------------------------------------------------------------------------------


def floor_table(metadata: MetaData | None = None) -> Table:
    """A table with exactly the entries table's columns and primary key, and nothing else.

    Inserting an entries row into it, one row per commit, is the floor a durable step is
    measured against: the same bytes and the same primary-key index, without the fence,
    the foreign key or anything else runner adds.
    """
    columns = [
        Column(c.name, c.type, primary_key=c.primary_key, nullable=c.nullable, autoincrement=False)
        for c in entries.columns
    ]
    return Table("bench_floor", metadata or MetaData(), *columns)


def create_floor(engine: Engine) -> Table:
    table = floor_table()
    table.metadata.create_all(engine)
    return table


def entry_rows(engine: Engine, run_id: str) -> list[dict[str, Any]]:
    """A run's rows of the entries table, as written, for the floor to write again."""
    with engine.connect() as connection:
        rows = connection.execute(
            entries.select().where(entries.c.run_id == run_id).order_by(entries.c.seq)
        )
        return [dict(row._mapping) for row in rows]
