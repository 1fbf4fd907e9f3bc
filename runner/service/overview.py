"""What `runner list` and `runner show` show: read over a connection opened without
SQLAlchemy (runner.sql.plain_connection) where one opens, else through a `Runner`, with
the same reads (runner.sql.run_states over runner.sql.reads) either way.

Which path reads is decided before anything is read: plain_connection declines what it
cannot serve as the full path would (a missing file, a URL it does not read alike, a schema
not at head, a driver error while opening). Once it has opened, its read is the only one: a
driver error there is raised as SQLAlchemy's error around it, as the full path raises it,
and never read again through a Runner (a second attempt would hide a failure that passed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from runner.core.journal import Entry
from runner.core.result import AgentResult
from runner.core.stop_reasons import StopReason
from runner.core.waiting import Wait
from runner.sql import plain_connection, reads
from runner.sql.reads import Reader
from runner.sql.run_states import clock_now, observe, read_tree, runs, waits
from runner.store.rows import RunRow
from runner.store.rules import result_of
from runner.store.run_trees import RunTree

T = TypeVar("T")


@dataclass(frozen=True)
class Listed:
    """What `runner list` shows: the runs, the time they were judged at, their waits."""

    rows: Sequence[RunRow]
    now: datetime
    waits: dict[str, Wait]
    trees: Sequence[RunTree] = ()  # with `trees`: each listed run's tree, once, newest first


@dataclass(frozen=True)
class Shown:
    """What `runner show` shows: the run's result so far, its row, its journal, and when;
    and the tree of runs it is in (its parent and children, if it has any)."""

    result: AgentResult
    row: RunRow
    journal: list[Entry]
    now: datetime
    tree: RunTree


def listed(
    url: str | None,
    *,
    state: str | None = None,
    stop_reason: StopReason | None = None,
    release: str | None = None,
    limit: int = 20,
    schedule: str | None = None,
    trees: bool = False,
) -> Listed:
    """The runs `runner list` shows (see `runs`) of the database at `url`; with `trees`,
    the tree of runs each is in too (`runner list --tree`)."""

    def plainly(reader: Reader) -> Listed:
        now = clock_now(reader)
        rows = runs(
            reader, now, state=state, stop_reason=stop_reason, release=release, limit=limit,
            schedule=schedule,
        )  # fmt: skip
        first = {run_id: found[0] for run_id, found in waits(reader, rows).items()}
        read = (lambda run: read_tree(reader, run, now)) if trees else None
        return Listed(rows, now, first, _trees(rows, read))

    plain_connection.require_file(url)
    found = _plainly(url, plainly)
    if found is not None:
        return found
    from runner.service.runner import Runner

    with Runner(url) as runner:
        rows = runner.list(
            state=state, stop_reason=stop_reason, release=release, limit=limit,
            schedule=schedule,
        )  # fmt: skip
        read = (lambda run: runner.tree(run.id)) if trees else None
        return Listed(rows, runner.now(), runner.waits(rows), _trees(rows, read))


def _trees(rows: Sequence[RunRow], read: Callable[[RunRow], RunTree] | None) -> list[RunTree]:
    """The tree of each of `rows`, each tree once (runs of one tree share it)."""
    if read is None:
        return []
    found: dict[str, RunTree] = {}
    for row in rows:
        if (row.root_id or row.id) not in found:
            tree = read(row)
            found[tree.row.root_id or tree.row.id] = tree
    return list(found.values())


def shown(url: str | None, run_id: str) -> Shown:
    """What `runner show` shows of the run `run_id` (or the one whose id starts so)."""

    def plainly(reader: Reader) -> Shown:
        now = clock_now(reader)
        run = reads.find_run(reader, run_id)
        journal = [entry for entry, _ in reads.load_entries(reader, run.id)]
        result = result_of(run, journal, waits(reader, [run]).get(run.id, []))
        tree = read_tree(reader, run, now)
        return Shown(result, observe(reader, [run], now)[0], journal, now, tree)

    plain_connection.require_file(url)
    found = _plainly(url, plainly)
    if found is not None:
        return found
    from runner.service.runner import Runner

    with Runner(url) as runner:
        row = runner.row(run_id)
        tree = runner.tree(row.id)
        return Shown(runner.get(row.id), row, runner.journal(row.id), runner.now(), tree)


def _plainly(url: str | None, read: Callable[[Reader], T]) -> T | None:
    """`read` on a plain connection; None where none opens (the full path reads instead).
    A driver's error while reading comes out as SQLAlchemy's (see the module); runner's own
    errors, a run not found, pass through as they are."""
    reader = plain_connection.open_reader(url)
    if reader is None:
        return None
    try:
        return read(reader)
    except reader.errors as exc:
        raise reader.database_error(exc) from exc
    finally:
        reader.close()
