"""`runner score`: keep a score of a run."""

from __future__ import annotations

import click

from runner.cli import output
from runner.cli.options import RUN_ID, db_option, json_option
from runner.service import documents


@click.command()
@click.argument("run_id", metavar="ID", type=RUN_ID)
@click.argument("name")
@click.argument("value", type=float)
@click.option("--note", default=None, metavar="TEXT", help="Why: kept with the score.")
@db_option
@json_option
def score(
    run_id: str, name: str, value: float, note: str | None, url: str | None, as_json: bool
) -> None:
    """Keep score NAME of run ID: VALUE, a number (1 and 0 for yes and no).

    A score of the same name replaces the run's earlier one (a scorer's not yet kept
    included). `runner stats --by release` gives each score's mean per release and flags a
    drop; the `run_scores` view has every score for SQL.
    """
    from runner.service.runner import Runner  # SQLAlchemy: not for `runner --help`

    with Runner(url) as runner:
        kept = runner.score(run_id, name, value, note)
    if as_json:
        output.print_json(documents.score_json(kept))
    else:
        output.line(f"run {kept.run_id}: {kept.name} = {kept.value:g}")
