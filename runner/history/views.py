"""The views of the migrations (`run_summary`, `tool_calls`, `root_spend`, `run_scores`) as
SQLAlchemy sees them.

Declared here for the queries that read them; created (per dialect) by the migration, and
documented column by column in docs/reference/schema.md: they are part of the public schema.
"""

from __future__ import annotations

from sqlalchemy import JSON, Boolean, Float, Integer, String, Text, column, table

from runner.sql.schema import Timestamp

run_summary = table(
    "run_summary",
    column("id", String),
    column("agent", Text),
    column("agent_name", String),
    column("release", String),
    column("task", Text),
    column("status", String),
    column("stop_reason", String),
    column("wrapped_up", Boolean),
    column("error", Text),
    column("steps", Integer),
    column("tokens", Integer),
    column("cost", Float),
    column("resumes", Integer),
    column("created_at", Timestamp),
    column("finished_at", Timestamp),
    column("duration_seconds", Float),
    column("day", String),
    column("state", String),
    column("queue", String),
    column("priority", Integer),
    column("not_before", Timestamp),
    column("parent_id", String),
    column("root_id", String),
)

# Revision 0010: one row per tree of runs (a root and its children), its spend summed.
root_spend = table(
    "root_spend",
    column("root_id", String),
    column("runs", Integer),
    column("steps", Integer),
    column("tokens", Integer),
    column("cost", Float),
    column("queued", Integer),
    column("running", Integer),
    column("waiting", Integer),
    column("finished", Integer),
    column("started_at", Timestamp),
    column("last_finished_at", Timestamp),
)

# Revision 0020: the scores kept, each with its run's agent, release and stop reason.
run_scores = table(
    "run_scores",
    column("run_id", String),
    column("agent_name", String),
    column("release", String),
    column("name", String),
    column("value", Float),
    column("note", Text),
    column("source", String),
    column("stop_reason", String),
    column("run_created_at", Timestamp),
    column("scored_at", Timestamp),
)

tool_calls = table(
    "tool_calls",
    column("run_id", String),
    column("step", Integer),
    column("tool", String),
    column("args", JSON),
    column("idempotency_key", String),
    column("status", String),
    column("attempt", Integer),
    column("result", Text),
    column("agent_name", String),
    column("release", String),
    column("started_at", Timestamp),
    column("finished_at", Timestamp),
    column("duration_seconds", Float),
)
