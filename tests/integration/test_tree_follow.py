"""Following a tree of runs (issue 40, point 6), on both databases: `Runner.tree_events`,
`runner tail --follow --tree` and the SSE stream's `?tree=true` give every run's entries,
each naming its run; a follow of an orchestrator alone no longer ends at its first
sub-agent call (its run waits for its children, not for a person)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from starlette.testclient import TestClient

from runner import Runner, Worker
from runner.cli import main
from runner.service.events import Event
from runner.ui import make_app
from tests.conditions import GENEROUS

LEAD = f"{Path(__file__).resolve().parents[2] / 'examples' / 'research.py'}:lead"


def _followed(db_url: str, tree: bool, into: list[Any]) -> threading.Thread:
    """A follower of run `lead` in a thread of its own, started before any worker."""
    with Runner(db_url) as runner:
        runner.submit(LEAD, "Is tea good for you?", id="lead")

    def follow() -> None:
        with Runner(db_url) as runner:
            if tree:
                stream: Any = runner.tree_events("lead", follow=True, until_waiting=True)
            else:
                stream = runner.events("lead", follow=True, until_waiting=True)
            into.extend(stream)

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    return follower


def _served(db_url: str, follower: threading.Thread) -> None:
    Worker(db_url, once=True, poll=0.05, concurrency=3).serve()
    follower.join(GENEROUS)
    assert not follower.is_alive(), "the follow did not end with the tree"


def test_a_follow_of_the_orchestrator_goes_on_past_its_sub_agent_calls(db_url: str) -> None:
    seen: list[Event] = []
    _served(db_url, _followed(db_url, False, seen))
    assert {event.run_id for event in seen} == {"lead"}
    assert str(seen[-1].entry.kind) == "final"  # it ended with the run, not at its first wait
    assert [event.position for event in seen] == list(range(len(seen)))


def test_a_tree_follow_gives_every_runs_entries_each_naming_its_run(db_url: str) -> None:
    seen: list[Event] = []
    _served(db_url, _followed(db_url, True, seen))
    with Runner(db_url) as runner:
        children = {tree.row.id for tree in runner.tree("lead").walk()} - {"lead"}
        journals = {run: runner.journal(run) for run in {"lead", *children}}
    assert len(children) == 2
    by_run: dict[str, list[Event]] = {}
    for event in seen:
        by_run.setdefault(event.run_id, []).append(event)
    assert set(by_run) == {"lead", *children}
    for run, events in by_run.items():  # each run's entries once, in order, all of them
        assert [event.position for event in events] == list(range(len(journals[run])))
        assert [event.entry for event in events] == journals[run]

    # The same tree, finished, through the CLI and the SSE stream.
    done = CliRunner().invoke(main, ["tail", "lead", "--tree", "--db", db_url])
    assert done.exit_code == 0, done.output
    for run in ("lead", *children):
        assert f"[{run}] user" in done.output
    with TestClient(make_app(db_url), base_url="http://127.0.0.1:8780") as client:
        response = client.get("/api/runs/lead/events", params={"tree": "true"})
    blocks = [b for b in response.text.replace("\r\n", "\n").split("\n\n") if "data:" in b]
    entries = [json.loads(b.split("data: ", 1)[1]) for b in blocks if "event: entry" in b]
    assert {entry["run_id"] for entry in entries} == {"lead", *children}
    assert len(entries) == sum(len(journal) for journal in journals.values())
    assert not any(line.startswith("id:") for b in blocks for line in b.splitlines())
    assert "event: end" in blocks[-1]


def test_a_tree_follow_ends_where_a_run_below_waits_for_a_person(db_url: str) -> None:
    """The root waits for its child, the child for an approval: the tree can go no further
    without a person; tail --follow --tree ends there, exit 4, with the child's commands."""
    lead = f"{Path(__file__).resolve().with_name('tree_wait_agents.py')}:lead"
    with Runner(db_url) as runner:
        runner.submit(lead, "pay", id="payer")
    Worker(db_url, once=True, poll=0.05).serve()
    with Runner(db_url) as runner:
        (child,) = {tree.row.id for tree in runner.tree("payer").walk()} - {"payer"}
        assert runner.row(child).status == "waiting"
    for args in (["--follow", "--tree"], []):
        done = CliRunner().invoke(main, ["tail", "payer", *args, "--db", db_url])
        assert done.exit_code == 4, (args, done.output)
        assert f"runner approve {child} --call" in done.stderr, done.stderr
