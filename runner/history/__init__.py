"""The run history: read-only SQL, the stop-reason distribution, export and prune, and the
paged reads of the page (`runner ui`).

`runner sql` (`query`, over `sqlite_reader` or `postgres_reader`, which share `reader`;
PostgreSQL's plans read as the planner's tree by `plan_tree`),
`runner stats` (`stats`; scores per release, `score_stats`, with Student's t in `student_t`),
export and prune (`archive`), the page's reads a page at a time
(`browse`), the use of provider limits (`limit_use`), moments such as `--since 7d`
(`moments`), a streaming replica's lag (`replica`), values as JSON (`json_values`) and the
views of the migrations as SQLAlchemy sees them (`views`: `run_summary`, `tool_calls`,
`run_scores`); docs/reference/schema.md documents them for the users who query them
directly.

It may import: `runner.core`, `runner.store`, `runner.sql` and the shared leaves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine

from runner.history.archive import Exported, Pruned, export_runs, prune_runs
from runner.history.browse import (
    JournalEntry,
    JournalPage,
    RunsPage,
    RunStanding,
    RunSummary,
    StepCounters,
    ToolCallRow,
    filter_choices,
    journal_page,
    run_row,
    run_standing,
    runs_page,
    step_counters,
)
from runner.history.json_values import plain
from runner.history.limit_use import limit_use
from runner.history.moments import parse_moment
from runner.history.query import QueryResult, read_only_query
from runner.history.replica import lag_words, replica_lag, resolve_read_url
from runner.history.score_stats import Drop, ScoreMean, scores_of_run
from runner.history.stats import By, Group, Rise, Share, stop_reason_stats
from runner.sql import plain_connection
from runner.sql import runs as store
from runner.sql.blob_references import named_in
from runner.sql.database import connect, open_read_only, resolve_url
from runner.store.blob_sweep import BLOB_GRACE_SECONDS, offload_stores, sweep
from runner.store.payload_config import configured


class History:
    """The history of runs in one database: its statistics, export and prune.

    With `read_url` (or RUNNER_READ_DATABASE_URL), a streaming replica of it: statistics
    and export read there (`replica_lag` says how far behind it is); prune, which deletes,
    still goes to `url`.
    """

    def __init__(self, url: str | None = None, *, read_url: str | None = None) -> None:
        plain_connection.require_file(url)  # a history is read: a missing file is a typo
        self.url = resolve_url(url)
        read = resolve_read_url(read_url)
        self.replica = open_read_only(read) if read is not None else None
        self._engine = connect(url) if read is None else None

    @property
    def engine(self) -> Engine:
        """The database itself (the primary), opened when first needed."""
        if self._engine is None:
            self._engine = connect(self.url)
        return self._engine

    @property
    def reads(self) -> Engine:
        """Where statistics and export read: the replica if there is one."""
        return self.replica if self.replica is not None else self.engine

    def replica_lag(self) -> float | None:
        """Seconds the replica is behind its primary; None without one."""
        return replica_lag(self.replica) if self.replica is not None else None

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
        if self.replica is not None:
            self.replica.dispose()

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(
        self,
        *,
        by: By = "release",
        since: datetime | None = None,
        agent_name: str | None = None,
        min_rise: float = 5.0,
    ) -> list[Group]:
        """The stop-reason distribution of finished runs per group (see stop_reason_stats)."""
        return stop_reason_stats(
            self.reads, by=by, since=since, agent_name=agent_name, min_rise=min_rise
        )

    def export(
        self,
        write: Callable[[str], object],
        *,
        since: datetime | None = None,
        run_ids: Sequence[str] = (),
        queue: str | None = None,
        finished_before: datetime | None = None,
    ) -> Exported:
        """Write runs with their journals as JSON Lines (see export_runs). Each of `run_ids`
        may be a unique prefix; all are found before anything is written."""
        ids = [store.find_run(self.reads, prefix).id for prefix in run_ids]
        return export_runs(
            self.reads, write, since=since, run_ids=ids, queue=queue,
            finished_before=finished_before,
        )  # fmt: skip

    def prune(
        self,
        finished_before: datetime,
        *,
        dry_run: bool = False,
        batch_size: int = 200,
        blob_grace: float = BLOB_GRACE_SECONDS,
    ) -> Pruned:
        """Delete the runs that finished before a moment, with their journals (see
        prune_runs), then the offloaded blobs no row names any more that were last written
        `blob_grace` seconds ago or more (runner.store.blob_sweep)."""
        pruned = prune_runs(self.engine, finished_before, dry_run=dry_run, batch_size=batch_size)
        stores = offload_stores(configured(self.url))
        older_than = datetime.now(UTC) - timedelta(seconds=blob_grace)
        swept = sweep(stores, older_than, lambda: named_in(self.engine), dry_run=dry_run)
        pruned.blobs, pruned.blob_bytes = swept.blobs, swept.bytes
        return pruned


__all__ = [
    "By",
    "Drop",
    "Exported",
    "Group",
    "History",
    "JournalEntry",
    "JournalPage",
    "Pruned",
    "QueryResult",
    "Rise",
    "RunStanding",
    "RunSummary",
    "RunsPage",
    "ScoreMean",
    "Share",
    "StepCounters",
    "ToolCallRow",
    "export_runs",
    "filter_choices",
    "journal_page",
    "lag_words",
    "limit_use",
    "parse_moment",
    "plain",
    "prune_runs",
    "read_only_query",
    "replica_lag",
    "resolve_read_url",
    "run_row",
    "run_standing",
    "runs_page",
    "scores_of_run",
    "step_counters",
    "stop_reason_stats",
]
