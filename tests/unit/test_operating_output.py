"""What operating runs prints: plurals, relative times, durations, coloured states (never
with NO_COLOR or off a terminal), `show` with and without --full, the progress observer;
and agent references (malformed ones refused, `module:attr` from the current folder)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runner import BadAgentReference, RequestRefused
from runner.cli import output, run_output
from runner.cli.progress import Progress
from runner.core.actions import ActionKind
from runner.core.agent import load_agent, parse_reference
from runner.core.budgets import Budgets
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind
from runner.core.result import AgentResult
from runner.core.status import RunStatus
from runner.core.stop_reasons import StopReason
from runner.sql.runs import RunRow

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")


def a_row(**changes: object) -> RunRow:
    row = RunRow(
        id="r1",
        agent="agents:agent",
        agent_name="calc",
        release=None,
        task="t",
        budgets=Budgets().as_dict(),
        status=RunStatus.FINISHED,
        stop_reason=StopReason.FINAL,
        output="35",
        error=None,
        wrapped_up=False,
        steps=1,
        tokens=1,
        cost=0.0,
        resumes=1,
        deadline=None,
        cancel_requested=False,
        lease_owner=None,
        lease_epoch=1,
        lease_expires_at=None,
        leased_at=None,
        created_at=NOW - timedelta(minutes=5),
        updated_at=NOW,
        finished_at=NOW - timedelta(minutes=4, seconds=53),
        state="finished",
    )
    return replace(row, **changes)  # type: ignore[arg-type]


def test_plurals() -> None:
    assert [output.plural(n, "step") for n in (0, 1, 2)] == ["0 steps", "1 step", "2 steps"]


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0.44, "0.4s"), (9.96, "10.0s"), (12.7, "12s"), (247, "4m07s"), (7380, "2h03m"),
     (273600, "3d04h"), (-1, "0.0s")],
)  # fmt: skip
def test_durations(seconds: float, shown: str) -> None:
    assert output.duration(seconds) == shown


def test_relative_times() -> None:
    assert output.ago(NOW - timedelta(seconds=0.5), NOW) == "just now"
    assert output.ago(NOW - timedelta(minutes=3), NOW) == "3m00s ago"
    assert output.ago(None, NOW) == "-"


def test_states_are_coloured_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [a_row(), a_row(id="r2", status=RunStatus.RUNNING, state="stalled", stop_reason=None)]
    plain = run_output.runs_table(rows, NOW)
    assert "\x1b" not in plain  # captured stdout, like a pipe
    monkeypatch.setenv("FORCE_COLOR", "1")
    coloured = run_output.runs_table(rows, NOW)
    assert "\x1b[32mfinished" in coloured and "\x1b[1;31mstalled" in coloured
    monkeypatch.setenv("NO_COLOR", "1")
    no_colour = run_output.runs_table(rows, NOW)
    assert "\x1b[32m" not in no_colour and "\x1b[1;31m" not in no_colour
    assert "\x1b[1mstalled" in no_colour  # bold is no colour: NO_COLOR keeps it


def test_the_list_has_relative_times_durations_and_states() -> None:
    stalled = a_row(
        id="r2",
        status=RunStatus.RUNNING,
        state="stalled",
        stop_reason=None,
        finished_at=None,
        lease_owner="host:1:2:3",
        last_seen_at=NOW - timedelta(seconds=90),
    )
    header, first, second = run_output.runs_table([a_row(), stalled], NOW).splitlines()
    assert header.split() == [
        "ID", "STATUS", "STOP", "STEPS", "TOKENS", "AGENT", "RELEASE", "QUEUE", "CREATED", "TIME",
        "WORKER",
    ]  # fmt: skip
    assert first.split() == ["r1", "finished", "final", "1", "1", "calc", "-", "default", "5m00s",
                             "ago", "7.0s", "-"]  # fmt: skip
    assert second.split()[:3] == ["r2", "stalled", "-"]
    assert second.endswith("5m00s  host:1:2:3, seen 1m30s ago")


def journal_of(observation: str) -> list[Entry]:
    counters = Counters(steps=1)
    return [
        Entry(EntryKind.TASK, 0, Counters(), content="t"),
        Entry(EntryKind.ACTION, 1, counters, tool="look", args={"q": "x" * 120},
              action_type=ActionKind.TOOL, idempotency_key="r1-1"),
        Entry(EntryKind.OBSERVATION, 1, counters, content=observation, tool="look"),
        Entry(EntryKind.REVIVED, 1, counters, content="revived after max_steps: max_steps 1 -> 5"),
        Entry(EntryKind.FINAL, 2, counters, content="35"),
    ]  # fmt: skip


def test_show_cuts_observations_unless_full() -> None:
    long = "a" * 150 + "\nsecond line"
    result = AgentResult(StopReason.FINAL, "35", 2, [], tokens=1)
    cut = run_output.render_run(result, a_row(), journal_of(long), NOW)
    assert "  <- look [ok]  " + "a" * 97 + "..." in cut
    assert "second line" not in cut
    whole = run_output.render_run(result, a_row(), journal_of(long), NOW, full=True)
    assert "  <- look [ok]  " + "a" * 150 + "\n          second line" in whole
    assert '"q": "' + "x" * 120 + '"' in whole and "x" * 120 not in cut
    assert "  == revived after max_steps: max_steps 1 -> 5" in cut


def test_show_says_no_release_none_and_counts_in_the_singular() -> None:
    result = AgentResult(StopReason.FINAL, "35", 1, [], tokens=1)
    shown = run_output.render_run(result, a_row(), journal_of("ok"), NOW)
    assert "agent     agents:agent  (calc)\n" in shown
    assert "None" not in shown
    assert "counters  1 step, 1 token, cost unknown (no price), 1 resume\n" in shown
    released = run_output.render_run(result, a_row(release="2.0"), journal_of("ok"), NOW)
    assert "agent     agents:agent  (calc, release 2.0)\n" in released
    nameless = run_output.render_run(result, a_row(agent_name=None), journal_of("ok"), NOW)
    assert "agent     agents:agent\n" in nameless


def test_show_says_why_a_run_is_stalled_and_when_its_holder_was_seen() -> None:
    row = a_row(
        status=RunStatus.RUNNING,
        state="stalled",
        stop_reason=None,
        finished_at=None,
        lease_owner="host:1:2:3",
        leased_at=NOW - timedelta(minutes=5),
        last_seen_at=NOW - timedelta(minutes=2),
    )
    result = AgentResult(None, None, 1, [], status="running")
    journal = journal_of("ok")[:3]
    shown = run_output.render_run(result, row, journal, NOW, stalled="its lease expired")
    assert "status    stalled (its lease expired; a worker or `runner resume r1` takes it" in shown
    assert "worker    host:1:2:3 since 2026-12-01 11:55:00 UTC, last seen 2m00s ago" in shown


def test_the_final_line_has_steps_tokens_cost_and_time(capsys: pytest.CaptureFixture[str]) -> None:
    run_output.stopped(
        AgentResult(StopReason.MAX_STEPS, None, 1, [], tokens=1, cost=0.5, run_id="x"), 2.5
    )
    assert capsys.readouterr().err == (
        "stopped: max_steps after 1 step, 1 token, cost 0.5, 2.5s (run x)\n"
    )


def test_progress_off_a_terminal_prints_the_plain_step_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    progress = Progress()
    assert not progress.live  # pytest's stderr is no terminal
    with progress:
        for entry in journal_of("ok"):
            progress("r1", entry)
    assert capsys.readouterr().err == "step 1  tool look  ok  tokens 0\nstep 2  final  tokens 0\n"


def test_progress_on_a_terminal_shows_the_call_in_flight() -> None:
    progress = Progress(live=True)
    with progress:
        progress("r1", journal_of("ok")[1])
        shown = progress.__rich__()
    line = str(shown.text)
    assert line.startswith('step 1  look(q="' + "x" * 34 + "...)  running  "), line
    assert line.endswith("s")  # the time the call has taken so far


# -- agent references ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "ref", ["no-colon", "a:", ":agent", "two words:agent", "mod:not-an-attr", "pkg..mod:agent"]
)
def test_a_malformed_reference_is_a_refused_request(ref: str) -> None:
    with pytest.raises(BadAgentReference, match="must look like module:attr") as raised:
        load_agent(ref)
    assert isinstance(raised.value, RequestRefused)


def test_well_formed_references() -> None:
    assert parse_reference("pkg.mod:agent") == ("pkg.mod", "agent", False)
    assert parse_reference("dir/agent.py:make") == ("dir/agent.py", "make", True)
    assert parse_reference("C:/x/agent.py:agent") == ("C:/x/agent.py", "agent", True)


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder holding a module of its own, the current directory, not on sys.path."""
    (tmp_path / "here_agent.py").write_text(
        "from runner import Agent\nagent = Agent(lambda t: {'type': 'final', 'content': 'hi'})\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    yield tmp_path
    sys.modules.pop("here_agent", None)


def test_a_module_reference_imports_from_the_current_folder(elsewhere: Path) -> None:
    agent = load_agent("here_agent:agent")
    assert agent.model([]) == {"type": "final", "content": "hi"}
    assert agent.reference() == "here_agent:agent"
    assert sys.path[0] == str(elsewhere)  # first, as `python -m` puts it


def test_a_cost_is_unknown_when_tokens_were_spent_at_no_recorded_cost() -> None:
    assert output.cost_text(0.0, 120) == "cost unknown (no price)"
    assert output.cost_text(0.0, 0) == "cost 0"
    assert output.cost_text(0.0125, 120) == "cost 0.0125"
