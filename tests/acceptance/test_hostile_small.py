"""Smaller hostile cases: a huge observation on the page, control characters in `--by`,
and an open redirect through the token's URL (both databases where a database is read)."""

from __future__ import annotations

from typing import Any

from click.testing import CliRunner
from starlette.testclient import TestClient

from runner import Agent, Runner, ask_human, tool
from runner.cli import main
from runner.ui import make_app
from runner.ui.filters import SHOWN_LIMIT

BASE = "http://127.0.0.1:8780"
HUGE = 3 * SHOWN_LIMIT


@tool(idempotent=True)
def dump() -> str:
    return "x" * HUGE


def dumping(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    if len(transcript) == 1:
        return {"type": "tool", "name": "dump", "args": {}}
    return {"type": "final", "content": "done"}


def asking(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    if len(transcript) == 1:
        return {"type": "tool", "name": "ask_human", "args": {"question": "ok?"}}
    return {"type": "final", "content": "done"}


def test_the_page_cuts_a_huge_observation_and_says_how_to_get_it(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.run(Agent(dumping, {"dump": dump}), "t", id="huge")
    with TestClient(make_app(db_url), base_url=BASE) as client:
        page = client.get("/runs/huge")
    assert page.status_code == 200
    assert len(page.text) < HUGE
    assert f"{HUGE - SHOWN_LIMIT:,} more characters cut here" in page.text
    assert "runner show ID --full" in page.text and "runner show huge" in page.text


def test_answers_print_by_with_control_characters_escaped(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.run(Agent(asking, {"ask_human": ask_human}), "t", id="asks")
    hostile = "\x1b[2J\x1b]0;owned\x07eve"
    first = CliRunner().invoke(main, ["reply", "asks", "yes", "--by", hostile, "--db", db_url])
    assert first.exit_code == 0, first.output
    assert "\x1b" not in first.stdout and "\x07" not in first.stdout
    assert "by \\x1b[2J\\x1b]0;owned\\x07eve" in first.stdout
    again = CliRunner().invoke(main, ["reply", "asks", "no", "--by", "bob", "--db", db_url])
    assert again.exit_code == 1  # refused: answered already, by whom it says, escaped
    assert "\x1b" not in again.stderr and "\\x1b[2J" in again.stderr, again.stderr


def test_the_token_redirect_stays_on_this_site(db_url: str) -> None:
    with TestClient(make_app(db_url, token="s3cret"), base_url=BASE) as client:
        for path in ("//evil.com/", "///evil.com/", "/\\evil.com/"):
            sent = client.get(f"{BASE}{path}?token=s3cret", follow_redirects=False)
            assert sent.status_code == 303
            location = sent.headers["location"]
            assert location.startswith("/") and not location.startswith(("//", "/\\")), location
