"""What `runner list` and `runner show` show: read over a plain connection where one opens
(runner.sql.plain_overview, through the service's door to the SQL store,
runner.service.database), else through a `Runner`, with the same reads either way.

The rest of this feature (docs/architecture.md, "Where a feature lives"):
`runner.store.overview`.
"""

from __future__ import annotations

from runner.core.stop_reasons import StopReason
from runner.service import database
from runner.store.overview import Listed, Shown, trees_of

__all__ = ["Listed", "Shown", "listed", "shown"]


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
    """The runs `runner list` shows of the database at `url`; with `trees`, the tree of
    runs each is in too (`runner list --tree`)."""
    found = database.listed_plainly(
        url, state=state, stop_reason=stop_reason, release=release, limit=limit,
        schedule=schedule, trees=trees,
    )  # fmt: skip
    if found is not None:
        return found
    from runner.service.runner import Runner

    with Runner(url) as runner:
        rows = runner.list(
            state=state, stop_reason=stop_reason, release=release, limit=limit,
            schedule=schedule,
        )  # fmt: skip
        read = (lambda run: runner.tree(run.id)) if trees else None
        return Listed(rows, runner.now(), runner.waits(rows), trees_of(rows, read))


def shown(url: str | None, run_id: str) -> Shown:
    """What `runner show` shows of the run `run_id` (or the one whose id starts so)."""
    found = database.shown_plainly(url, run_id)
    if found is not None:
        return found
    from runner.service.runner import Runner

    with Runner(url) as runner:
        row = runner.row(run_id)
        tree = runner.tree(row.id)
        journal = runner.journal(row.id)
        scores = runner.scores(row.id)
        return Shown(runner.get(row.id), row, journal, runner.now(), tree, scores)
