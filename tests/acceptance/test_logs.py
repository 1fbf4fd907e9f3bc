"""A real `runner worker` logs through `logging`: timestamped text lines, or JSON lines."""

from __future__ import annotations

import json
import re
from pathlib import Path

from .harness import agent_ref, cli, described

STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (INFO|WARNING|ERROR) runner\.")


def test_worker_lines_are_timestamped_text(ledger: Path) -> None:
    db_url = f"sqlite:///{ledger / 'runner.db'}"
    submitted = cli(
        "submit",
        agent_ref("ledgered"),
        "logs-text",
        "--id",
        "logs-text",
        db_url=db_url,
        ledger=ledger,
    )
    assert submitted.returncode == 0, described(submitted)
    served = cli("worker", "--once", db_url=db_url, ledger=ledger)
    assert served.returncode == 0, described(served)
    lines = served.stderr.splitlines()
    assert lines and all(STAMP.match(line) for line in lines), served.stderr
    assert any(line.endswith("run logs-text finished: final after 7 steps") for line in lines)


def test_worker_lines_are_json_with_the_run_id(ledger: Path) -> None:
    db_url = f"sqlite:///{ledger / 'runner.db'}"
    submitted = cli(
        "submit",
        agent_ref("ledgered"),
        "logs-json",
        "--id",
        "logs-json",
        db_url=db_url,
        ledger=ledger,
    )
    assert submitted.returncode == 0, described(submitted)
    served = cli("--log-format", "json", "worker", "--once", db_url=db_url, ledger=ledger)
    assert served.returncode == 0, described(served)
    records = [json.loads(line) for line in served.stderr.splitlines()]
    assert {"time", "level", "logger", "message", "worker"} <= set(records[0])
    about_the_run = [r for r in records if r.get("run_id") == "logs-json"]
    assert [r["message"].split(":")[0] for r in about_the_run] == [
        "run logs-json claimed (epoch 1, resumes 0)",
        "run logs-json finished",
    ]
    assert all(r["level"] == "info" for r in records)
