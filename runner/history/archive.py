"""Export (streamed JSON Lines of runs with their journals) and prune (delete old runs)."""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, delete, func, select

from runner.core.status import RunStatus
from runner.core.utf8 import utf8_safe
from runner.errors import RunnerError
from runner.history.json_values import plain
from runner.sql import partitions
from runner.sql.backend import backend_for
from runner.sql.retention import tree_finished
from runner.sql.runs import decode
from runner.sql.schema import UtcDateTime, entries, runs, scores
from runner.store.blob_sweep import named_blobs
from runner.store.blobs import blob_store
from runner.store.payloads import is_envelope

# -- export (`runner export`) ----------------------------------------------------------------

_EXPORT_BATCH = 1000


@dataclass(frozen=True)
class Exported:
    runs: int
    entries: int


def export_runs(
    engine: Engine,
    write: Callable[[str], object],
    *,
    since: datetime | None = None,
    run_ids: Sequence[str] = (),
    queue: str | None = None,
    finished_before: datetime | None = None,
) -> Exported:
    """Write runs, each with its journal, its scores and the blobs its rows name, as JSON
    Lines: one run per line, oldest first.

    Memory stays bounded whatever the history's size: runs, entries and scores come from
    three cursors read in step (server-side on PostgreSQL), and a run's line is written
    entry by entry. The cursors read one snapshot, so a run written meanwhile is wholly in
    or out.
    """
    chosen = select(runs.c.id)
    if since is not None:
        chosen = chosen.where(runs.c.created_at >= since.astimezone(UTC))
    if run_ids:
        chosen = chosen.where(runs.c.id.in_(list(run_ids)))
    if queue is not None:
        chosen = chosen.where(runs.c.queue == queue)
    if finished_before is not None:
        chosen = chosen.where(
            runs.c.status == RunStatus.FINISHED,
            runs.c.finished_at < finished_before.astimezone(UTC),
        )
    options: dict[str, Any] = {
        "yield_per": _EXPORT_BATCH,
        **backend_for(engine.dialect.name).snapshot_options(),
    }
    n_runs = n_entries = 0
    # Both results are closed however the export ends: a server-side cursor left open when a
    # run cannot be written would outlive its connection's transaction.
    with (
        engine.connect().execution_options(**options) as connection,
        connection.begin(),
        closing(
            connection.execute(select(runs).where(runs.c.id.in_(chosen)).order_by(runs.c.id))
        ) as run_rows,
        closing(
            connection.execute(
                select(entries)
                .where(entries.c.run_id.in_(chosen))
                .order_by(entries.c.run_id, entries.c.seq)
            )
        ) as entries_read,
        closing(
            connection.execute(
                select(scores)
                .where(scores.c.run_id.in_(chosen))
                .order_by(scores.c.run_id, scores.c.name)
            )
        ) as scores_read,
    ):
        entry_rows = iter(entries_read)
        pending = next(entry_rows, None)
        score_rows = iter(scores_read)
        score = next(score_rows, None)
        for run in run_rows:
            try:
                head = _dumps(_run_json(run))
                named = named_blobs((run.task, run.output))
                # The run's fields, then its entries streamed into the same JSON object.
                write(head[:-1] + ',"entries":[')
                first = True
                while pending is not None and pending.run_id == run.id:
                    write(("" if first else ",") + _dumps(_entry_json(pending)))
                    named |= named_blobs((pending.content, pending.args))
                    first = False
                    n_entries += 1
                    pending = next(entry_rows, None)
                kept = []
                while score is not None and score.run_id == run.id:
                    kept.append(_score_json(score))
                    named |= named_blobs((score.note,))
                    score = next(score_rows, None)
                tail = {"scores": kept, "blobs": _blobs(named)}
                write("]," + _dumps(tail)[1:] + "\n")
            except (ValueError, TypeError) as exc:  # a value no JSON can hold, a row damaged
                raise RunnerError(
                    f"export stopped at run {run.id}: it cannot be written "
                    f"({type(exc).__name__}: {utf8_safe(str(exc))[:200]})"
                ) from None
            n_runs += 1
        if pending is not None:
            raise RunnerError(f"export read an entry of run {pending.run_id} out of order")
    return Exported(n_runs, n_entries)


def _blobs(named: set[tuple[str, str]]) -> dict[str, str]:
    """The blobs a run's rows name, by sha256, their bytes in base64 (as stored: an
    encrypted payload's blob is its ciphertext)."""
    return {
        sha256: base64.b64encode(blob_store(url).get(sha256)).decode("ascii")
        for url, sha256 in sorted(named)
    }


_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _dumps(value: Any) -> str:
    # A lone surrogate, escaped, is JSON's own escape of it: the line is UTF-8 and the value
    # reads back exactly as the journal keeps it.
    return utf8_safe(_encoder.encode(value))


def _as_json(columns: Any, skip: str | None = None) -> Callable[[Any], dict[str, Any]]:
    """A fast row-to-JSON converter for a table: only timestamps need converting, and the
    text of content/output is decoded when its format says it is JSON."""
    names = [c.name for c in columns]
    stamps = [i for i, c in enumerate(columns) if isinstance(c.type, UtcDateTime)]
    decoded = [
        (names.index(text), names.index(text + "_format"))
        for text in ("content", "output")
        if text in names
    ]
    keep = [i for i, name in enumerate(names) if name != skip]

    def convert(row: Any) -> dict[str, Any]:
        values = list(row)
        for i in stamps:
            if values[i] is not None:
                values[i] = plain(values[i])
        for i, fmt in decoded:
            if not is_envelope(values[i]):  # an envelope is kept as stored (see export_runs)
                values[i] = decode(values[i], values[fmt])
        return {names[i]: values[i] for i in keep}

    return convert


_run_json = _as_json(runs.columns)
_entry_json = _as_json(entries.columns, skip="run_id")
_score_json = _as_json(scores.columns, skip="run_id")


# -- prune (`runner prune`) ------------------------------------------------------------------


@dataclass
class Pruned:
    """What prune removed (or, on a dry run, would remove)."""

    runs: int = 0
    entries: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    # Whole months of the journal dropped (PostgreSQL), each with its entries (counted in
    # `entries` too): every entry in them belonged to a run pruned.
    partitions: dict[str, int] = field(default_factory=dict)
    blobs: int = 0  # offloaded payloads no row names any more, deleted after the runs
    blob_bytes: int = 0


def prune_runs(
    engine: Engine,
    finished_before: datetime,
    *,
    dry_run: bool = False,
    batch_size: int = 200,
) -> Pruned:
    """Delete the runs that finished before a moment, with their journals, in batches.

    Each batch is its own short transaction (other writers wait for one batch, never for
    the whole prune). A queued, running or waiting run is never touched, however old, nor
    a finished one whose tree still has a run that is not finished (retention's rule: a
    sub-agent's child stays while its parent runs).
    """
    cutoff = finished_before.astimezone(UTC)
    old = (runs.c.status == RunStatus.FINISHED) & (runs.c.finished_at < cutoff) & tree_finished()
    pruned = Pruned()
    if dry_run:
        reads = backend_for(engine.dialect.name).read_options()
        with engine.connect().execution_options(**reads) as connection:
            for reason, n in connection.execute(
                select(runs.c.stop_reason, func.count()).where(old).group_by(runs.c.stop_reason)
            ):
                pruned.reasons[reason or "-"] += n
                pruned.runs += n
            pruned.entries = connection.execute(
                select(func.count())
                .select_from(entries)
                .where(entries.c.run_id.in_(select(runs.c.id).where(old)))
            ).scalar_one()
        return pruned
    if backend_for(engine.dialect.name).partitions_journal:
        with engine.begin() as connection:
            partitions.ensure_months(connection, datetime.now(UTC))
            pruned.partitions = partitions.drop_past(connection, cutoff, old)
            pruned.entries += sum(pruned.partitions.values())
    while True:
        with engine.begin() as connection:
            # Locked as they are picked (PostgreSQL; SQLite's writer holds the file): a run
            # revived between this SELECT and the DELETEs would otherwise lose its journal
            # to the first DELETE and be kept by the second, whose WHERE it no longer meets.
            # A run another transaction holds is left for a later prune.
            batch = connection.execute(
                select(runs.c.id, runs.c.stop_reason)
                .where(old)
                .order_by(runs.c.finished_at)
                .limit(batch_size)
                .with_for_update(skip_locked=True)
            ).all()
            if not batch:
                return pruned
            reasons = {row.id: row.stop_reason or "-" for row in batch}
            journals: dict[str, int] = dict(
                connection.execute(
                    select(entries.c.run_id, func.count())
                    .where(entries.c.run_id.in_(reasons))
                    .group_by(entries.c.run_id)
                ).all()
            )
            # The rules again in the DELETE (a child started in the tree since: kept), and
            # the journal only with its run (ON DELETE CASCADE), never ahead of it.
            gone = connection.execute(
                delete(runs).where(runs.c.id.in_(reasons), old).returning(runs.c.id)
            ).scalars()
            for run_id in gone:
                pruned.runs += 1
                pruned.entries += journals.get(run_id, 0)
                pruned.reasons[reasons[run_id]] += 1
