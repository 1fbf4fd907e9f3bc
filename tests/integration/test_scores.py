"""Scores of runs on SQLite and PostgreSQL (and the in-memory store, held to the same
outcomes): a scorer's claim and its fenced result, a lapsed claim started once more and a
third start refused, a person's score replacing a scorer's; each score's mean and interval
per release with a planted drop flagged and noise not; the CLI, HTTP and Python paths; a
note sealed at rest as every payload is.
Scorers killed with SIGKILL: tests/acceptance/test_scores.py."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import text
from starlette.testclient import TestClient

from runner import Agent, BadScore, Runner, RunNotFound, ScoredRun
from runner.cli import main
from runner.core.clock import ManualClock
from runner.history import History
from runner.store.payloads import ENVELOPE_PREFIX
from runner.store.scores import CRASHED_NOTE
from runner.testing import FunctionModel, final
from runner.ui import make_app

from .payload_agents import SECRET, Hide
from .test_store_contract import on_database, on_memory

SCORER_CALLS: list[str] = []


def graded(run: ScoredRun) -> float:
    SCORER_CALLS.append(run.id)
    return 0.5 if run.output == "ok" else 0.0


SCORED = Agent(FunctionModel(lambda t: final("ok")), name="graded", release="1", scorers=[graded])


def scenario(runner: Runner, clock: ManualClock) -> list[Any]:
    store, seen = runner.store, []

    def row(run_id: str) -> tuple[Any, ...]:
        [found] = runner.scores(run_id)
        return (str(found.status), found.value, found.note, str(found.source), found.attempts)

    # A run of an agent with scorers: its scorer's row waits, due once the run has ended.
    runner.run(SCORED, "one", id="s1")
    seen.append([(d.run_id, d.name) for d in store.due_scores(10)])
    held = store.claim_score("s1", "graded", 30)
    seen.append((held and (held.epoch, held.attempts), store.claim_score("s1", "graded", 30)))
    seen.append(store.due_scores(10))
    clock.advance(31)  # its worker died: the claim lapses, the next one starts it again
    again = store.claim_score("s1", "graded", 30)
    assert held is not None and again is not None
    seen.append((again.epoch, again.attempts))
    seen.append((store.finish_score(held, 0.1, None), store.finish_score(again, 0.5, "n")))
    seen.append(row("s1"))
    runner.score("s1", "graded", 0.9, note="a person's")  # replaces the scorer's
    seen.append(row("s1"))

    # Started twice, its worker dead both times: the third claim fails it, never starts it.
    runner.run(SCORED, "two", id="s2")
    for _ in range(2):
        assert store.claim_score("s2", "graded", 30) is not None
        clock.advance(31)
    seen.append((store.claim_score("s2", "graded", 30), row("s2")))

    # Run here (as a worker would): once, whoever asks again.
    runner.run(SCORED, "three", id="s3")
    SCORER_CALLS.clear()
    runner.run_scorers("s3", SCORED)
    runner.run_scorers("s3", SCORED)
    seen.append((SCORER_CALLS[:], row("s3")))
    for bad in (lambda: runner.score("nope", "x", 1), lambda: runner.score("s3", "x", math.nan),
                lambda: runner.score("s3", "9 lives", 1)):  # fmt: skip
        with pytest.raises((RunNotFound, BadScore)) as refused:
            bad()
        seen.append((type(refused.value).__name__, str(refused.value)))
    return seen


def test_scores_keep_the_rules_on_every_store(db_url: str) -> None:
    with on_memory() as (runner, clock):
        memory = scenario(runner, clock)
    with on_database(db_url) as (runner, clock):
        database = scenario(runner, clock)
    assert database == memory
    assert database[:8] == [
        [("s1", "graded")],
        ((1, 1), None),
        [],
        (2, 2),
        (False, True),  # the stale claim writes nothing
        ("scored", 0.5, "n", "scorer", 2),
        ("scored", 0.9, "a person's", "manual", 2),
        (None, ("failed", None, CRASHED_NOTE, "scorer", 2)),
    ]
    assert database[8] == (["s3"], ("scored", 0.5, None, "scorer", 1))
    assert [name for name, _ in database[9:]] == ["RunNotFound", "BadScore", "BadScore"]


# -- per release ---------------------------------------------------------------------------

# Scores of three releases: release 2's mean fell by 0.3 (a planted drop), release 3's by
# 0.02 from release 2's (noise: the same spread, a fall chance explains).
RELEASES = {
    "1": [0.9, 0.8, 1.0, 0.9, 0.85, 0.95, 0.8, 1.0, 0.9, 0.9],
    "2": [0.6, 0.5, 0.7, 0.6, 0.55, 0.65, 0.5, 0.7, 0.6, 0.6],
    "3": [0.7, 0.4, 0.6, 0.5, 0.65, 0.55, 0.6, 0.45, 0.6, 0.75],
}


def test_a_planted_drop_is_flagged_per_release_and_noise_is_not(db_url: str) -> None:
    with Runner(db_url) as runner:
        for release, values in RELEASES.items():
            agent = Agent(FunctionModel(lambda t: final("ok")), name="support", release=release)
            for n, value in enumerate(values):
                run_id = f"r{release}-{n}"
                runner.run(agent, "task", id=run_id)
                runner.score(run_id, "quality", value)
    with History(db_url) as history:
        groups = {g.label: g for g in history.stats(by="release")}
    assert [g for g in groups] == ["support 1", "support 2", "support 3"]
    two = groups["support 2"].scores[0]
    assert (two.name, two.runs, round(two.mean, 3)) == ("quality", 10, 0.6)
    assert two.low is not None and two.high is not None and two.low < 0.6 < two.high
    [drop] = groups["support 2"].drops
    assert (drop.name, round(drop.previous_mean, 3), drop.p_value < 0.001) == ("quality", 0.9, True)
    assert groups["support 3"].drops == []  # 0.6 -> 0.58: noise
    assert groups["support 1"].drops == []

    # The command shows the same, flagged as it flags a stop reason's rise.
    shown = CliRunner().invoke(main, ["stats", "--by", "release", "--db", db_url])
    assert shown.exit_code == 0, shown.output
    [line] = [line for line in shown.output.splitlines() if line.startswith("support 2  q")]
    assert line.split() == ["support", "2", "quality", "10", "0.600", "v", "0.549", "..", "0.651"]
    assert "support 2: quality 0.900 -> 0.600" in shown.output
    as_json = CliRunner().invoke(main, ["stats", "--by", "release", "--json", "--db", db_url])
    [flagged] = [g for g in json.loads(as_json.output)["groups"] if g["score_drops"]]
    assert flagged["release"] == "2" and flagged["score_drops"][0]["name"] == "quality"


def test_a_score_is_kept_from_the_command_line_and_over_http(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.run(SCORED, "task", id="cli-1")
    kept = CliRunner().invoke(
        main, ["score", "cli-", "helpful", "1", "--note", "thanks", "--json", "--db", db_url]
    )
    assert kept.exit_code == 0, kept.output
    assert json.loads(kept.output) | {"scored_at": None} == {
        "run_id": "cli-1", "name": "helpful", "status": "scored", "value": 1.0,
        "note": "thanks", "source": "manual", "attempts": 0, "scored_at": None,
    }  # fmt: skip
    refused = CliRunner().invoke(main, ["score", "cli-1", "helpful", "inf", "--db", db_url])
    assert refused.exit_code == 2 and "finite number" in refused.output

    token = {"authorization": "Bearer t-9"}
    with TestClient(make_app(db_url, token="t-9"), base_url="http://127.0.0.1:8780") as client:
        body = {"name": "helpful", "value": 0, "note": "came back"}
        assert client.post("/api/runs/cli-1/scores", json=body).status_code == 401
        made = client.post("/api/runs/cli-1/scores", json=body, headers=token)
        assert made.status_code == 201, made.text
        assert (made.json()["value"], made.json()["note"]) == (0.0, "came back")
        bad = client.post("/api/runs/cli-1/scores", json={"name": "x"}, headers=token)
        assert bad.status_code == 400 and "'value'" in bad.json()["error"]
        missing = client.post("/api/runs/nope/scores", json=body, headers=token)
        assert missing.status_code == 404
        listed = client.get("/api/runs/cli-1/scores", headers=token).json()["scores"]
        assert [(s["name"], s["status"], s["value"]) for s in listed] == [
            ("graded", "pending", None),  # no worker has run the agent's scorer yet
            ("helpful", "scored", 0.0),
        ]


def test_a_scores_note_is_a_payload_sealed_at_rest(db_url: str) -> None:
    with Runner(db_url, codecs=[Hide()]) as runner:
        runner.run(SCORED, "task", id="sealed")
        runner.score("sealed", "helpful", 1, note=f"said {SECRET}")
        with runner.engine.connect() as connection:
            at_rest = connection.execute(
                text("SELECT note FROM scores WHERE name = 'helpful'")
            ).scalar_one()
        assert SECRET not in at_rest and at_rest.startswith(ENVELOPE_PREFIX)
        assert [s.note for s in runner.scores("sealed")] == [None, f"said {SECRET}"]


def test_runner_show_prints_a_runs_scores(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.run(SCORED, "task", id="shown-1")
        runner.score("shown-1", "helpful", 0.5, note="half right")
    # The plain read (no SQLAlchemy) where one opens, else through a Runner: the same lines.
    shown = CliRunner().invoke(main, ["show", "shown-1", "--db", db_url])
    assert shown.exit_code == 0, shown.output
    assert "score     graded pending (scorer)" in shown.output
    assert "score     helpful 0.5 (manual): half right" in shown.output
    as_json = CliRunner().invoke(main, ["show", "shown-1", "--json", "--db", db_url])
    scores = json.loads(as_json.output)["scores"]
    assert [(s["name"], s["status"], s["value"], s["note"]) for s in scores] == [
        ("graded", "pending", None, None),
        ("helpful", "scored", 0.5, "half right"),
    ]


def test_runner_export_writes_each_runs_scores(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.run(SCORED, "task", id="out-1")
        runner.run(SCORED, "task", id="out-2")
        runner.score("out-1", "helpful", 1, note="yes")
    exported = CliRunner().invoke(main, ["export", "--db", db_url])
    assert exported.exit_code == 0, exported.output
    lines = [json.loads(line) for line in exported.output.splitlines() if line.startswith("{")]
    by_run = {line["id"]: line["scores"] for line in lines}
    assert [(s["name"], s["status"], s["value"], s["note"]) for s in by_run["out-1"]] == [
        ("graded", "pending", None, None),
        ("helpful", "scored", 1.0, "yes"),
    ]
    assert [s["name"] for s in by_run["out-2"]] == ["graded"]
