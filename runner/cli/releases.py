"""`runner releases`: each release in the fleet and how its unfinished runs stand."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from runner.cli import output
from runner.cli.options import db_option, json_option

if TYPE_CHECKING:
    from runner.service.values import ReleaseInfo


@click.command()
@db_option
@json_option
def releases(url: str | None, as_json: bool) -> None:
    """List each release (of each agent) with unfinished runs: running, queued, waiting and
    parked, and how many of them a failed check parked.

    Parked: queued, held back until a wake-up time (a provider limit, --at/--in) or by a
    failed check (CHECK FAILED: a worker of another release replayed the run against its
    code and it differed; only a worker of the run's release takes it, `runner worker
    --release R --drain`). A release with no unfinished run is not listed: its workers
    may go.
    """
    from runner.service.runner import Runner

    with Runner(url) as runner:
        found = runner.releases()
    if as_json:
        output.print_json([_json(info) for info in found])
    else:
        output.line(_table(found))


def _table(found: Sequence[ReleaseInfo]) -> str:
    if not found:
        return "no release has unfinished runs"
    return output.table(
        ("AGENT", "RELEASE", "RUNNING", "QUEUED", "WAITING", "PARKED", "CHECK FAILED"),
        (
            (
                info.agent_name or "-",
                info.release or "-",
                str(info.running),
                str(info.queued),
                str(info.waiting),
                str(info.parked),
                str(info.check_failed),
            )
            for info in found
        ),
        right=(2, 3, 4, 5, 6),
        right_headers=(2, 3, 4, 5, 6),
    )


def _json(info: ReleaseInfo) -> dict[str, Any]:
    return {
        "agent_name": info.agent_name,
        "release": info.release,
        "running": info.running,
        "queued": info.queued,
        "waiting": info.waiting,
        "parked": info.parked,
        "check_failed": info.check_failed,
    }
