"""A lease holder is judged dead only when that can be known: a live process in another PID
namespace that shares this hostname (a container with host networking) keeps its runs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

from runner import LeaseHeld, Runner
from runner.sql import leases
from runner.sql import runs as store
from runner.store.owner import is_dead, this_process


@pytest.fixture
def other_namespace_owner() -> Iterator[str]:
    """The lease owner name of a live process in a PID namespace of its own."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1)")
    holder = subprocess.Popen(
        [
            "unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            sys.executable,
            "-c",
            "import sys, time; from runner.store.owner import this_process; "
            "print(this_process(), flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    line = holder.stdout.readline().strip()
    if not line:
        holder.kill()
        pytest.skip(f"cannot make a PID namespace here: {holder.communicate()[1].strip()}")
    try:
        yield line
    finally:
        holder.kill()
        holder.communicate(timeout=10)  # reaps it and closes the pipes


def test_a_live_process_of_another_pid_namespace_is_not_dead(other_namespace_owner: str) -> None:
    assert other_namespace_owner.split(":")[0] == this_process().split(":")[0]  # same host
    assert other_namespace_owner != this_process()
    assert not is_dead(other_namespace_owner)


def test_its_runs_are_not_taken_while_its_lease_lasts(
    db_url: str, other_namespace_owner: str
) -> None:
    with Runner(db_url) as runner:
        store.create_run(
            runner.engine,
            run_id="held",
            agent=None,
            agent_name=None,
            release=None,
            task="t",
            budgets={},
        )
        leases.claim_run(
            runner.engine, "held", owner=other_namespace_owner, lease_seconds=3600, max_resumes=3
        )
        assert (
            leases.claim_some(
                runner.engine, limit=1, owner="sibling:1:1", lease_seconds=30, max_resumes=3
            )
            == []
        )
        with pytest.raises(LeaseHeld):
            leases.claim_run(
                runner.engine, "held", owner="next:1:1", lease_seconds=30, max_resumes=3
            )
        assert runner.row("held").lease_owner == other_namespace_owner
