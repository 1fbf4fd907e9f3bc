"""Words a user reads (issue 40, point 9): a parent released while its children run waits
for them, not for a person; counts take their plural; a schedule's times are said in its
zone, in one format, by every command."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from runner import Runner, Worker
from runner.cli import main
from runner.sql.schema import runs

LEAD = f"{Path(__file__).resolve().parents[2] / 'examples' / 'research.py'}:lead"


def test_a_parent_waits_for_its_children_not_for_a_person(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with Runner(db_url) as runner:
        runner.submit(LEAD, "Is tea good for you?", id="lead")
    with caplog.at_level(logging.INFO, logger="runner.worker"):
        Worker(db_url, once=True, poll=0.01, concurrency=3).serve()
    said = [r.getMessage() for r in caplog.records]
    waits = [line for line in said if line.startswith("run lead waits")]
    with Runner(db_url) as runner, runner.engine.connect() as connection:
        found = connection.execute(select(runs.c.id).where(runs.c.parent_id == "lead"))
        children = set(found.scalars())
    assert len(children) == 2
    assert waits, said
    assert all("a person" not in line for line in waits), waits
    assert any(all(child in line for child in children) for line in waits), waits
    assert any(line.endswith("released until they end") for line in waits), waits
    assert said[-1].endswith("stopped after finishing 3 runs")
    assert not any(" 1 runs" in line or " 1 steps" in line for line in said), said


def test_schedule_commands_say_one_time_in_one_format(tmp_path: Path) -> None:
    db = ["--db", f"sqlite:///{tmp_path / 'r.db'}"]
    cli = CliRunner()
    assert cli.invoke(main, ["db", "upgrade", *db]).exit_code == 0
    added = cli.invoke(
        main,
        ["schedule", "add", "daily", LEAD, "t", "--cron", "0 7 * * *", "--tz", "Europe/Paris", *db],
    )
    assert added.exit_code == 0, added.output
    (when,) = [line.split("next tick ", 1)[1] for line in added.output.splitlines()]
    assert when.endswith(" 07:00 Europe/Paris"), when
    listed = cli.invoke(main, ["schedule", "list", *db])
    assert when in listed.output, listed.output
    fired = cli.invoke(main, ["schedule", "fire", "--in", "2d", *db])
    assert fired.exit_code == 0 and " 07:00 Europe/Paris started run " in fired.output, fired.output
