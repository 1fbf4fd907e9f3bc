"""Acceptance: encryption at rest through the `runner` command, on SQLite and PostgreSQL.
A run written with key A (its large payloads offloaded, their blobs encrypted too) is
unreadable without A (a one-line error naming the key, never a traceback, never garbage);
`runner keys rotate`, SIGKILLed half way and run again, leaves every value under key B; the
run reads back the same with B alone; `runner sql` shows encrypted values as such; and no
blob is left that no row names once the sweep has run. A rotation while a process executes a
run (its task written with key A) leaves that run and an older one readable with B alone."""

from __future__ import annotations

import json
from pathlib import Path

from runner.store.payloads import blob_references
from tests.integration.payload_agents import GATE_VARIABLE, REF, SECRET
from tests.unit.payload_codecs import KEY_A, KEY_B, keys_text

from .harness import (
    KILLED,
    cli,
    cli_env,
    described,
    journal,
    one_line_error,
    run_row,
    start,
    wait_for,
)


def blob_files(folder: Path) -> set[str]:
    return {path.name for path in folder.glob("??/*")}


def named(db_url: str, run_id: str) -> set[str]:
    rows = journal(db_url, run_id)
    values = [row["content"] for row in rows] + [row["args"] for row in rows]
    values += [run_row(db_url, run_id)["output"], run_row(db_url, run_id)["task"]]
    return {sha for value in values for _, sha in blob_references(value)}


def test_a_run_written_with_key_a_reads_after_rotation_to_key_b(db_url: str, ledger: Path) -> None:
    blobs = ledger / "blobs"
    base = cli_env(db_url, ledger) | {
        "RUNNER_BLOBS": blobs.as_uri(),
        "RUNNER_OFFLOAD_BYTES": "1000",
    }
    with_a = base | {"RUNNER_KEYS": keys_text(KEY_A)}
    with_both = base | {"RUNNER_KEYS": keys_text(KEY_A, KEY_B)}
    with_b = base | {"RUNNER_KEYS": keys_text(KEY_B)}

    ran = cli("run", REF, "look 3000", "--id", "k", db_url=db_url, ledger=ledger, env=with_a)
    assert ran.returncode == 0, described(ran)
    first = cli("show", "k", "--json", db_url=db_url, ledger=ledger, env=with_a)
    assert SECRET in first.stdout and "x" * 3000 in first.stdout, described(first)
    for row in journal(db_url, "k"):
        assert "swordfish" not in json.dumps(row, default=str)
    assert all(b"swordfish" not in path.read_bytes() for path in blobs.glob("??/*"))

    shown = cli("sql", "SELECT kind, content FROM entries WHERE run_id = 'k' ORDER BY seq",
                db_url=db_url, ledger=ledger, env=base)  # fmt: skip
    assert shown.returncode == 0 and "encrypted (key a)" in shown.stdout, described(shown)
    assert "offloaded (sha256" in shown.stdout and "swordfish" not in shown.stdout
    # The view `payloads` says what each value is and how big, without opening it.
    view = cli("sql", "SELECT field, bytes, offloaded, encrypted FROM payloads "
               "WHERE run_id = 'k' ORDER BY seq, field", "--json",
               db_url=db_url, ledger=ledger, env=base)  # fmt: skip
    values = json.loads(view.stdout)
    assert all(value["encrypted"] for value in values), values
    big = [value for value in values if value["bytes"] > 3000]
    assert big and all(value["offloaded"] for value in big)
    assert {value["field"] for value in values} == {"task", "output", "content", "args"}

    for env in (base, with_b):  # no key ring; a ring without key a
        refused = cli("show", "k", db_url=db_url, ledger=ledger, env=env)
        assert refused.returncode != 0 and "key a" in one_line_error(refused.stderr)

    killed = cli("keys", "rotate", "--batch-size", "2", db_url=db_url, ledger=ledger,
                 env=with_both | {"RUNNER_FAULT": "before_rotation_commit@2"})  # fmt: skip
    assert killed.returncode == KILLED, described(killed)
    rotated = cli("keys", "rotate", db_url=db_url, ledger=ledger, env=with_both)
    assert rotated.returncode == 0, described(rotated)
    assert cli("keys", "rotate", db_url=db_url, ledger=ledger, env=with_both).stdout.startswith(
        "encrypted again 0 values"
    )

    after = cli("show", "k", "--json", db_url=db_url, ledger=ledger, env=with_b)
    assert after.returncode == 0, described(after)
    assert json.loads(after.stdout) == json.loads(first.stdout)

    # The blobs of key A's values are named by no row now: the sweep takes them all.
    swept = cli("prune", "--finished-before", "2000-01-01", "--blob-grace", "0",
                db_url=db_url, ledger=ledger, env=with_b)  # fmt: skip
    assert swept.returncode == 0, described(swept)
    assert blob_files(blobs) == named(db_url, "k") != set()


def test_a_rotation_while_a_worker_runs_leaves_every_value_readable_with_the_new_key(
    db_url: str, ledger: Path
) -> None:
    env = cli_env(db_url, ledger)
    done = cli("run", REF, "look 0", "--id", "old", db_url=db_url, ledger=ledger,
               env=env | {"RUNNER_KEYS": keys_text(KEY_A)})  # fmt: skip
    assert done.returncode == 0, described(done)
    gate = ledger / "gate"
    gate.mkdir()
    both = env | {"RUNNER_KEYS": keys_text(KEY_A, KEY_B)}
    # Its task written with key A; its steps, by a process that has both keys, with key B.
    queued = cli("submit", REF, "look 0", "--id", "live", db_url=db_url, ledger=ledger,
                 env=env | {"RUNNER_KEYS": keys_text(KEY_A)})  # fmt: skip
    assert queued.returncode == 0, described(queued)
    running = start("resume", "live", env=both | {GATE_VARIABLE: str(gate)}, cwd=ledger)
    try:
        wait_for(lambda: (gate / "started").exists(), what="the tool to start")
        rotated = cli("keys", "rotate", "--batch-size", "1", db_url=db_url, ledger=ledger, env=both)
        assert rotated.returncode == 0, described(rotated)
        (gate / "open").touch()
        _, err = running.communicate(timeout=60)
    finally:
        if running.returncode is None:
            running.kill()
            running.communicate()
    assert running.returncode == 0, err
    only_b = env | {"RUNNER_KEYS": keys_text(KEY_B)}
    for run_id in ("old", "live"):
        shown = cli("show", run_id, db_url=db_url, ledger=ledger, env=only_b)
        assert shown.returncode == 0 and SECRET in shown.stdout, described(shown)
