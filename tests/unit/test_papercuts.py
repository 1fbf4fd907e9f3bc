"""Small things a user reads (issue 40, point 9): the documented import of Worker, counts
with their plurals, a parent's wait for its children said as such, schedule times in the
schedule's zone, costs in JSON without float noise, help without storage bounds, and the
top-level help's summaries whole."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from runner.cli import main, output
from runner.cli.report_output import retention_text, tick_time

LEAD = f"{Path(__file__).resolve().parents[2] / 'examples' / 'research.py'}:lead"


def test_worker_is_imported_from_runner() -> None:
    import runner
    from runner import Worker
    from runner.service.worker import Worker as Home

    assert Worker is Home and "Worker" in runner.__all__


def test_one_is_singular() -> None:
    assert retention_text(None, 1) == "the newest 1 finished run kept"
    assert retention_text(None, 2) == "the newest 2 finished runs kept"


def test_schedule_times_are_in_the_schedules_zone_everywhere() -> None:
    at = datetime(2026, 12, 7, 6, 0, tzinfo=UTC)
    assert tick_time(at, "Europe/Paris") == "2026-12-07 07:00 Europe/Paris"
    assert tick_time(at, "UTC") == "2026-12-07 06:00 UTC"
    assert tick_time(None, "UTC") == "-"


def test_json_costs_carry_no_float_noise(capsys: pytest.CaptureFixture[str]) -> None:
    output.print_json({"cost": 0.0001 + 0.0001 + 0.0001, "runs": [{"cost": 0.1 + 0.2}]})
    assert json.loads(capsys.readouterr().out) == {"cost": 0.0003, "runs": [{"cost": 0.3}]}


@pytest.mark.parametrize("command", [["run"], ["submit"], ["resume"], ["schedule", "add"]])
def test_help_shows_no_storage_bounds(command: list[str]) -> None:
    shown = CliRunner().invoke(main, [*command, "--help"], env={"COLUMNS": "80"}).output
    assert "9223372036854775807" not in shown and "2147483647" not in shown
    assert "1000000000" not in shown
    assert "[x>=0]" in shown


def test_the_top_level_help_cuts_no_summary() -> None:
    shown = CliRunner().invoke(main, ["--help"], env={"COLUMNS": "80"}).output
    commands = shown.split("Commands:", 1)[1]
    assert not any(line.rstrip().endswith("...") for line in commands.splitlines()), commands
    assert "with its idempotency" in " ".join(commands.split())


def test_a_value_past_a_hidden_bound_is_refused_naming_it() -> None:
    done = CliRunner().invoke(main, ["submit", "x:y", "t", "--priority", "2147483648"])
    assert done.exit_code == 2
    assert "not in the range -2147483648<=x<=2147483647" in done.output
