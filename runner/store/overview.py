"""What `runner list` and `runner show` show, as both read paths hand it back: the plain
connection's (runner.sql.plain_overview) and the `Runner`'s (runner.service.overview)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from runner.core.journal import Entry
from runner.core.result import AgentResult
from runner.core.waiting import Wait
from runner.store.rows import RunRow
from runner.store.run_trees import RunTree
from runner.store.scores import ScoreRow


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
    scores: Sequence[ScoreRow] = ()  # kept, failed, and scorers' not yet run, by name


def trees_of(rows: Sequence[RunRow], read: Callable[[RunRow], RunTree] | None) -> list[RunTree]:
    """The tree of each of `rows` (`read` reads one), each tree once (runs of one tree
    share it); none without `read`."""
    if read is None:
        return []
    found: dict[str, RunTree] = {}
    for row in rows:
        if (row.root_id or row.id) not in found:
            tree = read(row)
            found[tree.row.root_id or tree.row.id] = tree
    return list(found.values())
