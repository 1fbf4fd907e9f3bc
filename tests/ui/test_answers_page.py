"""A waiting run's page says what it waits for and answers it: approve, deny and reply are
POSTs with the CSRF token, through the same library calls as `runner approve/deny/reply`;
a running run nobody holds any more shows as stalled."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from typing import Any

import pytest
from sqlalchemy import update
from starlette.testclient import TestClient

from runner import Agent, Runner, ask_human, tool
from runner.sql.schema import runs
from runner.ui import make_app

from .agents import HOSTILE
from .seed import Seeded

BASE = "http://127.0.0.1:8780"
Transcript = list[dict[str, Any]]


@tool(approval=True)
def refund(amount: float) -> str:
    return f"refunded {amount}"


def model(transcript: Transcript) -> dict[str, Any]:
    seen = [m for m in transcript if m["role"] == "tool"]
    if not seen:
        if "both" in transcript[0]["content"]:  # a step of two calls, each needing an answer
            calls = [
                {"id": "r", "name": "refund", "args": {"amount": 249.0}},
                {"id": "q", "name": "ask_human", "args": {"question": "Which order?"}},
            ]
            return {"type": "tool", "calls": calls}
        if "question" in transcript[0]["content"]:
            return {"type": "tool", "name": "ask_human", "args": {"question": "Which order?"}}
        return {"type": "tool", "name": "refund", "args": {"amount": 249.0}}
    return {"type": "final", "content": seen[-1]["content"]}


AGENT = Agent(model, {"refund": refund, "ask_human": ask_human})


@pytest.fixture(scope="module")
def client(seeded: Seeded) -> Iterator[TestClient]:
    with TestClient(make_app(seeded.url), base_url=BASE) as found:
        yield found


def waiting_run(seeded: Seeded, run_id: str, task: str) -> None:
    with Runner(seeded.url) as runner:
        result = runner.run(AGENT, task, id=run_id)
    assert result.status == "waiting"


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found, "no CSRF field in the form"
    return found.group(1)


def test_approve_and_deny_answer_a_waiting_run(client: TestClient, seeded: Seeded) -> None:
    for run_id in ("ui-approve", "ui-deny"):
        waiting_run(seeded, run_id, "refund order 1042")
    page = client.get("/runs/ui-approve").text
    assert "approval of" in page and 'action="/runs/ui-approve/approve"' in page
    assert 'action="/runs/ui-approve/deny"' in page
    token = csrf_of(page)
    refused = client.post("/runs/ui-approve/approve", data={"call": "ui-approve-1"})
    assert refused.status_code == 403  # no CSRF token: nothing answered
    with Runner(seeded.url) as runner:
        assert runner.row("ui-approve").status == "waiting"

    done = client.post(
        "/runs/ui-approve/approve",
        data={"csrf": token, "call": "ui-approve-1", "note": "ok"},
        follow_redirects=False,
    )
    assert done.status_code == 303 and done.headers["location"].endswith("notice=answered")
    denied = client.post(
        "/runs/ui-deny/deny",
        data={"csrf": token, "call": "ui-deny-1", "reason": "already refunded"},
        follow_redirects=False,
    )
    assert denied.status_code == 303
    with Runner(seeded.url) as runner:
        assert runner.row("ui-approve").status == "queued"
        assert runner.resume("ui-approve", agent=AGENT).output == "refunded 249.0"
        assert runner.resume("ui-deny", agent=AGENT).output == "Denied: already refunded"
    again = client.post("/runs/ui-approve/approve", data={"csrf": token, "call": "ui-approve-1"})
    assert again.status_code >= 400  # no longer waiting: one line, nothing run twice


def test_reply_answers_a_question(client: TestClient, seeded: Seeded) -> None:
    waiting_run(seeded, "ui-reply", "a question first")
    page = client.get("/runs/ui-reply").text
    assert "a reply to" in page and 'action="/runs/ui-reply/reply"' in page
    done = client.post(
        "/runs/ui-reply/reply",
        data={"csrf": csrf_of(page), "call": "ui-reply-1", "text": "order 1042"},
        follow_redirects=False,
    )
    assert done.status_code == 303
    with Runner(seeded.url) as runner:
        assert runner.resume("ui-reply", agent=AGENT).output == "order 1042"


def test_a_running_run_nobody_holds_shows_as_stalled(client: TestClient, seeded: Seeded) -> None:
    waiting_run(seeded, "ui-stalled", "refund order 7")
    with Runner(seeded.url) as runner:
        past = datetime.now(UTC) - timedelta(minutes=5)
        with runner.engine.begin() as connection:
            connection.execute(
                update(runs)
                .where(runs.c.id == "ui-stalled")
                .values(status="running", lease_owner="elsewhere:1:1", lease_expires_at=past)
            )
    assert 'class="status s-stalled">stalled<' in client.get("/runs/ui-stalled").text
    listed = client.get("/", params={"status": "running"}).text
    assert 'class="status s-stalled">stalled<' in listed


# -- hostile text in what a waiting run asks -------------------------------------------------


@tool(approval=True)
def send(note: str) -> str:
    return "sent"


def asks_hostile(transcript: Transcript) -> dict[str, Any]:
    """`question ...`: asks a person HOSTILE; `approval ...`: a call with HOSTILE in its
    arguments, which needs approval."""
    if "question" in transcript[0]["content"]:
        return {"type": "tool", "name": "ask_human", "args": {"question": HOSTILE}}
    return {"type": "tool", "name": "send", "args": {"note": HOSTILE}}


class Tags(HTMLParser):
    """The tags and attribute names of a page, as a browser's parser reads them."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attributes: list[str] = []
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes.extend(name for name, _ in attrs)


@pytest.mark.parametrize("task", ["question " + HOSTILE, "approval " + HOSTILE])
def test_what_a_waiting_run_asks_is_shown_as_text(
    client: TestClient, seeded: Seeded, task: str
) -> None:
    """Issue 29: the question (or the call to approve, with its arguments) rendered with
    `| safe` survived the suite: no test rendered a *waiting* run with hostile text."""
    run_id = f"ui-hostile-{task.split()[0]}"
    with Runner(seeded.url) as runner:
        assert runner.run(Agent(asks_hostile, {"ask_human": ask_human, "send": send}), task,
                          id=run_id).status == "waiting"  # fmt: skip
    page = client.get(f"/runs/{run_id}").text
    listed = client.get("/", params={"status": "waiting"}).text
    assert run_id in listed
    for shown in (page, listed):
        parsed = Tags(shown)
        assert not {"img", "iframe"} & set(parsed.tags)
        # The one script is the page's own file (an unfinished run's page follows it live).
        scripts = re.findall(r"<script[^>]*>", shown)
        assert scripts == (['<script src="/static/follow.js" defer>'] if shown is page else [])
        assert not [name for name in parsed.attributes if name.startswith("on")]
        assert "hostile-link" not in parsed.attributes and 'id="hostile-link"' not in shown
        assert "&lt;script&gt;" in shown
    # The question itself is on the page, as text, where the waiting run says what it asks.
    asked = re.search(r'<div class="waiting">(.*?)</div>', page, re.S)
    assert asked is not None and "&lt;script&gt;window.pwned" in asked.group(1)
    assert HOSTILE.split("<img")[0] in html.unescape(asked.group(1))  # the <script>, whole


def test_a_step_of_two_waiting_calls_shows_and_answers_each(
    client: TestClient, seeded: Seeded
) -> None:
    waiting_run(seeded, "ui-both", "both at once")
    page = client.get("/runs/ui-both").text
    assert "approval of" in page and "a reply to" in page
    assert page.count('name="call" value="ui-both-1.1"') == 2  # approve and deny
    assert page.count('name="call" value="ui-both-1.2"') == 2  # reply and deny
    token = csrf_of(page)
    replied = client.post(
        "/runs/ui-both/reply",
        data={"csrf": token, "call": "ui-both-1.2", "text": "1042"},
        follow_redirects=False,
    )
    assert replied.status_code == 303
    page = client.get("/runs/ui-both").text
    assert 'value="ui-both-1.2"' not in page and 'value="ui-both-1.1"' in page
    with Runner(seeded.url) as runner:
        assert runner.row("ui-both").status == "waiting"  # one call still waits
        runner.approve("ui-both", call="ui-both-1.1")
        done = runner.resume("ui-both", agent=AGENT)
    assert done.output == "1042"
