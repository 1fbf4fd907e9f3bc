"""Every reader gives back what the journal keeps, lone surrogates included.

The journal keeps a model's text exactly (a lone surrogate as a JSON escape); no UTF-8
stream can carry one. Decided once (docs/security.md): every face writes it as the
escape `\\ud800`: the terminal (`run`, `show`, `list`, `sql`, logs), the page, and the
export, where the escape is JSON's own and the value reads back exactly.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import text
from starlette.testclient import TestClient

from runner import Agent, Runner, ask_human
from runner.cli import main
from runner.cli.logs import JsonFormatter
from runner.sql.database import open_engine
from runner.ui import make_app

ANSWER = "ans\ud800wer"
QUESTION = "why\udfff?"
SHOWN = "ans\\ud800wer"


def answering(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "final", "content": ANSWER}


def asking(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    if len(transcript) == 1:
        return {"type": "tool", "name": "ask_human", "args": {"question": QUESTION}}
    return {"type": "final", "content": "done"}


def failing(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    raise RuntimeError(f"provider said {ANSWER}")


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def poisoned(db_url: str) -> str:
    """A database with a finished run answering a lone surrogate, two runs waiting on a
    question holding one, and a run whose error holds one."""
    with Runner(db_url) as runner:
        assert runner.run(Agent(answering, {}), "t", id="a-answer").output == ANSWER
        for run_id in ("b-wait", "c-wait"):
            runner.run(Agent(asking, {"ask_human": ask_human}), "t", id=run_id)
        runner.run(Agent(failing, {}, model_retries=0), "t", id="d-error")
        assert runner.row("b-wait").status == "waiting"
    return db_url


def test_the_terminal_shows_an_escape(poisoned: str) -> None:
    for args in (
        ["show", "a-answer"],
        ["show", "b-wait"],
        ["show", "d-error"],
        ["list", "--status", "waiting"],
        ["list"],
        ["sql", "SELECT * FROM entries"],
        ["sql", "SELECT * FROM tool_calls"],
        ["sql", "--csv", "SELECT * FROM tool_calls"],
    ):
        result = invoke(*args, "--db", poisoned)
        assert result.exit_code == 0, (args, result.output)
    assert SHOWN in invoke("show", "a-answer", "--db", poisoned).stdout
    assert "why\\udfff?" in invoke("show", "b-wait", "--db", poisoned).stdout
    waiting = invoke("list", "--status", "waiting", "--db", poisoned).stdout
    assert "b-wait" in waiting and "c-wait" in waiting


def test_json_from_the_terminal_keeps_the_value(poisoned: str) -> None:
    shown = invoke("show", "a-answer", "--json", "--db", poisoned)
    assert shown.exit_code == 0 and json.loads(shown.stdout)["output"] == ANSWER
    rows = invoke("sql", "--json", "SELECT id, output FROM runs ORDER BY id", "--db", poisoned)
    assert rows.exit_code == 0, rows.output
    assert json.loads(rows.stdout)[0]["output"] in (ANSWER, json.dumps(ANSWER))


def test_run_prints_the_answer_escaped(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    result = invoke("run", f"{__name__.rsplit('.', 1)[-1]}:ANSWERING", "t", "--db", db_url)
    assert result.exit_code == 0, result.output
    assert SHOWN in result.stdout


ANSWERING = Agent(answering, {})


def test_export_keeps_every_run_and_the_exact_value(poisoned: str, tmp_path: Path) -> None:
    target = tmp_path / "runs.jsonl"
    result = invoke("export", "-o", str(target), "--db", poisoned)
    assert result.exit_code == 0, result.output
    lines = target.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["a-answer", "b-wait", "c-wait", "d-error"]
    assert json.loads(lines[0])["output"] == ANSWER
    to_stdout = invoke("export", "--db", poisoned)
    assert to_stdout.exit_code == 0 and to_stdout.stdout.count("\n") == 4


def test_an_export_that_cannot_write_a_run_names_it_and_writes_nothing(
    poisoned: str, tmp_path: Path
) -> None:
    engine = open_engine(poisoned)
    with engine.begin() as connection:  # a row damaged by hand: JSON that is not JSON
        connection.execute(
            text(
                "UPDATE entries SET content = '{not json', content_format = 'json' "
                "WHERE run_id = 'c-wait' AND seq = 0"
            )
        )
    engine.dispose()
    folder = tmp_path / "out"
    folder.mkdir()
    target = folder / "runs.jsonl"
    target.write_text("kept\n")
    result = CliRunner().invoke(main, ["export", "-o", str(target), "--db", poisoned])
    assert result.exit_code == 1
    assert "c-wait" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert target.read_text() == "kept\n"
    assert [p.name for p in folder.iterdir()] == ["runs.jsonl"]  # no partial file left


def test_the_page_shows_an_escape(poisoned: str) -> None:
    with TestClient(make_app(poisoned), base_url="http://127.0.0.1:8780") as client:
        for path in ("/", "/runs/a-answer", "/runs/b-wait", "/runs/d-error", "/stats"):
            response = client.get(path)
            assert response.status_code == 200, (path, response.text)
        assert SHOWN in client.get("/runs/a-answer").text


def test_a_log_record_holding_one_is_written(capsys: pytest.CaptureFixture[str]) -> None:
    record = logging.LogRecord("runner.worker", logging.ERROR, "", 0, ANSWER, None, None)
    from runner.cli import output

    output.line(JsonFormatter().format(record), err=True)
    assert json.loads(capsys.readouterr().err)["message"] == ANSWER
