"""Alembic environment: one for `alembic` from the repo and for `runner db upgrade`."""

from __future__ import annotations

import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection

from runner.sql.database import open_engine
from runner.sql.partitions import include_name
from runner.sql.schema import metadata

config = context.config
if config.config_file_name is not None and not config.attributes.get("connection"):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = metadata


def run_with(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        include_name=include_name,  # the journal's partitions are not tables of the schema
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    given = config.attributes.get("connection")
    if given is not None:
        run_with(given)
        return
    url = os.environ.get("RUNNER_DATABASE_URL") or config.get_main_option("sqlalchemy.url")
    engine = open_engine(url, pool=False)
    with engine.begin() as connection:
        run_with(connection)
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("runner's migrations run online only: give a database URL")
run_online()
