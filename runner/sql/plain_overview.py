"""`runner list` and `runner show` read over a connection opened without SQLAlchemy
(runner.sql.plain_connection), with the same reads (runner.sql.run_states over
runner.sql.reads) as the full path.

Which path reads is decided before anything is read: plain_connection declines what it
cannot serve as the full path would (a missing file, a URL it does not read alike, a schema
not at head, a driver error while opening), and these return None so that the caller reads
through a `Runner`. Once it has opened, its read is the only one: a driver error there is
raised as SQLAlchemy's error around it, as the full path raises it, and never read again
through a Runner (a second attempt would hide a failure that passed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from runner.core.stop_reasons import StopReason
from runner.sql import plain_connection, reads
from runner.sql.reads import Reader
from runner.sql.run_states import clock_now, observe, read_tree, runs, waits
from runner.store.overview import Listed, Shown, trees_of
from runner.store.run_views import result_of

T = TypeVar("T")


def listed_plainly(
    url: str | None,
    *,
    state: str | None = None,
    stop_reason: StopReason | None = None,
    release: str | None = None,
    limit: int = 20,
    schedule: str | None = None,
    trees: bool = False,
) -> Listed | None:
    """The runs `runner list` shows of the database at `url` (see run_states' `runs`);
    with `trees`, the tree each is in too. None where no plain connection opens."""

    def plainly(reader: Reader) -> Listed:
        now = clock_now(reader)
        rows = runs(
            reader, now, state=state, stop_reason=stop_reason, release=release, limit=limit,
            schedule=schedule,
        )  # fmt: skip
        first = {run_id: found[0] for run_id, found in waits(reader, rows).items()}
        read = (lambda run: read_tree(reader, run, now)) if trees else None
        return Listed(rows, now, first, trees_of(rows, read))

    plain_connection.require_file(url)
    return _plainly(url, plainly)


def shown_plainly(url: str | None, run_id: str) -> Shown | None:
    """What `runner show` shows of the run `run_id` (or the one whose id starts so). None
    where no plain connection opens."""

    def plainly(reader: Reader) -> Shown:
        now = clock_now(reader)
        run = reads.find_run(reader, run_id)
        journal = [entry for entry, _ in reads.load_entries(reader, run.id)]
        result = result_of(run, journal, waits(reader, [run]).get(run.id, []))
        tree = read_tree(reader, run, now)
        row = observe(reader, [run], now)[0]
        return Shown(result, row, journal, now, tree, reads.run_scores(reader, run.id))

    plain_connection.require_file(url)
    return _plainly(url, plainly)


def _plainly(url: str | None, read: Callable[[Reader], T]) -> T | None:
    """`read` on a plain connection; None where none opens. A driver's error while reading
    comes out as SQLAlchemy's (see the module); runner's own errors, a run not found, pass
    through as they are."""
    reader = plain_connection.open_reader(url)
    if reader is None:
        return None
    try:
        return read(reader)
    except reader.errors as exc:
        raise reader.database_error(exc) from exc
    finally:
        reader.close()
