"""Acceptance: a run SIGKILLed between an offloaded payload's blob and the row that names it,
on SQLite and PostgreSQL. Nothing is lost (the resumed run ends, every blob a row names is
there), the blob the dead process left is deleted by a sweep, and once `runner prune`
deletes the run no blob is left at all."""

from __future__ import annotations

import json
from pathlib import Path

from runner.store.payloads import blob_references
from tests.integration.payload_agents import REF, SECRET

from .harness import KILLED, cli, cli_env, described, journal, run_row


def blob_files(folder: Path) -> set[str]:
    return {path.name for path in folder.glob("??/*")}


def named(db_url: str, run_id: str) -> set[str]:
    rows = journal(db_url, run_id)
    values = [row["content"] for row in rows] + [row["args"] for row in rows]
    values += [run_row(db_url, run_id)["output"]]
    return {sha for value in values for _, sha in blob_references(value)}


def test_a_crash_between_a_blob_and_its_row_loses_nothing_and_leaves_nothing(
    db_url: str, ledger: Path
) -> None:
    blobs = ledger / "blobs"
    env = cli_env(db_url, ledger) | {
        "RUNNER_BLOBS": blobs.as_uri(),
        "RUNNER_OFFLOAD_BYTES": "1000",
    }
    killed = cli("run", REF, "look 5000", "--id", "p", db_url=db_url, ledger=ledger,
                 env=env | {"RUNNER_FAULT": "after_blob_write@1"})  # fmt: skip
    assert killed.returncode == KILLED, described(killed)
    left = blob_files(blobs)
    assert len(left) == 1 and named(db_url, "p") == set()  # the blob, no row naming it

    resumed = cli("resume", "p", db_url=db_url, ledger=ledger, env=env)
    assert resumed.returncode == 0, described(resumed)
    assert resumed.stdout.strip() == f"answer: found {SECRET} 1xxxx"
    referenced = named(db_url, "p")
    assert referenced and referenced <= blob_files(blobs)
    shown = cli("show", "p", "--json", db_url=db_url, ledger=ledger, env=env)
    assert shown.returncode == 0, described(shown)
    assert "x" * 5000 in shown.stdout and "runner.payload" not in shown.stdout

    # The dead process's blob is named by no row: the sweep takes it, and only it.
    swept = cli("prune", "--finished-before", "2000-01-01", "--blob-grace", "0", "--json",
                db_url=db_url, ledger=ledger, env=env)  # fmt: skip
    assert swept.returncode == 0, described(swept)
    assert json.loads(swept.stdout)["blobs"] == len(left - referenced)
    assert blob_files(blobs) == referenced

    # Exported with the run, then gone with it.
    exported = cli("export", "--run", "p", db_url=db_url, ledger=ledger, env=env)
    assert set(json.loads(exported.stdout)["blobs"]) == referenced, described(exported)
    pruned = cli("prune", "--finished-before", "2999-01-01", "--blob-grace", "0",
                 db_url=db_url, ledger=ledger, env=env)  # fmt: skip
    assert pruned.returncode == 0, described(pruned)
    assert blob_files(blobs) == set()
