"""Acceptance: a `runner worker` SIGKILLed in the middle of a group commit, on both databases.

Twenty runs go at once in one worker, so their journal writes share commits
(runner.sql.group_commit): on SQLite transactions, on PostgreSQL single statements. The
fault point `before_group_commit` kills the process inside such a commit: on SQLite every
statement of several runs' writes run, the COMMIT not yet; on PostgreSQL the one statement
of several runs' entries ready, not yet sent. Then:
no run went on past an entry the database does not hold (each tool call that began has its
action committed; each model call after the first follows its previous step's committed
outcome), so no acknowledged entry was lost; and a second worker finishes every run, each
key-aware effect applied exactly once.
"""

from __future__ import annotations

import signal

import pytest

from .harness import journal
from .test_workers import Cluster, assert_outcomes, mode_of

pytestmark = pytest.mark.parametrize(
    "db_url", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)


@pytest.mark.parametrize("fault", ["before_group_commit@1", "before_group_commit@4"])
def test_sigkill_mid_group_commit_loses_no_acknowledged_entry(cluster: Cluster, fault: str) -> None:
    ids = [run for i in range(40) for run in cluster.submit(("final", "max_steps")[i % 2], start=i)]
    victim = cluster.start("--concurrency", "20", serving=False, env={"RUNNER_FAULT": fault})
    assert victim.wait(90) == -signal.SIGKILL, victim.log()

    # What the victim did outside the database, against what the database holds.
    for run_id in ids:
        rows = journal(cluster.url, run_id)
        actions = {row["step"] for row in rows if row["kind"] == "action"}
        outcomes = {row["step"] for row in rows if row["kind"] == "observation"}
        began = {t["step"] for t in cluster.tool_begins() if t["run"] == run_id}
        # A tool call begins only once its action has committed.
        assert began <= actions, (run_id, sorted(began), sorted(actions))
        asked = {c["step"] for c in cluster.model_calls() if c["run"] == run_id}
        # The model is asked for step n only once step n - 1's outcome has committed.
        assert {step - 1 for step in asked if step > 1} <= outcomes, (run_id, asked, outcomes)
        seqs = [row["seq"] for row in rows]
        assert seqs == list(range(len(seqs)))  # no hole: nothing after a lost entry

    survivor = cluster.start("--concurrency", "20")
    rows = cluster.wait_finished(ids, timeout=120)
    assert survivor.stop() == 0, survivor.log()
    assert_outcomes(cluster, rows, ids)  # every reason as its mode's, each effect once
    assert {mode_of(i) for i in ids} == {"final", "max_steps"}
