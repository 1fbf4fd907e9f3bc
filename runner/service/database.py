"""The database as the faces meet it: which URL a command means, how a failure is worded,
the schema upgrade of `runner db upgrade` and the page's read-only engine. The faces never
reach into the store; these are the store's answers, handed up."""

from __future__ import annotations

from runner.sql.database import failure_message, open_read_only, resolve_url, upgrade_database
from runner.sql.urls import redact_url

__all__ = ["failure_message", "open_read_only", "redact_url", "resolve_url", "upgrade_database"]
