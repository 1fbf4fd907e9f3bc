"""What a user types or a model says cannot turn a command against its user: an empty run id
is a usage error, not "the only run"; terminal escape sequences in a run are printed
escaped, never sent to the terminal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from runner import Agent, Runner, tool
from runner.cli import main

from .agents import LEDGER_VARIABLE
from .harness import agent_ref


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


# -- empty run ids --------------------------------------------------------------------------


@pytest.fixture
def one_run(db_url: str, tmp_path: Path) -> str:
    """A database holding one queued run, `only-run`."""
    done = CliRunner().invoke(
        main,
        ["submit", agent_ref("ledgered"), "t", "--id", "only-run", "--db", db_url],
        env={LEDGER_VARIABLE: str(tmp_path)},
        catch_exceptions=False,
    )
    assert done.exit_code == 0, done.output
    return db_url


@pytest.mark.parametrize("run_id", ["", " ", "\t\n"], ids=["empty", "space", "whitespace"])
@pytest.mark.parametrize(
    "args",
    [["cancel"], ["show"], ["resume"], ["show", "--json"], ["export", "--run"]],
    ids=lambda a: " ".join(a),
)
def test_an_empty_run_id_is_a_usage_error(one_run: str, args: list[str], run_id: str) -> None:
    result = invoke(*args, run_id, "--db", one_run)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "run id" in lines[0] and "empty" in lines[0], result.stderr
    assert result.stdout == ""
    with Runner(one_run) as runner:
        row = runner.row("only-run")
    assert (row.status, row.cancel_requested) == ("queued", False)


def test_the_library_refuses_an_empty_id_too(one_run: str) -> None:
    with Runner(one_run) as runner:
        for method in (runner.cancel, runner.get, runner.row, runner.resume):
            with pytest.raises(ValueError, match="empty"):
                method("  ")
        assert runner.row("only-run").cancel_requested is False


# -- escape sequences -----------------------------------------------------------------------

# Clear the screen, set the window title, ring the bell, move back over the line, a CSI in
# its one-byte C1 form, and DEL.
HOSTILE = "\x1b[2J\x1b]0;owned\x07 done\rX \x9b31m \x7f"
RAW = ["\x1b", "\x07", "\r", "\x9b", "\x7f"]
SHOWN = ["\\x1b[2J", "\\x1b]0;owned\\x07", "\\r", "\\x9b31m", "\\x7f"]


@tool(idempotent=True)
def echo(text: str) -> str:
    return f"echo {text} {HOSTILE}"


def hostile_model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    if len(transcript) == 1:
        return {"type": "tool", "name": "echo", "args": {"text": "hi"}}
    if len(transcript) == 3:
        return {"type": "tool", "name": f"no{HOSTILE}such", "args": {}}
    return {"type": "final", "content": f"line one {HOSTILE}\nline two"}


def failing_model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    raise RuntimeError(f"provider said {HOSTILE}")


def test_show_prints_control_characters_escaped(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.run(Agent(hostile_model, {"echo": echo}), f"task {HOSTILE}", id="hostile")
        runner.run(
            Agent(failing_model, {}, model_retries=0), "fails", id="hostile-error", max_steps=2
        )
    for run_id in ("hostile", "hostile-error"):
        shown = invoke("show", run_id, "--db", db_url)
        assert shown.exit_code == 0, shown.output
        for raw in RAW:
            assert raw not in shown.stdout, (raw, shown.stdout)
        for escaped in SHOWN:
            assert escaped in shown.stdout, (escaped, shown.stdout)
    lines = invoke("show", "hostile", "--db", db_url).stdout.splitlines()
    assert f"user      task {SHOWN[0]}" in lines[lines.index("") + 1]
    # The answer keeps its own lines, as before: continuation lines indented.
    answer = next(i for i, line in enumerate(lines) if line.startswith("answer    "))
    assert lines[answer + 1] == "          line two"
    # --json keeps everything exactly (JSON escapes control characters itself).
    as_json = invoke("show", "hostile", "--json", "--db", db_url).stdout
    assert "\x1b" not in as_json and "\\u001b[2J" in as_json


def test_tables_print_control_characters_escaped(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.run(Agent(hostile_model, {"echo": echo}), f"task {HOSTILE}", id="hostile")
    listed = invoke("sql", "SELECT task, output FROM runs", "--db", db_url)
    assert listed.exit_code == 0, listed.output
    for raw in RAW:
        assert raw not in listed.stdout
    assert SHOWN[0] in listed.stdout
