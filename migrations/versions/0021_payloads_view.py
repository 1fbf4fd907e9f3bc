"""payloads: a view of the payloads stored as envelopes (offloaded, encrypted, or both)

Payloads pass through codecs (runner.store.payloads): a value a codec changed is kept, in
its own column, as an envelope. The view `payloads` has one row per such value of the
journal (`entries.content`, `entries.args`) and of the runs (`runs.task`, `runs.output`):
where it is, how big it was before its codecs, whether it is offloaded to a blob store and
whether it is encrypted. A value kept plain has no row. No table changes.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The colon escaped: op.execute reads `:name` as a bind parameter.
_MARK = "'{\"runner.payload\"\\:1,%'"
_BLOB = '\'%"codec":"blob"%\''
_AES = '\'%"codec":"aes-gcm"%\''


def _view(text: dict[str, str], size: dict[str, str], flag: str) -> str:
    """The view from, per source, the envelope's text and its size as SQL."""
    sources = [
        ("entries", "run_id", "seq", "content"),
        ("entries", "run_id", "seq", "args"),
        ("runs", "id", "NULL", "task"),
        ("runs", "id", "NULL", "output"),
    ]
    parts = []
    for table, run_id, seq, column in sources:
        value = text[column]
        parts.append(
            f"SELECT {run_id} AS run_id, {seq} AS seq, '{column}' AS field, "
            f"{size[column]} AS bytes, {flag.format(value=value, pattern=_BLOB)} AS offloaded, "
            f"{flag.format(value=value, pattern=_AES)} AS encrypted "
            f"FROM {table} WHERE {value} LIKE {_MARK}"
        )
    return "CREATE VIEW payloads AS\n" + "\nUNION ALL\n".join(parts)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        # `args` is JSON: its envelope is a JSON string, read as text by #>>.
        text = {"content": "content", "args": "(args #>> '{}')", "task": "task", "output": "output"}
        size = {name: f"(({value})::json ->> 'bytes')::bigint" for name, value in text.items()}
        op.execute(_view(text, size, "({value} LIKE {pattern})"))
        op.execute(
            "DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'runner_reader') "
            "THEN GRANT SELECT ON payloads TO runner_reader; END IF; END $$"
        )
    else:
        text = {
            "content": "content",
            "args": "(CASE json_type(args) WHEN 'text' THEN json_extract(args, '$') END)",
            "task": "task",
            "output": "output",
        }
        size = {name: f"json_extract({value}, '$.bytes')" for name, value in text.items()}
        op.execute(_view(text, size, "({value} LIKE {pattern})"))


def downgrade() -> None:
    op.execute("DROP VIEW payloads")
