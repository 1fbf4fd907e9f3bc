"""`runner worker` freezes what its start-up made before it serves (the collector's full
passes while runs start skip it) and spaces those full passes out, and gives the collector
back as it was when serving ends: a process that goes on, as a test's does, keeps a
collector that frees what it drops."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from runner import Agent, Runner
from runner.cli import main
from runner.cli.worker import FULL_PASS_SPACING


def counting_model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """Writes how many objects the collector holds frozen, and its thresholds, to the file
    the task names."""
    thresholds = " ".join(str(t) for t in gc.get_threshold())
    Path(str(transcript[0]["content"])).write_text(f"{gc.get_freeze_count()} {thresholds}")
    return {"type": "final", "content": "counted"}


agent = Agent(counting_model, {}, name="collector")
AGENT_REF = f"{Path(__file__).resolve()}:agent"


def test_the_worker_serves_with_start_up_frozen_and_unfreezes_after(
    db_url: str, tmp_path: Path
) -> None:
    seen = tmp_path / "frozen.txt"
    with Runner(db_url) as runner:
        runner.submit(AGENT_REF, str(seen))
    assert gc.get_freeze_count() == 0
    before = gc.get_threshold()
    served = CliRunner().invoke(main, ["worker", "--once", "--db", db_url])
    assert served.exit_code == 0, served.output
    frozen, *thresholds = (int(word) for word in seen.read_text().split())
    assert frozen > 0  # frozen while the run ran
    # The younger generations' passes as they were, the full ones spaced out.
    assert thresholds == [*before[:2], before[2] * FULL_PASS_SPACING]
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == before
