"""Deploys, with the real `runner worker` processes: a worker of release 2 meets runs that
release 1 started, in a queue of each policy for older releases (continue, pin, check),
one of them SIGKILLed mid-check; a release 1 worker drains what is left and exits; and the
replay gate names the runs whose recorded tool calls release 2's code no longer takes.

The agent is one file at one path, rewritten to deploy (as a deploy replaces the code at
the same place): release 1 looks an order up with the tool `lookup`, release 2 calls it
`find`. Each tool call writes a line to a ledger: who ran what, for which run.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from runner import Runner

from .harness import cli, cli_env, described

AGENT = """
import os, re
from runner import Agent, current_call, tool

def note(name):
    call = current_call()
    with open(os.environ["RELEASE_LEDGER"], "a") as ledger:
        ledger.write(f"{RELEASE} {call.run_id} {name}\\n")

@tool(idempotent=True)
def LOOKUP(order: str) -> str:
    note("LOOKUP")
    return f"order {order}: paid 249.00"

@tool(approval=True)
def pay(order: str, amount: float, idempotency_key: str) -> str:
    note("pay")
    return f"refunded {amount:.2f} on {order}"

def model(transcript):
    order = re.search(r"\\d{4}", transcript[0]["content"]).group()
    seen = [m for m in transcript if m["role"] == "tool"]
    if not seen:
        return {"type": "tool", "name": "LOOKUP", "args": {"order": order}}
    if len(seen) == 1:
        return {"type": "tool", "name": "pay", "args": {"order": order, "amount": 249.0}}
    return {"type": "final", "content": seen[-1]["content"]}

agent = Agent(model, {"LOOKUP": LOOKUP, "pay": pay}, name="refunds", release=RELEASE)
"""
RELEASES = {"1": "lookup", "2": "find"}


def _code(release: str) -> str:
    code = AGENT.replace("LOOKUP", RELEASES[release])
    return f"RELEASE = {release!r}\n" + code.replace("release=RELEASE", f"release={release!r}")


def ledger_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_worker_of_release_2_meets_runs_of_release_1_under_each_policy(
    db_url: str, tmp_path: Path
) -> None:
    agent_file, ledger = tmp_path / "refunds.py", tmp_path / "ledger.txt"
    agent_file.write_text(_code("1"))
    ref = f"{agent_file}:agent"
    env = cli_env(db_url, tmp_path) | {"RELEASE_LEDGER": str(ledger)}

    def runner(*args: str, fault: str | None = None) -> subprocess.CompletedProcess[str]:
        chosen = env if fault is None else env | {"RUNNER_FAULT": fault}
        return cli(*args, db_url=db_url, ledger=tmp_path, env=chosen)

    with Runner(db_url) as setup:
        setup.set_older_releases("pinned", "pin")
        setup.set_older_releases("checked", "check")
        for queue in ("as-is", "pinned", "checked"):
            setup.submit(ref, f"refund order 1042 ({queue})", id=queue, queue=queue)
    # Release 1 takes each run to its wait (the payment needs approval): step 1 recorded.
    done = runner("worker", "--once")
    assert done.returncode == 0, described(done)
    with Runner(db_url) as setup:
        for run_id in ("as-is", "pinned", "checked"):
            setup.approve(run_id, call=f"{run_id}-2")

    agent_file.write_text(_code("2"))  # the deploy
    # Killed mid-check: the verdict known (differs), the run not yet parked.
    killed = runner("worker", "--once", fault="during_release_check")
    assert killed.returncode == -9, described(killed)
    with Runner(db_url) as look:
        checked = look.row("checked")
        assert checked.status == "running" and checked.parked_reason is None  # not lost
    done = runner("worker", "--once")  # takes the dead worker's run over and checks again
    assert done.returncode == 0, described(done)
    assert "run checked parked (check_failed): release 2 differs at step 1" in done.stderr, (
        described(done)
    )

    with Runner(db_url) as look:
        rows = {run_id: look.row(run_id) for run_id in ("as-is", "pinned", "checked")}
        assert rows["as-is"].stop_reason == "final"  # continue: release 2 ran it on
        assert rows["pinned"].status == "queued" and rows["pinned"].parked_reason is None
        assert rows["checked"].status == "queued"
        assert rows["checked"].parked_reason == "check_failed"
        assert "has no tool lookup" in (rows["checked"].error or "")
    listed = runner("releases", "--json")
    assert json.loads(listed.stdout) == [
        {
            "agent_name": "refunds",
            "release": "1",
            "running": 0,
            "queued": 1,
            "waiting": 0,
            "parked": 1,
            "check_failed": 1,
        }
    ], described(listed)

    agent_file.write_text(_code("1"))  # a machine of release 1 drains what is left
    drained = runner("worker", "--release", "1", "--drain")
    assert drained.returncode == 0, described(drained)
    with Runner(db_url) as look:
        for run_id in ("pinned", "checked"):
            assert look.row(run_id).stop_reason == "final", run_id
        assert look.releases() == []  # `runner releases`: no release has unfinished runs
    # Each call ran once, by the release that ran that step: none by both, none lost.
    assert sorted(ledger_lines(ledger)) == sorted(
        [
            "1 as-is lookup",
            "2 as-is pay",
            "1 pinned lookup",
            "1 pinned pay",
            "1 checked lookup",
            "1 checked pay",
        ]
    )


def test_the_replay_gate_names_each_run_that_differs(db_url: str, tmp_path: Path) -> None:
    agent_file, ledger = tmp_path / "refunds.py", tmp_path / "ledger.txt"
    agent_file.write_text(_code("1"))
    env = cli_env(db_url, tmp_path) | {"RELEASE_LEDGER": str(ledger)}
    os.environ["RELEASE_LEDGER"] = str(ledger)
    try:
        with Runner(db_url) as setup:
            for run_id in ("r1", "r2"):
                setup.run(f"{agent_file}:agent", "refund order 1042", id=run_id)
                setup.approve(run_id, call=f"{run_id}-2")
                assert setup.resume(run_id).stop_reason == "final"
    finally:
        del os.environ["RELEASE_LEDGER"]

    same = cli("replay", "--sample", "5", "--since", "1h", db_url=db_url, ledger=tmp_path, env=env)
    assert same.returncode == 0, described(same)
    assert "replayed 2 runs (of 5 asked: no more finished runs): 2 agree, 0 differ" in same.stdout

    agent_file.write_text(_code("2"))  # the tool list changed: lookup is now find
    gate = cli("replay", "--sample", "5", db_url=db_url, ledger=tmp_path, env=env)
    assert gate.returncode == 5, described(gate)
    for run_id in ("r1", "r2"):
        assert f"run {run_id} differs at step 1: the run called lookup" in gate.stdout, gate.stdout
    assert "has no tool lookup" in gate.stdout
    assert "2 differ" in gate.stdout
