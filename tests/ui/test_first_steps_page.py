"""What the page told a new user wrong or not at all (issue 22, item 9): a delayed run said
only "queued", a waiting run's page did not say what it waits for at the top nor how to
answer it from a terminal, a denied call read "refund failed (attempt 1)" though it never
ran, who answered was not shown, the chart's legend named a failed step there was none of,
and the stop-reasons page did not link to the runs behind a figure."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from starlette.testclient import TestClient

from runner import Agent, Runner, tool
from runner.ui import make_app

BASE = "http://127.0.0.1:8780"


@tool(approval=True)
def refund(amount: float) -> str:
    return f"refunded {amount}"


def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    seen = [m for m in transcript if m["role"] == "tool"]
    if not seen:
        return {"type": "tool", "name": "refund", "args": {"amount": 249.0}}
    return {"type": "final", "content": seen[-1]["content"]}


AGENT = Agent(model, {"refund": refund}, name="refunds", release="2.0",
              ref="tests.ui.test_first_steps_page:AGENT")  # fmt: skip


def visible(page: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    with Runner(db_url) as runner:
        assert runner.run(AGENT, "refund order 1042", id="waits").status == "waiting"
        assert runner.run(AGENT, "refund order 1043", id="denied").status == "waiting"
        runner.deny("denied", reason="too much", call="denied-1")
        assert runner.resume("denied").stop_reason == "final"
        runner.submit(AGENT, "refund later", id="later", delay=timedelta(hours=1))
    with TestClient(make_app(db_url), base_url=BASE) as found:
        yield found


def test_the_list_says_until_when_a_delayed_run_waits_and_what_a_waiting_one_waits_for(
    client: TestClient,
) -> None:
    shown = visible(client.get("/").text)
    assert re.search(r"later queued until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", shown), shown
    assert not re.search(r"waits waiting until", shown)
    assert "waits waiting for approval of refund(amount=249.0)" in shown
    page = visible(client.get("/runs/later").text)
    assert re.search(r"Run later queued until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", page), page


def test_a_waiting_run_says_what_it_waits_for_and_the_commands_that_answer(
    client: TestClient,
) -> None:
    page = client.get("/runs/waits").text
    shown = visible(page)
    top = shown.split("Agent")[0]  # above the cards, beside the status
    assert re.search(r"Waits for approval of refund\(amount=249\.0\) \(call waits-1 ?\)", top), top
    assert "runner approve waits --call waits-1" in shown
    assert 'runner deny waits --call waits-1 --reason "..."' in shown
    assert "runner asks a person for approval (waits-1)" in shown
    # No step failed: the legend names no failed step.
    assert "a failed step" not in shown


def test_a_denied_call_never_ran_and_the_page_says_who_denied_it(client: TestClient) -> None:
    shown = visible(client.get("/runs/denied").text)
    assert "refund was not run: a person denied it" in shown
    assert "refund failed" not in shown
    assert "denied by " in shown and "too much" in shown
    assert not re.search(r"denied · attempt", shown)


def test_stop_reason_figures_link_to_their_runs(client: TestClient) -> None:
    page = client.get("/stats").text
    links = re.findall(r'<a class="behind" href="([^"]+)">(\d+)</a>', page)
    assert links == [
        ("/?status=finished&amp;stop_reason=final&amp;agent=refunds&amp;release=2.0", "1")
    ]
    runs = client.get(html.unescape(links[0][0])).text
    assert re.findall(r'class="run-link" href="/runs/([^"]+)"', runs) == ["denied"]
