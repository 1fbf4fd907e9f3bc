"""The history commands as users run them: `runner sql`, `stats`, `export`, `prune`, each a
real subprocess against a seeded SQLite file and PostgreSQL database."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import func, insert, select

from runner.cli import main
from runner.sql.database import open_engine
from runner.sql.schema import entries, runs

RUNNER = Path(sys.executable).parent / "runner"
BASE = datetime(2026, 10, 5, 8, 0, tzinfo=UTC)
# Release 1.1 of the agent regresses: max_steps goes from 2 in 20 runs to 9 in 20.
RELEASES = {
    "1.0": {"final": 17, "max_steps": 2, "repeated_call": 1},
    "1.1": {"final": 10, "max_steps": 9, "repeated_call": 1},
}


def runner(*args: str, db_url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNER_")}
    env["RUNNER_DATABASE_URL"] = db_url
    return subprocess.run(
        [str(RUNNER), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=90
    )


def in_process(*args: str, db_url: str) -> Any:
    """`runner ARGS` through click in this process: for the checks that need no real exit."""
    return CliRunner().invoke(main, [*args, "--db", db_url], catch_exceptions=False)


def _run(run_id: str, release: str, reason: str | None, at: datetime) -> dict[str, Any]:
    return {
        "id": run_id,
        "agent": "agents:helper",
        "agent_name": "helper",
        "release": release,
        "task": f"task {run_id}",
        "budgets": {"max_steps": 4},
        "status": "finished" if reason else "running",
        "stop_reason": reason,
        "output": "yes" if reason == "final" else None,
        "output_format": "text",
        "wrapped_up": False,
        "steps": 2 if reason else 0,
        "tokens": 300 if reason else 0,
        "cost": 0.5 if reason else 0.0,
        "resumes": 0,
        "stalled_resumes": 0,
        "progress_seq": 0,
        "cancel_requested": False,
        "lease_epoch": 1,
        "created_at": at,
        "updated_at": at,
        "finished_at": at + timedelta(seconds=30) if reason else None,
    }


def _entries(run_id: str, at: datetime) -> list[dict[str, Any]]:
    common = {
        "run_id": run_id,
        "content": None,
        "content_format": "text",
        "action_type": None,
        "tool": None,
        "args": None,
        "error": None,
        "idempotency_key": None,
        "is_error": False,
        "attempt": 1,
        "usage_tokens": 0,
        "usage_cost": 0.0,
        "error_streak": 0,
        "lease_epoch": 1,
    }
    rows = [
        {"seq": 0, "step": 0, "kind": "task", "role": "user", "content": f"task {run_id}"},
        {
            "seq": 1,
            "step": 1,
            "kind": "action",
            "role": "assistant",
            "action_type": "tool",
            "tool": "search",
            "args": {"q": "weather"},
            "idempotency_key": f"{run_id}-1",
            "usage_tokens": 150,
        },
        {
            "seq": 2,
            "step": 1,
            "kind": "observation",
            "role": "tool",
            "tool": "search",
            "content": "sunny",
            "idempotency_key": f"{run_id}-1",
        },
    ]
    return [
        {
            **common,
            "steps": 1 if row["step"] else 0,
            "tokens": 150 if row["step"] else 0,
            "cost": 0.25 if row["step"] else 0.0,
            "created_at": at + timedelta(seconds=row["seq"]),
            **row,
        }
        for row in rows
    ]


@pytest.fixture
def history(db_url: str) -> Iterator[str]:
    """40 finished runs over two releases (each with a tool call), and one running run."""
    engine = open_engine(db_url)
    n = 0
    with engine.begin() as connection:
        for day, (release, reasons) in enumerate(RELEASES.items()):
            for reason, count in reasons.items():
                for _ in range(count):
                    at = BASE + timedelta(days=day, minutes=n)
                    run_id = f"h{n:03d}"
                    connection.execute(insert(runs).values(**_run(run_id, release, reason, at)))
                    connection.execute(insert(entries), _entries(run_id, at))
                    n += 1
        connection.execute(insert(runs).values(**_run("live", "1.1", None, BASE)))
        connection.execute(insert(entries), _entries("live", BASE))
    engine.dispose()
    yield db_url


def _counts(db_url: str) -> tuple[int, int]:
    engine = open_engine(db_url)
    with engine.connect() as connection:
        n_runs = connection.execute(select(func.count()).select_from(runs)).scalar_one()
        n_entries = connection.execute(select(func.count()).select_from(entries)).scalar_one()
    engine.dispose()
    return n_runs, n_entries


def test_sql_prints_a_table_csv_and_json(history: str, tmp_path: Path) -> None:
    sql = (
        "SELECT release, COUNT(*) AS runs, SUM(tokens) AS tokens FROM run_summary "
        "WHERE status = 'finished' GROUP BY release ORDER BY release"
    )
    table = runner("sql", sql, db_url=history, cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines() == [
        "release  runs  tokens",
        "1.0        20    6000",
        "1.1        20    6000",
        "(2 rows)",
    ]
    as_csv = in_process("sql", sql, "--csv", db_url=history)
    assert list(csv.reader(io.StringIO(as_csv.stdout))) == [
        ["release", "runs", "tokens"],
        ["1.0", "20", "6000"],
        ["1.1", "20", "6000"],
    ]
    as_json = in_process(
        "sql", "SELECT * FROM tool_calls WHERE run_id = 'h000'", "--json", db_url=history
    )
    (call,) = json.loads(as_json.stdout)
    assert (call["tool"], call["args"], call["status"], call["attempt"]) == (
        "search",
        {"q": "weather"} if history.startswith("postgres") else '{"q": "weather"}',
        "done",
        1,
    )
    assert call["duration_seconds"] == 1.0
    assert datetime.fromisoformat(call["started_at"]).replace(tzinfo=UTC) == BASE + timedelta(
        seconds=1
    )


@pytest.mark.parametrize("sql", ["DELETE FROM entries", "SELECT 1; DELETE FROM entries"])
def test_sql_write_is_refused_in_one_line(history: str, tmp_path: Path, sql: str) -> None:
    before = _counts(history)
    refused = runner("sql", sql, db_url=history, cwd=tmp_path)
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert refused.stderr.startswith("Error: ")
    assert "Traceback" not in refused.stderr
    assert _counts(history) == before


def test_stats_flags_the_release_that_regressed(history: str, tmp_path: Path) -> None:
    shown = runner("stats", db_url=history, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].split() == ["RELEASE", "RUNS", "final", "max_steps", "repeated_call"]
    assert lines[1].split() == ["helper", "1.0", "20", "17", "85.0%", "2", "10.0%", "1", "5.0%"]
    assert lines[2].split() == [
        "helper",
        "1.1",
        "20",
        "10",
        "50.0%",
        "9",
        "45.0%",
        "^",
        "1",
        "5.0%",
    ]
    assert "helper 1.1: max_steps 10.0% -> 45.0% (+35.0 points since helper 1.0)" in shown.stdout

    as_json = json.loads(in_process("stats", "--json", db_url=history).stdout)
    old, new = as_json["groups"]
    assert (old["group"], old["runs"], old["flags"]) == ("helper 1.0", 20, [])
    assert new["stop_reasons"] == [
        {"stop_reason": "final", "count": 10, "percent": 50.0},
        {"stop_reason": "max_steps", "count": 9, "percent": 45.0},
        {"stop_reason": "repeated_call", "count": 1, "percent": 5.0},
    ]
    (flag,) = new["flags"]
    assert (flag["stop_reason"], flag["previous_percent"], flag["rise_points"]) == (
        "max_steps",
        10.0,
        35.0,
    )
    assert flag["p_value"] < 0.05

    by_day = json.loads(
        in_process("stats", "--by", "day", "--since", "2026-10-06", "--json", db_url=history).stdout
    )
    assert [(g["day"], g["runs"]) for g in by_day["groups"]] == [("2026-10-06", 20)]


def test_export_then_prune(history: str, tmp_path: Path) -> None:
    out = tmp_path / "runs.jsonl"
    exported = runner("export", "-o", str(out), db_url=history, cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert exported.stderr.strip() == "exported 41 runs, 123 entries"
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in lines] == sorted([f"h{n:03d}" for n in range(40)] + ["live"])
    assert [e["kind"] for e in lines[0]["entries"]] == ["task", "action", "observation"]

    one = in_process("export", "--run", "h01", "--run", "live", db_url=history)
    assert one.exit_code == 1 and "more than one run id starts with h01" in one.stderr
    one = in_process("export", "--run", "h017", "--run", "live", db_url=history)
    assert [json.loads(line)["id"] for line in one.stdout.splitlines()] == ["h017", "live"]

    # Release 1.0 ran on 2026-10-05: its 20 runs (and their 60 entries) are older than the 6th.
    planned = runner(
        "prune", "--finished-before", "2026-10-06", "--dry-run", db_url=history, cwd=tmp_path
    )
    assert planned.stdout.strip() == (
        "would remove 20 runs finished before 2026-10-06 00:00:00 UTC "
        "(final 17, max_steps 2, repeated_call 1) and 60 journal entries"
    )
    assert _counts(history) == (41, 123)
    pruned = in_process(
        "prune", "--finished-before", "2026-10-06", "--batch-size", "7", "--json", db_url=history
    )
    assert json.loads(pruned.stdout) == {
        "dry_run": False,
        "finished_before": "2026-10-06T00:00:00+00:00",
        "runs": 20,
        "entries": 60,
        "stop_reasons": {"final": 17, "max_steps": 2, "repeated_call": 1},
        "blobs": 0,
        "blob_bytes": 0,
    }
    assert _counts(history) == (21, 63)
    # Everything finished is older than next year; the running run stays.
    in_process("prune", "--finished-before", "2100-01-01", db_url=history)
    assert _counts(history) == (1, 3)


def test_history_commands_explain_themselves() -> None:
    for name in ("sql", "stats", "export", "prune"):
        shown = CliRunner().invoke(main, [name, "--help"])
        assert shown.exit_code == 0, shown.output
        assert "--db" in shown.output
    bad = CliRunner().invoke(main, ["prune", "--finished-before", "someday"])
    assert bad.exit_code == 2 and "not a date, a time or an age" in bad.output
    assert CliRunner().invoke(main, ["prune"]).exit_code == 2  # retention is never a default
