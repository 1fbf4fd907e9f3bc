"""Acceptance: a worker SIGKILLed with many runs in flight mid-step, on a few connections,
leaves nothing lost and nothing doubled: a second worker resumes every run from its journal.

The cluster, the ledgers and the outcome checks are the worker tests' (test_workers.py).
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

from .harness import check_journal, journal
from .test_workers import (
    MODEL_STEPS,
    TOOL_STEPS,
    Cluster,
    assert_outcomes,
    mode_of,
    wait_for,
)

RUNS = 24


def connections_on_file(pid: int, database: Path) -> int:
    """The process's open descriptors on the SQLite file: one per connection."""
    folder = Path(f"/proc/{pid}/fd")
    target = str(database.resolve())
    count = 0
    for fd in os.listdir(folder):
        try:
            count += os.readlink(folder / fd) == target
        except OSError:
            continue
    return count


def test_a_worker_killed_with_many_runs_mid_step_loses_no_step(cluster: Cluster) -> None:
    # Each run's two tool calls apply their effect, then take 3 s: the kill lands with
    # nearly every run inside one, or in a model call beside them. The lease is long: the
    # rescuer takes a dead process's runs at once, and a heartbeat held up by a loaded
    # machine must not let a live worker's runs be taken over (by itself or the rescuer).
    victim = cluster.start("--concurrency", str(RUNS), slow=3.0)
    ids = cluster.submit("slow", RUNS // 2) + cluster.submit("thinking", RUNS // 2)
    wait_for(
        lambda: len({t["run"] for t in cluster.in_tool(victim.pid)}) >= RUNS // 2 - 2,
        60,
        cluster.logs,
    )
    held = {
        run_id
        for run_id, row in cluster.rows().items()
        if row.lease_owner and f":{victim.pid}:" in row.lease_owner
    }
    if cluster.url.startswith("sqlite"):
        database = Path(cluster.url.removeprefix("sqlite:///"))
        # Runs in flight are not connections: a handful serve them all.
        assert connections_on_file(victim.pid, database) <= 4 < len(held), held
    victim.signal(signal.SIGKILL)
    assert victim.wait(60) == -signal.SIGKILL, victim.log()
    interrupted = cluster.in_tool(victim.pid)  # killed inside these tool calls
    assert len(interrupted) >= RUNS // 2 - 2, interrupted
    # The calls the journal left pending (an action, no observation): those the kill caught
    # inside the tool, and those it caught on either side of it, after the action's commit
    # and before the tool began, or after the tool returned and before its result was
    # committed (a window a loaded machine widens: the commit waits for its turn to write).
    pending = {key for run_id in ids for key in pending_calls(journal(cluster.url, run_id))}
    assert {c["key"] for c in interrupted} <= pending

    rescuer = cluster.start("--once", "--concurrency", str(RUNS), slow=0.1, serving=False)
    assert rescuer.wait(90) == 0, rescuer.log()
    rows = cluster.rows()

    assert_outcomes(cluster, rows, ids)  # every run final, every key's effect exactly once
    for run_id in ids:
        check_journal(journal(cluster.url, run_id))  # no gap, no step twice
        if run_id in held:
            assert rows[run_id].resumes == 1, rows[run_id]
    # A step the victim recorded is never asked of the model again; each step is asked of
    # the rescuer at most once.
    asked: dict[tuple[str, int], list[int]] = {}
    for call in cluster.model_calls():
        asked.setdefault((call["run"], call["step"]), []).append(call["pid"])
    assert set(asked) == {(i, s) for i in ids for s in MODEL_STEPS[mode_of(i)]}
    for pids in asked.values():
        assert pids.count(rescuer.pid) <= 1 and len(pids) <= 2, pids
    for key in pending:  # its action was recorded: the model is not asked that step again
        run_id, step = key.rsplit("-", 1)
        assert asked[(run_id, int(step))] == [victim.pid], key
    # A tool call runs again exactly when its result was not journaled: once more, by the
    # rescuer, with its key (attempt 2). A call whose result was committed never runs again.
    victims = {t["key"] for t in cluster.tool_begins() if t["pid"] == victim.pid}
    begun = Counter(t["key"] for t in cluster.tool_begins())
    expected = Counter(f"{i}-{s}" for i in ids for s in TOOL_STEPS[mode_of(i)])
    expected.update(pending & victims)
    assert begun == expected
    retries = [t for t in cluster.tool_begins() if t["attempt"] == 2]
    assert {t["pid"] for t in retries} == {rescuer.pid}
    assert {t["key"] for t in retries} == pending
    assert all(t["attempt"] == 1 for t in cluster.tool_begins() if t["pid"] == victim.pid)


def pending_calls(rows: list[dict[str, Any]]) -> set[str]:
    """The idempotency keys of the journal's calls that have an action and no result."""
    called = {r["idempotency_key"] for r in rows if r["kind"] == "action"}
    settled = {r["idempotency_key"] for r in rows if r["kind"] == "observation"}
    return {key for key in called - settled if key is not None}
