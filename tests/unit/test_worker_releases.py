"""A worker of release 2 checks a run of release 1 in a `check` queue before it runs it on:
one that agrees goes on at once on the same claim, one that differs is parked (on the
in-memory store; the SQL, the processes and a SIGKILL mid-check: tests/acceptance/
test_releases.py)."""

from __future__ import annotations

import logging
import sys

import pytest

from runner.core.agent import load_agent
from runner.service.worker import Worker

from .release_agents import REF
from .store_support import memory_runner


def deploy(release: str, lookup: str) -> None:
    """The agent's code as `release` has it (its lookup tool named `lookup`)."""
    load_agent(REF)  # the loader imports the file by its path: set the module it made
    for module in list(sys.modules.values()):
        if getattr(module, "__file__", None) == REF.rsplit(":", 1)[0]:
            module.RELEASE, module.LOOKUP = release, lookup  # type: ignore[attr-defined]


def test_a_run_that_agrees_goes_on_at_once(caplog: pytest.LogCaptureFixture) -> None:
    runner, store, _ = memory_runner()
    runner.set_older_releases("checked", "check")
    deploy("1", "lookup")
    runner.submit(REF, "refund order 1042", id="same", queue="checked")
    Worker(store=store, once=True, poll=0.01).serve()  # it waits for the payment's approval
    runner.approve("same", call="same-2")

    deploy("2", "lookup")  # release 2 takes the recorded steps the same way: runs on
    with caplog.at_level(logging.INFO, logger="runner.worker"):
        Worker(store=store, once=True, poll=0.01).serve()
    assert runner.row("same").stop_reason == "final"
    said = [r.getMessage() for r in caplog.records if "checked against" in r.getMessage()]
    assert said == [
        "run same of release 1 checked against release 2: agrees over 2 steps, running it on"
    ]


def test_a_run_that_differs_is_parked_for_its_own_release() -> None:
    runner, store, _ = memory_runner()
    runner.set_older_releases("checked", "check")
    deploy("1", "lookup")
    runner.submit(REF, "refund order 1042", id="r", queue="checked")
    Worker(store=store, once=True, poll=0.01).serve()
    runner.approve("r", call="r-2")

    deploy("2", "find")  # the lookup tool renamed: step 1 no longer replays
    Worker(store=store, once=True, poll=0.01).serve()
    row = runner.row("r")
    assert (str(row.status), row.parked_reason) == ("queued", "check_failed")
    assert "differs at step 1" in (row.error or "") and "has no tool lookup" in (row.error or "")
    assert [(r.release, r.parked, r.check_failed) for r in runner.releases()] == [("1", 1, 1)]

    Worker(store=store, once=True, poll=0.01, release="2").serve()  # a given release 2 too
    assert runner.row("r").parked_reason == "check_failed"  # passed over, not taken
    deploy("1", "lookup")
    Worker(store=store, poll=0.01, release="1", drain=True).serve()
    assert runner.row("r").stop_reason == "final" and runner.releases() == []


def test_a_check_that_cannot_replay_the_run_parks_it(monkeypatch: pytest.MonkeyPatch) -> None:
    runner, store, _ = memory_runner()
    runner.set_older_releases("checked", "check")
    deploy("1", "lookup")
    runner.submit(REF, "refund order 1042", id="r", queue="checked")
    Worker(store=store, once=True, poll=0.01).serve()
    runner.approve("r", call="r-2")

    def broken(*args: object) -> None:
        raise RuntimeError("the replay itself broke")

    monkeypatch.setattr("runner.service.replay.replay_run", broken)
    deploy("2", "lookup")
    Worker(store=store, once=True, poll=0.01).serve()  # parked once, not failed for ever
    row = runner.row("r")
    assert (str(row.status), row.parked_reason) == ("queued", "check_failed")
    assert "cannot replay it: RuntimeError: the replay itself broke" in (row.error or "")
