"""The `runner` command: every command and flag, exit codes, --json shapes, and errors.

Most tests go through click's CliRunner (in this process, quick); those about what a real
process prints (progress on stderr, the answer on stdout, errors with no traceback) start
the installed `runner` script. Exit codes: 0 final answer, 3 any other stop, 1 errors, 2
usage errors.
"""

from __future__ import annotations

import json
import re
import traceback
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from runner import run_agent
from runner.cli import main
from runner.service.runner import Runner

from .agents import LEDGER_VARIABLE, TOKENS_PER_CALL, ledgered
from .harness import (
    AGENTS,
    KILLED,
    agent_ref,
    cli,
    cli_env,
    described,
    model_calls,
    one_line_error,
    run_row,
)

ROOT = Path(__file__).resolve().parents[2]
ANSWER = "balance 12; squares 25, 144"
RESULT_KEYS = {"id", "status", "stop_reason", "output", "steps", "tokens", "cost"}
SECRET = "SECRETPW"
UNREACHABLE = f"postgresql+psycopg://user:{SECRET}@127.0.0.1:1/x"


def invoke(ledger: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    """`runner ARGS` in this process; an exception other than an exit is a test failure."""
    env = {LEDGER_VARIABLE: str(ledger), **(env or {})}
    result = CliRunner().invoke(main, list(args), env=env, prog_name="runner")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        trace = "".join(traceback.format_exception(result.exception))
        pytest.fail(f"runner {' '.join(args)} raised:\n{trace}")
    return result


def run_json(ledger: Path, db_url: str, *args: str) -> tuple[int, dict[str, Any]]:
    result = invoke(ledger, *args, "--db", db_url, "--json")
    assert result.exit_code in (0, 3), result.output
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return result.exit_code, data


def start_run(ledger: Path, db_url: str, run_id: str, *flags: str, agent: str = "ledgered") -> int:
    result = invoke(ledger, "run", agent_ref(agent), run_id, "--id", run_id, "--db", db_url, *flags)
    return result.exit_code


def crashed_run(ledger: Path, db_url: str, run_id: str, fault: str) -> None:
    killed = cli(
        "run", agent_ref("ledgered"), run_id, "--id", run_id,
        db_url=db_url, ledger=ledger, fault=fault,
    )  # fmt: skip
    assert killed.returncode == KILLED, described(killed)


# -- help and documentation ------------------------------------------------------------------


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in sorted(group.commands.items()):
        yield (*path, name)
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))


COMMANDS = list(_commands(main))


def test_the_cli_has_the_commands_of_the_issue() -> None:
    expected = {
        ("run",),
        ("resume",),
        ("show",),
        ("list",),
        ("cancel",),
        ("db",),
        ("db", "upgrade"),
    }
    assert expected <= set(COMMANDS)


@pytest.mark.parametrize("path", [(), *COMMANDS], ids=lambda p: " ".join(p) or "runner")
def test_every_command_and_group_has_help(path: tuple[str, ...]) -> None:
    command: click.Command = main
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    assert command.help and command.help.strip(), f"runner {' '.join(path)} has no docstring"
    result = CliRunner().invoke(main, [*path, "--help"], prog_name="runner")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"Usage: runner {' '.join(path)}".rstrip())
    summary = command.help.strip().split("\n\n")[0]
    assert " ".join(summary.split()) in " ".join(result.stdout.split())
    for param in command.params:
        if isinstance(param, click.Option) and not param.hidden:
            assert any(opt in result.stdout for opt in param.opts), param.opts


def test_every_command_is_in_the_manual() -> None:
    """Each command is named in the README or a page of docs/ besides the generated cli.md."""
    pages = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    readme = "".join(p.read_text(encoding="utf-8") for p in pages if p.name != "cli.md")
    for path in COMMANDS:
        command: click.Command = main
        for name in path:
            assert isinstance(command, click.Group)
            command = command.commands[name]
        if not isinstance(command, click.Group):
            assert f"`runner {' '.join(path)}" in readme, f"the manual does not document {path}"


def test_version() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert re.fullmatch(r"runner, version \S+\n", result.stdout)


# -- run ---------------------------------------------------------------------------------------


def test_run_prints_id_progress_and_answer(db_url: str, ledger: Path) -> None:
    """A real process: the id first, one line per step on stderr, the answer alone on stdout."""
    result = cli("run", agent_ref("ledgered"), "a task", db_url=db_url, ledger=ledger)
    assert result.returncode == 0, described(result)
    assert result.stdout == ANSWER + "\n"
    lines = result.stderr.splitlines()
    first = re.fullmatch(r"run ([0-9a-z]{16})", lines[0])
    assert first, lines[0]
    run_id = first.group(1)
    tools = ["deposit", "square", "notify"] * 2
    expected = [
        f"step {i}  tool {tool}  ok  tokens {i * TOKENS_PER_CALL}"
        for i, tool in enumerate(tools, start=1)
    ]
    expected.append(f"step 7  final  tokens {7 * TOKENS_PER_CALL}")
    assert lines[1:8] == expected
    assert len(lines) == 9
    assert re.fullmatch(
        rf"stopped: final after 7 steps, 70 tokens, cost 0.007, [0-9.]+s \(run {run_id}\)",
        lines[8],
    ), lines[8]
    assert "Traceback" not in result.stderr
    row = run_row(db_url, run_id)
    assert (row["status"], row["stop_reason"], row["output"]) == ("finished", "final", ANSWER)


def test_progress_marks_failed_steps_and_a_stop_exits_3(db_url: str, ledger: Path) -> None:
    result = invoke(ledger, "run", agent_ref("failing"), "t", "--db", db_url)
    assert result.exit_code == 3, result.output
    assert result.stdout == ""  # no answer
    lines = result.stderr.splitlines()
    assert lines[0].startswith("run ")
    assert lines[1:4] == [f"step {i}  tool broken  error  tokens {10 * i}" for i in (1, 2, 3)]
    assert lines[4].startswith("stopped: tool_errors after 3 steps, 30 tokens")


def test_run_json(db_url: str, ledger: Path) -> None:
    code, data = run_json(ledger, db_url, "run", agent_ref("ledgered"), "t", "--id", "j1")
    assert code == 0
    assert set(data) >= RESULT_KEYS
    assert data["id"] == "j1"
    assert (data["status"], data["stop_reason"], data["output"]) == ("finished", "final", ANSWER)
    assert (data["steps"], data["tokens"]) == (7, 70)
    assert data["cost"] == pytest.approx(0.007)


BUDGETS = [
    # flag, value, agent, stop reason, steps, the stored budget
    ("--max-steps", "2", "ledgered", "max_steps", 2, 2),
    ("--max-tokens", "25", "ledgered", "token_budget", 3, 25),
    ("--max-consecutive-errors", "0", "failing", "tool_errors", 1, 0),
    ("--max-repeats", "0", "ledgered", "repeated_call", 1, 0),
    ("--max-seconds", "0", "ledgered", "time_budget", 0, 0.0),
    ("--max-cost", "0.0025", "ledgered", "cost_budget", 3, 0.0025),
]


@pytest.mark.parametrize("budget", BUDGETS, ids=[b[0] for b in BUDGETS])
def test_each_budget_flag_stops_the_run_with_exit_3(
    budget: tuple[str, str, str, str, int, float], db_url: str, ledger: Path
) -> None:
    flag, value, agent, reason, steps, stored = budget
    code, data = run_json(ledger, db_url, "run", agent_ref(agent), "t", "--id", "b", flag, value)
    assert code == 3
    assert (data["status"], data["stop_reason"], data["steps"]) == ("finished", reason, steps)
    assert data["output"] is None
    _, shown = run_json(ledger, db_url, "show", "b")
    assert shown["budgets"][flag[2:].replace("-", "_")] == stored


@pytest.mark.parametrize("flag", [b[0] for b in BUDGETS])
@pytest.mark.parametrize("value", ["-1", "lots"])
def test_an_invalid_budget_is_a_usage_error(flag: str, value: str, ledger: Path) -> None:
    db = f"sqlite:///{ledger / 'never.db'}"
    result = invoke(ledger, "run", agent_ref("ledgered"), "t", flag, value, "--db", db)
    assert result.exit_code == 2
    assert flag in one_line_error(result.stderr)
    assert not (ledger / "never.db").exists()  # refused before touching anything


def test_an_invalid_budget_in_a_real_process(ledger: Path) -> None:
    result = cli("run", agent_ref("ledgered"), "t", "--max-steps", "-3", db_url=None, ledger=ledger)
    assert result.returncode == 2, described(result)
    assert "--max-steps" in one_line_error(result.stderr)
    assert result.stdout == ""


def test_an_invalid_run_id_is_a_usage_error(db_url: str, ledger: Path) -> None:
    result = invoke(ledger, "run", agent_ref("ledgered"), "t", "--id", "no spaces", "--db", db_url)
    assert result.exit_code == 2
    assert "run id" in one_line_error(result.stderr)


def test_run_with_an_existing_id_returns_that_run(db_url: str, ledger: Path) -> None:
    assert start_run(ledger, db_url, "same") == 0
    calls = len(model_calls(ledger, "same"))
    # The same request again: the id is an idempotency key for the run itself.
    again = invoke(ledger, "run", agent_ref("ledgered"), "same", "--id", "same", "--db", db_url)
    assert again.exit_code == 0, again.output
    assert again.stdout == ANSWER + "\n"
    assert len(model_calls(ledger, "same")) == calls  # not run again
    _, rows = _list(ledger, db_url)
    assert [row["id"] for row in rows] == ["same"]  # no second run
    assert rows[0]["task"] == "same"


CONFLICTS = [
    # what the second request changes, what the message names
    (["failing", "same"], "another agent: agent '/"),
    (["ledgered", "other"], "another task: task 'same' (asked: 'other')"),
    (["ledgered", "same", "--max-steps", "3"], "another max_steps: max_steps 8 (asked: 3)"),
    (["failing", "other"], "another agent, task: agent '/"),
]


@pytest.mark.parametrize(("asked", "message"), CONFLICTS, ids=[" ".join(c[0]) for c in CONFLICTS])
def test_an_existing_id_with_another_request_is_refused(
    asked: list[str], message: str, db_url: str, ledger: Path
) -> None:
    assert start_run(ledger, db_url, "same") == 0
    calls = len(model_calls(ledger, "same"))
    agent, task, *flags = asked
    for command in ("run", "submit"):
        result = invoke(
            ledger, command, agent_ref(agent), task, "--id", "same", *flags, "--db", db_url
        )
        assert result.exit_code == 2, result.output
        line = one_line_error(result.stderr)
        assert "run same already exists with " in line and message in line, line
        assert "choose another id" in line
        assert result.stdout == ""
    assert len(model_calls(ledger, "same")) == calls
    assert model_calls(ledger, "other") == []
    _, rows = _list(ledger, db_url)
    assert [(row["id"], row["task"], row["agent_name"]) for row in rows] == [
        ("same", "same", "ledgered")
    ]


def test_run_with_an_unfinished_id_resumes_it(db_url: str, ledger: Path) -> None:
    crashed_run(ledger, db_url, "half", "after_observation_commit@3")
    result = invoke(ledger, "run", agent_ref("ledgered"), "half", "--id", "half", "--db", db_url)
    assert result.exit_code == 0, result.output
    assert result.stdout == ANSWER + "\n"
    steps = [call.step for call in model_calls(ledger, "half")]
    assert steps == [1, 2, 3, 4, 5, 6, 7]  # steps 1-3 were not asked again
    assert run_row(db_url, "half")["resumes"] == 1


def test_run_a_module_reference_from_pythonpath(db_url: str, ledger: Path) -> None:
    env = cli_env(db_url, ledger)
    env["PYTHONPATH"] = str(Path(__file__).parent)
    result = cli("run", "agents:ledgered", "m", "--id", "m", env=env, db_url=None, ledger=ledger)
    assert result.returncode == 0, described(result)
    assert result.stdout == ANSWER + "\n"
    assert run_row(db_url, "m")["agent"] == "agents:ledgered"


def test_the_database_url_from_the_environment(ledger: Path) -> None:
    db = f"sqlite:///{ledger / 'env.db'}"
    result = invoke(
        ledger, "run", agent_ref("ledgered"), "e", "--id", "e", env={"RUNNER_DATABASE_URL": db}
    )
    assert result.exit_code == 0, result.output
    assert run_row(db, "e")["output"] == ANSWER


# -- resume ------------------------------------------------------------------------------------


def test_show_and_resume_a_crashed_run(db_url: str, ledger: Path) -> None:
    crashed_run(ledger, db_url, "crashed-1", "during_tool@2")
    _, data = run_json(ledger, db_url, "show", "crashed-1")
    # Showing is no failure (exit 0), whatever the run's state.
    assert (data["status"], data["stop_reason"], data["output"]) == ("running", None, None)
    assert data["state"] == "stalled"  # its process is dead: nobody runs it any more
    assert data["steps"] == 2
    assert [m["role"] for m in data["transcript"]] == ["user", "assistant", "tool", "assistant"]
    shown = invoke(ledger, "show", "crashed-1", "--db", db_url).stdout
    assert "status    stalled (its holder's process is gone;" in shown

    result = invoke(ledger, "resume", "crashed-", "--db", db_url)  # a unique prefix
    assert result.exit_code == 0, result.output
    assert result.stdout == ANSWER + "\n"
    # The steps it ran itself, from the settled pending square (step 2) on.
    progress = [line.split("  ")[0] for line in result.stderr.splitlines()]
    assert progress[:6] == [f"step {i}" for i in range(2, 8)]
    _, data = run_json(ledger, db_url, "show", "crashed-1")
    assert (data["status"], data["stop_reason"], data["output"]) == ("finished", "final", ANSWER)
    assert data["resumes"] == 1


def test_resume_of_a_finished_run_prints_its_result(db_url: str, ledger: Path) -> None:
    assert start_run(ledger, db_url, "done") == 0
    assert start_run(ledger, db_url, "stopped", "--max-steps", "1") == 3
    calls = len(model_calls(ledger, "done")) + len(model_calls(ledger, "stopped"))
    code, data = run_json(ledger, db_url, "resume", "done")
    assert code == 0
    assert set(data) >= RESULT_KEYS
    assert (data["id"], data["stop_reason"], data["output"], data["steps"]) == (
        "done", "final", ANSWER, 7,
    )  # fmt: skip
    result = invoke(ledger, "resume", "stopped", "--db", db_url)
    assert result.exit_code == 3
    assert result.stdout == ""
    assert "stopped: max_steps after 1 step, 10 tokens" in result.stderr
    assert "`runner resume stopped --max-steps N` continues it" in result.stderr
    assert len(model_calls(ledger, "done")) + len(model_calls(ledger, "stopped")) == calls


# -- show --------------------------------------------------------------------------------------


def test_show(db_url: str, ledger: Path) -> None:
    assert start_run(ledger, db_url, "shown") == 0
    result = invoke(ledger, "show", "sho", "--db", db_url)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "shown" in out and "finished: final" in out
    assert "7 steps, 70 tokens" in out
    assert '-> deposit({"amount": 5})' in out
    assert "<- notify [ok]  sent" in out
    assert f"answer    {ANSWER}" in out


def test_show_json_has_the_transcript_of_seed_000(
    db_url: str, ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert start_run(ledger, db_url, "tr") == 0
    code, data = run_json(ledger, db_url, "show", "tr")
    assert code == 0
    assert set(data) >= RESULT_KEYS | {"transcript"}
    assert (data["id"], data["output"], data["steps"], data["tokens"]) == ("tr", ANSWER, 7, 70)
    transcript = data["transcript"]
    assert transcript[0] == {"role": "user", "content": "tr"}
    assert transcript[1] == {"role": "assistant", "tool": "deposit", "args": {"amount": 5}}
    assert transcript[2] == {"role": "tool", "name": "deposit", "content": "5", "is_error": False}
    assert transcript[-1] == {"role": "assistant", "content": ANSWER}
    # The durable transcript is the one run_agent keeps in memory for the same agent.
    monkeypatch.setenv(LEDGER_VARIABLE, str(ledger))
    memory = run_agent(ledgered.model, ledgered.tools, "tr")
    assert transcript == memory.transcript


# -- list --------------------------------------------------------------------------------------


def _list(ledger: Path, db_url: str, *flags: str) -> tuple[Result, list[dict[str, Any]]]:
    result = invoke(ledger, "list", "--db", db_url, "--json", *flags)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert isinstance(rows, list)
    return result, rows


def test_list_newest_first_with_filters(db_url: str, ledger: Path) -> None:
    assert start_run(ledger, db_url, "l1") == 0
    assert start_run(ledger, db_url, "l2", agent="failing") == 3
    assert start_run(ledger, db_url, "l3", "--max-steps", "1") == 3
    with Runner(db_url) as runner:
        runner.submit(agent_ref("ledgered"), "queued", id="l4")

    def ids(*flags: str) -> list[str]:
        return [row["id"] for row in _list(ledger, db_url, *flags)[1]]

    assert ids() == ["l4", "l3", "l2", "l1"]
    assert ids("--limit", "2") == ["l4", "l3"]
    assert ids("--status", "finished") == ["l3", "l2", "l1"]
    assert ids("--status", "queued") == ["l4"]
    assert ids("--status", "running") == []
    assert ids("--stop-reason", "final") == ["l1"]
    assert ids("--stop-reason", "max_steps") == ["l3"]
    assert ids("--release", "r3") == ["l2"]
    assert ids("--release", "r1") == ["l4", "l3", "l1"]
    assert ids("--release", "r1", "--status", "finished", "--limit", "1") == ["l3"]
    assert ids("--release", "nope") == []

    rows = _list(ledger, db_url)[1]
    assert all(set(row) >= RESULT_KEYS for row in rows)
    first = rows[-1]
    assert (first["status"], first["stop_reason"], first["output"]) == ("finished", "final", ANSWER)
    assert (first["steps"], first["tokens"], first["release"]) == (7, 70, "r1")

    table = invoke(ledger, "list", "--db", db_url).stdout.splitlines()
    assert table[0].split()[:4] == ["ID", "STATUS", "STOP", "STEPS"]
    assert [line.split()[0] for line in table[1:]] == ["l4", "l3", "l2", "l1"]
    assert table[1].split()[1:3] == ["queued", "-"]


def test_list_of_no_runs(db_url: str, ledger: Path) -> None:
    assert _list(ledger, db_url)[1] == []
    assert invoke(ledger, "list", "--db", db_url).stdout == "no runs\n"


@pytest.mark.parametrize(
    "flags",
    [["--status", "sleeping"], ["--stop-reason", "bored"], ["--limit", "0"], ["--limit", "x"]],
)
def test_list_rejects_bad_filters(flags: list[str], ledger: Path) -> None:
    result = invoke(ledger, "list", "--db", f"sqlite:///{ledger / 'l.db'}", *flags)
    assert result.exit_code == 2
    assert flags[0] in one_line_error(result.stderr)


# -- cancel ------------------------------------------------------------------------------------


def test_cancel_a_queued_run_stops_it_at_once(db_url: str, ledger: Path) -> None:
    with Runner(db_url) as runner:
        runner.submit(agent_ref("ledgered"), "q", id="q-1")
    result = invoke(ledger, "cancel", "q-", "--db", db_url)  # a unique prefix
    assert result.exit_code == 0, result.output
    assert result.stdout == "run q-1 is finished: cancelled\n"
    _, data = run_json(ledger, db_url, "show", "q-1")
    assert (data["status"], data["stop_reason"], data["steps"]) == ("finished", "cancelled", 0)
    # Resuming it only reports the stop (exit 3): the model is never asked.
    assert invoke(ledger, "resume", "q-1", "--db", db_url).exit_code == 3
    assert model_calls(ledger, "q") == []


def test_cancel_a_finished_run_changes_nothing(db_url: str, ledger: Path) -> None:
    assert start_run(ledger, db_url, "f") == 0
    result = invoke(ledger, "cancel", "f", "--db", db_url)
    assert result.exit_code == 0, result.output
    assert result.stdout == "run f is finished: final\n"
    assert run_row(db_url, "f")["stop_reason"] == "final"


def test_cancel_a_crashed_run(db_url: str, ledger: Path) -> None:
    crashed_run(ledger, db_url, "c", "after_observation_commit@2")
    result = invoke(ledger, "cancel", "c", "--db", db_url)
    assert result.exit_code == 0, result.output
    # Its worker is dead, so no worker holds it: it stops at once, with the counters of
    # its journal, and is no longer listed as running.
    assert result.stdout == "run c is finished: cancelled\n"
    row = run_row(db_url, "c")
    assert (row["status"], row["stop_reason"], row["steps"]) == ("finished", "cancelled", 2)
    assert row["lease_owner"] is None
    # Resuming it asks the model nothing more and reports the stop.
    result = invoke(ledger, "resume", "c", "--db", db_url, "--json")
    assert result.exit_code == 3, result.output
    data = json.loads(result.stdout)
    assert (data["stop_reason"], data["steps"]) == ("cancelled", 2)
    assert [call.step for call in model_calls(ledger, "c")] == [1, 2]


# -- run ids -----------------------------------------------------------------------------------


def test_run_ids_by_unique_prefix(db_url: str, ledger: Path) -> None:
    for run_id in ("Case-1", "case-2", "x_1", "xy2"):
        assert start_run(ledger, db_url, run_id, "--max-steps", "0") == 3
    for prefix, run_id in [("C", "Case-1"), ("c", "case-2"), ("x_", "x_1"), ("xy", "xy2")]:
        _, data = run_json(ledger, db_url, "show", prefix)
        assert data["id"] == run_id, prefix
    for command in ("show", "resume", "cancel"):
        result = invoke(ledger, command, "x", "--db", db_url)
        assert result.exit_code == 1
        assert "more than one run id starts with x" in one_line_error(result.stderr)


@pytest.mark.parametrize("command", ["show", "resume", "cancel"])
def test_an_unknown_run_id_is_an_error(command: str, db_url: str, ledger: Path) -> None:
    result = invoke(ledger, command, "nope", "--db", db_url)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert one_line_error(result.stderr) == "Error: no run with id nope"


# -- the database ------------------------------------------------------------------------------


COMMAND_LINES = [
    ["run", agent_ref("ledgered"), "t"],
    ["resume", "x"],
    ["show", "x"],
    ["list"],
    ["cancel", "x"],
    ["db", "upgrade"],
]


@pytest.mark.parametrize("args", COMMAND_LINES, ids=[a[0] for a in COMMAND_LINES])
def test_an_unreachable_database_never_shows_its_password(args: list[str], ledger: Path) -> None:
    result = invoke(ledger, *args, "--db", UNREACHABLE)
    assert result.exit_code == 1
    line = one_line_error(result.stderr)
    assert "127.0.0.1" in line and "user:***@" in line
    assert SECRET not in result.output


def test_an_unreachable_database_in_a_real_process(ledger: Path) -> None:
    result = cli("run", agent_ref("ledgered"), "t", "--db", UNREACHABLE, db_url=None, ledger=ledger)
    assert result.returncode == 1, described(result)
    assert "Connection refused" in one_line_error(result.stderr)
    assert SECRET not in result.stderr + result.stdout


def test_an_unreachable_database_from_the_environment(ledger: Path) -> None:
    result = invoke(ledger, "list", env={"RUNNER_DATABASE_URL": UNREACHABLE})
    assert result.exit_code == 1
    one_line_error(result.stderr)
    assert SECRET not in result.output


@pytest.fixture
def empty_postgres(postgres_database: str) -> Iterator[str]:
    """A PostgreSQL database with no runner schema in it, its URL with a password.

    The server trusts local connections, so the password is never checked: it is there to
    be hidden from every message.
    """
    name = f"runner_empty_{uuid.uuid4().hex[:10]}"
    admin = create_engine(make_url(postgres_database).set(database="postgres"))
    admin = admin.execution_options(isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        url = make_url(postgres_database).set(database=name, password=SECRET)
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.mark.postgres
def test_an_unmigrated_postgres_then_db_upgrade(empty_postgres: str, ledger: Path) -> None:
    result = cli(
        "run", agent_ref("ledgered"), "t", "--db", empty_postgres, db_url=None, ledger=ledger
    )
    assert result.returncode == 1, described(result)
    assert "has no runner schema" in one_line_error(result.stderr)
    assert SECRET not in result.stderr + result.stdout
    for args in COMMAND_LINES[1:-1]:
        result = invoke(ledger, *args, "--db", empty_postgres)
        assert result.exit_code == 1
        assert "run `runner db upgrade`" in one_line_error(result.stderr)
        assert SECRET not in result.output
    for _ in range(2):  # upgrading an up-to-date database is a no-op
        result = invoke(ledger, "db", "upgrade", "--db", empty_postgres)
        assert result.exit_code == 0, result.output
        assert "latest schema revision" in result.stdout
        assert SECRET not in result.output
    assert start_run(ledger, empty_postgres, "after-upgrade") == 0


def test_db_upgrade_a_new_sqlite_file(ledger: Path) -> None:
    db = f"sqlite:///{ledger / 'new.db'}"
    result = invoke(ledger, "db", "upgrade", env={"RUNNER_DATABASE_URL": db})
    assert result.exit_code == 0, result.output
    assert (ledger / "new.db").exists()
    assert _list(ledger, db)[1] == []


# -- agents that cannot be loaded ------------------------------------------------------------


@pytest.fixture
def broken_agents(tmp_path: Path) -> Path:
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "imports_nothing.py").write_text("import no_such_module_anywhere\n")
    (folder / "raises.py").write_text("raise RuntimeError('agent file blew up')\n")
    return folder


BAD_REFS = [
    ("{folder}/missing.py:agent", "no such agent file"),
    ("{agents}:no_such_agent", "has no attribute 'no_such_agent'"),
    ("{agents}:not_an_agent", "not a runner.Agent"),
    ("{folder}/imports_nothing.py:agent", "No module named 'no_such_module_anywhere'"),
    ("{folder}/raises.py:agent", "RuntimeError: agent file blew up"),
    ("no_such_module_anywhere:agent", "no module named 'no_such_module_anywhere'"),
]
MALFORMED = ["no-colon", "a:", ":agent", "two words:agent", "mod:not-an-attr", "pkg..mod:agent"]


@pytest.mark.parametrize(("ref", "message"), BAD_REFS, ids=[r[0] for r in BAD_REFS])
def test_a_bad_agent_reference_is_one_line(
    ref: str, message: str, broken_agents: Path, ledger: Path
) -> None:
    db = f"sqlite:///{ledger / 'refs.db'}"
    ref = ref.format(folder=broken_agents, agents=AGENTS)
    result = invoke(ledger, "run", ref, "t", "--db", db)
    assert result.exit_code == 1
    assert message in one_line_error(result.stderr)
    assert result.stdout == ""
    assert _list(ledger, db)[1] == []  # no run was created


@pytest.mark.parametrize("ref", MALFORMED)
def test_a_malformed_agent_reference_is_a_usage_error(ref: str, ledger: Path) -> None:
    db = f"sqlite:///{ledger / 'refs.db'}"
    for command in ("run", "submit"):
        result = invoke(ledger, command, ref, "t", "--db", db)
        assert result.exit_code == 2, result.output
        assert "must look like module:attr or file.py:attr" in one_line_error(result.stderr)
    assert _list(ledger, db)[1] == []


def test_a_bad_agent_reference_in_a_real_process(
    broken_agents: Path, db_url: str, ledger: Path
) -> None:
    result = cli(
        "run", f"{broken_agents}/imports_nothing.py:agent", "t", db_url=db_url, ledger=ledger
    )
    assert result.returncode == 1, described(result)
    assert "No module named 'no_such_module_anywhere'" in one_line_error(result.stderr)
    assert result.stdout == ""


# -- usage errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args", [["run"], ["run", "a"], ["resume"], ["show"], ["frobnicate"], ["db", "downgrade"]]
)
def test_usage_errors_exit_2(args: list[str], ledger: Path) -> None:
    result = invoke(ledger, *args)
    assert result.exit_code == 2
    one_line_error(result.stderr)


def test_python_dash_m_runner_is_the_runner_command() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "runner", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and "submit" in done.stdout and "worker" in done.stdout
