"""`runner worker` freezes what its start-up made before it serves (the collector's full
passes while runs start skip it), and gives the collector back when serving ends: a
process that goes on, as a test's does, keeps a collector that frees what it drops."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from runner import Agent, Runner
from runner.cli import main


def counting_model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """Writes how many objects the collector holds frozen to the file the task names."""
    Path(str(transcript[0]["content"])).write_text(str(gc.get_freeze_count()))
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
    served = CliRunner().invoke(main, ["worker", "--once", "--db", db_url])
    assert served.exit_code == 0, served.output
    assert int(seen.read_text()) > 0  # frozen while the run ran
    assert gc.get_freeze_count() == 0
