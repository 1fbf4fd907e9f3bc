"""The rough edges a new user met first (issue 22, item 9), on real SQLite files through the
real commands: a path given for a URL, a mistyped file name, a finished run resumed, a list
cut at its limit, a page served on a port already taken."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from runner import Agent, Runner
from runner.cli import main


def answer(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "final", "content": "done"}


AGENT = Agent(answer, name="answerer", ref="tests.integration.test_first_steps:AGENT")


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with Runner(url) as runner:
        for n in range(3):
            runner.run(AGENT, f"task {n}", id=f"done-{n}")
    return url


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def one_line(result: Result) -> str:
    assert result.exit_code == 1, (result.exit_code, result.output, result.stderr)
    (said,) = result.stderr.splitlines()
    return said


def test_a_path_given_as_the_database_says_the_url_it_meant(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    said = one_line(invoke("list", "--db", str(path)))
    assert said == f"Error: not a database URL: {path} (a SQLite file is a URL: sqlite:///{path})"
    assert f"sqlite:////{str(path).lstrip('/')}" in said  # four slashes for an absolute path
    said = one_line(invoke("sql", "--db", "runs.db", "SELECT 1"))
    assert said.endswith("(a SQLite file is a URL: sqlite:///runs.db)")


def test_a_url_without_its_scheme_hides_its_password() -> None:
    said = one_line(invoke("list", "--db", "user:s3cr@t@db.example/runs"))
    assert said == "Error: not a database URL: user:***@db.example/runs"


def test_no_sqlite_url_is_suggested_for_what_is_no_path() -> None:
    said = one_line(invoke("list", "--db", "user@db.example:5432/runs"))
    assert said == "Error: not a database URL: user@db.example:5432/runs"


@pytest.mark.parametrize(
    "command",
    [["list"], ["show", "done-1"], ["sql", "SELECT 1"], ["stats"], ["export"], ["ui"]],
    ids=lambda command: command[0],
)
def test_a_read_refuses_a_missing_sqlite_file_and_makes_none(
    command: list[str], db: str, tmp_path: Path
) -> None:
    mistyped = tmp_path / "rusn.db"
    said = one_line(invoke(*command, "--db", f"sqlite:///{mistyped}"))
    assert said.startswith(f"Error: no SQLite database at {mistyped}"), said
    assert not mistyped.exists()


def test_resuming_a_finished_run_says_nothing_ran(db: str) -> None:
    result = invoke("resume", "done-1", "--db", db)
    assert result.exit_code == 0, result.stderr
    assert result.stderr.splitlines() == [
        "run done-1 had already finished: nothing ran",
        "stopped: final after 1 step, 0 tokens, cost 0 (run done-1)",
    ]
    assert result.stdout == "done\n"


def test_list_says_when_there_are_more_runs_than_shown(db: str) -> None:
    cut = invoke("list", "--db", db, "--limit", "2")
    assert cut.exit_code == 0, cut.stderr
    assert len(cut.stdout.splitlines()) == 3  # the header and two runs
    assert cut.stderr == "showing the 2 newest runs; there are more (--limit N shows N)\n"
    whole = invoke("list", "--db", db, "--limit", "3")
    assert whole.exit_code == 0 and whole.stderr == ""
    assert len(whole.stdout.splitlines()) == 4


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


def test_the_page_on_a_port_in_use_is_one_line_before_serving(
    db: str, taken_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    said = one_line(invoke("ui", "--db", db, "--port", str(taken_port)))
    assert said == (
        f"Error: cannot serve on http://127.0.0.1:{taken_port}/: Address already in use "
        "(--port chooses another)"
    )
    assert not [r for r in caplog.records if "serving" in r.getMessage()]
