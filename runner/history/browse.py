"""Browsing the history a page at a time (`runner ui`): runs, one run's journal, its counters.

Every query is bounded by a page: a list of runs is read newest first from the index on
`created_at`, resumed after the last run shown (a keyset, so page 1,000 costs what page 1
does); a run's journal is read a range of steps at a time. Reads go through the documented
views (`run_summary`, `tool_calls`) where they answer the question, else the `entries`
table; any engine works, and the page gives a read-only one.

A run's state (stalled or not) is judged at the database's clock, as `runner list` and
`show` judge it (runner.sql.run_states.clock_now): never the web host's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, and_, or_, select

from runner.core.journal import Entry
from runner.history.views import run_summary, tool_calls
from runner.sql import reads
from runner.sql.run_states import clock_now, observe, read_tree
from runner.sql.runs import RunRow, entry_of, find_run, plain, plain_reading, reading
from runner.sql.schema import entries, runs
from runner.store.liveness import state_of
from runner.store.run_trees import RunTree


@dataclass(frozen=True)
class RunSummary:
    """A run as `run_summary` gives it: counters so far for an unfinished run."""

    id: str
    agent: str | None
    agent_name: str | None
    release: str | None
    task: str
    status: str
    stop_reason: str | None
    steps: int
    tokens: int
    cost: float
    resumes: int
    created_at: datetime
    finished_at: datetime | None
    duration_seconds: float | None
    # The status, or `stalled` for a running run no live holder executes, judged at the
    # database's clock as `runner list` judges it (the view's own `state` sees only the lease).
    state: str = ""
    # When a queued run's delay ends (`submit --in`/`--at`), while it has not yet ended.
    delayed_until: datetime | None = None


@dataclass(frozen=True)
class RunsPage:
    runs: list[RunSummary]
    # The id to pass as `before` for the next (older) page; None on the last page.
    older: str | None


def runs_page(
    engine: Engine,
    *,
    status: str | None = None,
    agent_name: str | None = None,
    release: str | None = None,
    stop_reason: str | None = None,
    before: str | None = None,
    limit: int = 50,
) -> RunsPage:
    """Runs newest first, matching every filter given, older than the run `before`."""
    v = run_summary.c
    query = select(
        v.id,
        v.agent,
        v.agent_name,
        v.release,
        v.task,
        v.status,
        v.stop_reason,
        v.steps,
        v.tokens,
        v.cost,
        v.resumes,
        v.created_at,
        v.finished_at,
        v.duration_seconds,
        runs.c.lease_owner,
        runs.c.lease_expires_at,
        runs.c.not_before,
    ).select_from(run_summary.join(runs, runs.c.id == v.id))
    for name, value in (
        ("status", status),
        ("agent_name", agent_name),
        ("release", release),
        ("stop_reason", stop_reason),
    ):
        if value:
            query = query.where(v[name] == value)
    with reading(engine) as connection:
        if before:
            after = connection.execute(select(runs.c.created_at).where(runs.c.id == before)).first()
            if after is not None:
                (moment,) = after
                query = query.where(
                    or_(v.created_at < moment, and_(v.created_at == moment, v.id < before))
                )
        query = query.order_by(v.created_at.desc(), v.id.desc()).limit(limit + 1)
        found = [dict(row._mapping) for row in connection.execute(query)]
        with plain(connection) as reader:
            now = clock_now(reader)
    rows = []
    for values in found:
        owner, expires = values.pop("lease_owner"), values.pop("lease_expires_at")
        start = values.pop("not_before")
        delayed = start if values["status"] == "queued" and start and start > now else None
        rows.append(
            RunSummary(
                **values,
                state=state_of(values["status"], owner, expires, now),
                delayed_until=delayed,
            )
        )
    older = rows[limit - 1].id if len(rows) > limit else None
    return RunsPage(rows[:limit], older)


def filter_choices(engine: Engine, *, limit: int = 200) -> tuple[list[str], list[str]]:
    """The agent names and the releases that runs have, for a page's filter suggestions."""
    with reading(engine) as connection:
        names = connection.execute(
            select(runs.c.agent_name)
            .distinct()
            .where(runs.c.agent_name.is_not(None))
            .order_by(runs.c.agent_name)
            .limit(limit)
        )
        agent_names = [name for (name,) in names]
        found = connection.execute(
            select(runs.c.release)
            .distinct()
            .where(runs.c.release.is_not(None))
            .order_by(runs.c.release)
            .limit(limit)
        )
        releases = [release for (release,) in found]
    return agent_names, releases


# -- one run's journal ------------------------------------------------------------------------


def run_row(engine: Engine, prefix: str) -> RunRow:
    """The run whose id is `prefix` or the only one starting with it, as stored."""
    return find_run(engine, prefix)


@dataclass(frozen=True)
class RunStanding:
    """A run as it stands: its row with its `state` and, while unfinished, the counters of
    its journal so far (as `runner show` gives it), judged at `now`, the database's clock."""

    row: RunRow
    now: datetime
    tree: RunTree  # the tree of runs it is in (sub-agents), drawn from its root


def run_standing(engine: Engine, prefix: str) -> RunStanding:
    """The run whose id is `prefix` or the only one starting with it, as it stands now,
    with the tree of runs it is in."""
    with plain_reading(engine) as reader:
        now = clock_now(reader)
        row = reads.find_run(reader, prefix)
        return RunStanding(observe(reader, [row], now)[0], now, read_tree(reader, row, now))


@dataclass(frozen=True)
class JournalEntry:
    """An entry of the journal with where and when it was written."""

    seq: int
    created_at: datetime
    lease_epoch: int
    entry: Entry


@dataclass(frozen=True)
class ToolCallRow:
    """A tool call as `tool_calls` gives it."""

    step: int
    tool: str
    idempotency_key: str
    status: str
    attempt: int | None
    started_at: datetime
    finished_at: datetime | None
    duration_seconds: float | None


@dataclass(frozen=True)
class JournalPage:
    entries: list[JournalEntry]
    calls: dict[str, ToolCallRow]  # by idempotency key
    first_step: int
    last_step: int  # the last step shown (inclusive)


def journal_page(engine: Engine, run_id: str, *, first_step: int, steps: int) -> JournalPage:
    """The entries of steps `first_step` to `first_step + steps - 1` (the task is step 0),
    with the tool calls they made."""
    last_step = first_step + steps - 1
    in_range = and_(entries.c.run_id == run_id, entries.c.step.between(first_step, last_step))
    calls_in_range = and_(
        tool_calls.c.run_id == run_id, tool_calls.c.step.between(first_step, last_step)
    )
    t = tool_calls.c
    with reading(engine) as connection:
        rows = connection.execute(select(entries).where(in_range).order_by(entries.c.seq))
        shown = [JournalEntry(r.seq, r.created_at, r.lease_epoch, entry_of(r)) for r in rows]
        calls = connection.execute(
            select(
                t.step,
                t.tool,
                t.idempotency_key,
                t.status,
                t.attempt,
                t.started_at,
                t.finished_at,
                t.duration_seconds,
            ).where(calls_in_range)
        )
        by_key = {row.idempotency_key: ToolCallRow(**row._mapping) for row in calls}
    return JournalPage(shown, by_key, first_step, last_step)


@dataclass(frozen=True)
class StepCounters:
    """A run's counters after one step."""

    step: int
    tokens: int
    cost: float
    error_streak: int


def step_counters(engine: Engine, run_id: str) -> list[StepCounters]:
    """The run's counters after each of its steps, in order (one row per step)."""
    e = entries.c
    query = (
        select(e.step, e.tokens, e.cost, e.error_streak)
        .where(e.run_id == run_id, e.step > 0)
        .order_by(e.seq)
    )
    last: dict[int, StepCounters] = {}
    with reading(engine) as connection:
        for step, tokens, cost, streak in connection.execute(query):
            last[step] = StepCounters(step, tokens, cost, streak)  # a step's last entry wins
    return list(last.values())
