"""The HTTP API (`/api/`) over a real history on SQLite and PostgreSQL, through Starlette's
test client: reads, submit with an idempotency key, cancel, answers, a finished run's events
as SSE with Last-Event-ID, the token rules for writes, the OpenAPI document against the
routes, and hostile input: every refusal a 4xx with a JSON error, never a 500. A live run
followed over a real server through a crash is tests/acceptance/test_api_follow.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from runner import Runner
from runner.ui import make_app
from runner.ui.api_input import MAX_BODY_BYTES, run_id_for_key

from .seed import Seeded, ref
from .test_answers_page import waiting_run

BASE = "http://127.0.0.1:8780"
TOKEN = "api-token-5e1"
AUTH = {"authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def client(seeded: Seeded) -> Iterator[TestClient]:
    with TestClient(make_app(seeded.url, token=TOKEN), base_url=BASE) as found:
        found.headers.update(AUTH)
        yield found


def refused(response: Any, status: int) -> str:
    """The error of a refusal, checked to be JSON with the status asked for."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json"), response.text
    message: str = response.json()["error"]
    assert message and "Traceback" not in message
    return message


def sse(text: str) -> list[dict[str, str]]:
    """The events of a Server-Sent Events body: each one's fields (comments left out; a
    block without data, such as the opening `retry:`, dispatches no event)."""
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if line and not line.startswith(":"):
                name, _, value = line.partition(":")
                fields[name] = fields.get(name, "") + value.removeprefix(" ")
        if "data" in fields:
            events.append(fields)
    return events


# -- reading --------------------------------------------------------------------------------


def test_runs_are_listed_as_the_cli_lists_them(client: TestClient, seeded: Seeded) -> None:
    response = client.get("/api/runs", params={"limit": "500"})
    assert response.status_code == 200
    listed = response.json()["runs"]
    with Runner(seeded.url) as runner:
        assert [run["id"] for run in listed] == [row.id for row in runner.list(limit=500)]
    queued = client.get("/api/runs", params={"state": "queued"}).json()["runs"]
    assert {run["id"] for run in queued} >= {seeded.queued}
    assert all(run["state"] == "queued" for run in queued)
    capped = client.get("/api/runs", params={"stop_reason": "max_steps", "limit": "2"}).json()
    assert len(capped["runs"]) == 2
    assert {run["stop_reason"] for run in capped["runs"]} == {"max_steps"}


def test_one_run_is_the_document_of_show_json(client: TestClient, seeded: Seeded) -> None:
    run_id = seeded.finished[0]
    document = client.get(f"/api/runs/{run_id}").json()
    assert (document["id"], document["status"], document["stop_reason"]) == (
        run_id, "finished", "final"
    )  # fmt: skip
    assert "transcript" not in document
    whole = client.get(f"/api/runs/{run_id}", params={"transcript": "true"}).json()
    with Runner(seeded.url) as runner:
        assert whole["transcript"] == runner.get(run_id).transcript


def test_a_prefix_is_not_a_run_id_in_the_api(client: TestClient, seeded: Seeded) -> None:
    assert refused(client.get(f"/api/runs/{seeded.long[:4]}"), 404) == "no such run"


# -- the event stream -------------------------------------------------------------------------


def test_a_finished_runs_events_come_with_their_positions_then_end(
    client: TestClient, seeded: Seeded
) -> None:
    run_id = seeded.finished[0]
    with Runner(seeded.url) as runner:
        journal = runner.journal(run_id)
    response = client.get(f"/api/runs/{run_id}/events")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse(response.text)
    entries, end = events[:-1], events[-1]
    assert [e["id"] for e in entries] == [str(n) for n in range(len(journal))]
    assert {e["event"] for e in entries} == {"entry"}
    assert [json.loads(e["data"])["kind"] for e in entries] == [str(x.kind) for x in journal]
    assert end["event"] == "end" and "id" not in end
    ending = json.loads(end["data"])
    assert (ending["position"], ending["stop_reason"]) == (len(journal) - 1, "final")

    # Resumed after position 1: by Last-Event-ID, which outranks ?after=.
    resumed = client.get(
        f"/api/runs/{run_id}/events", params={"after": "0"}, headers={"last-event-id": "1"}
    )
    assert [e.get("id") for e in sse(resumed.text)[:-1]] == [str(n) for n in range(2, len(journal))]
    after = client.get(f"/api/runs/{run_id}/events", params={"after": str(len(journal) - 1)})
    assert [e["event"] for e in sse(after.text)] == ["end"]


@pytest.mark.parametrize(
    "given", ["abc", "1.5", "--1", "-2", "99999999999", "1e3", "\u0661", " 3x", "0x10"]
)
def test_a_bad_last_event_id_is_a_400(client: TestClient, seeded: Seeded, given: str) -> None:
    run_id = seeded.finished[0]
    assert "Last-Event-ID" in refused(
        client.get(f"/api/runs/{run_id}/events", headers={"last-event-id": given.encode()}), 400
    )
    assert "after" in refused(
        client.get(f"/api/runs/{run_id}/events", params={"after": given}), 400
    )


# -- submitting -------------------------------------------------------------------------------


def test_the_same_key_returns_the_same_run_and_another_request_is_a_409(
    client: TestClient, seeded: Seeded
) -> None:
    body = {"agent": ref("shop_r1"), "task": "ok from the api", "budgets": {"max_steps": 3}}
    first = client.post("/api/runs", json=body, headers={"idempotency-key": "order-1042"})
    assert first.status_code == 201, first.text
    assert first.json()["id"] == "order-1042"
    assert first.headers["location"] == "/api/runs/order-1042"
    assert (first.json()["status"], first.json()["budgets"]["max_steps"]) == ("queued", 3)
    again = client.post("/api/runs", json=body, headers={"idempotency-key": "order-1042"})
    assert (again.status_code, again.json()["id"]) == (200, "order-1042")
    other = client.post(
        "/api/runs", json=body | {"task": "ok another"}, headers={"idempotency-key": "order-1042"}
    )
    message = refused(other, 409)
    assert "already exists" in message
    assert other.json()["differences"] == {
        "task": {"stored": "ok from the api", "asked": "ok another"}
    }

    # A UUID is one character too long for a run id: the key names a run derived from it.
    key = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
    made = client.post("/api/runs", json=body, headers={"idempotency-key": key})
    assert made.status_code == 201 and made.json()["id"] == run_id_for_key(key)
    assert client.post("/api/runs", json=body, headers={"idempotency-key": key}).status_code == 200
    # No key: a new run each time.
    ids = {client.post("/api/runs", json=body).json()["id"] for _ in range(2)}
    assert len(ids) == 2


@pytest.mark.parametrize(
    ("body", "kind", "status", "says"),
    [
        (b"{not json", "application/json", 400, "not valid JSON"),
        (b'{"task": NaN, "agent": "a:b"}', "application/json", 400, "not valid JSON"),
        (b"[1, 2]", "application/json", 400, "must be a JSON object"),
        (b'"text"', "application/json", 400, "must be a JSON object"),
        (b"[" * 100_000, "application/json", 400, "not valid JSON"),
        (b'{"task": "t"}', "application/json", 400, "'agent' is required"),
        (b'{"agent": 5, "task": "t"}', "application/json", 400, "'agent' must be a string"),
        (b'{"agent": "a:b", "task": ["t"]}', "application/json", 400, "'task' must be a string"),
        (b'{"agent": "a:b", "task": "t\\u0000"}', "application/json", 400, "NUL"),
        (b'{"agent": "a:b", "task": "t", "owner": 1}', "application/json", 400, "unknown field"),
        (b'{"agent": "a:b", "task": "t", "budgets": 3}', "application/json", 400, "'budgets'"),
        (b'{"agent": "a:b", "task": "t", "budgets": {"max_steps": "9"}}', "application/json",
         400, "bad budgets"),
        (b'{"agent": "a:b", "task": "t", "budgets": {"max_steps": 1e999}}', "application/json",
         400, "finite"),
        (b'{"agent": "a:b", "task": "t", "budgets": {"fuel": 1}}', "application/json", 400,
         "unknown budget"),
        (b'{"agent": "a:b", "task": "t", "priority": true}', "application/json", 400,
         "whole number"),
        (b'{"agent": "a:b", "task": "t", "priority": 99999999999}', "application/json", 400,
         "between"),
        (b'{"agent": "a:b", "task": "t", "delay": -1}', "application/json", 400, "negative"),
        (b'{"agent": "a:b", "task": "t", "queue": ""}', "application/json", 400, "queue"),
        (b'{"agent": "no_such_module_here:agent", "task": "t"}', "application/json", 400,
         "no_such_module_here"),
        (b'{"agent": "a:b", "task": "t"}', "text/plain", 415, "JSON"),
        (b"x" * (MAX_BODY_BYTES + 1), "application/json", 413, "at most"),
    ],
)  # fmt: skip
def test_bad_input_is_a_4xx_with_a_json_error(
    client: TestClient, body: bytes, kind: str, status: int, says: str
) -> None:
    # "a:b" stands for an agent that loads: each value is refused for itself.
    body = body.replace(b'"a:b"', json.dumps(ref("shop_r1")).encode())
    response = client.post("/api/runs", content=body, headers={"content-type": kind})
    assert says in refused(response, status)


def test_unknown_ids_and_hostile_paths_are_404s(client: TestClient) -> None:
    for path in (
        "/api/runs/nope",
        "/api/runs/" + "x" * 300,
        "/api/runs/a%00b",
        "/api/runs/%E2%80%AE",
        "/api/runs/nope/events",
        "/api/nothing",
    ):
        assert refused(client.get(path), 404)
    for how in ("cancel", "approve", "deny", "reply"):
        body = {"reason": "no"} if how == "deny" else {"text": "x"} if how == "reply" else {}
        assert refused(client.post(f"/api/runs/a%00b/{how}", json=body), 404)
        assert refused(client.post(f"/api/runs/nope/{how}", json=body), 404)
    assert refused(client.put("/api/runs"), 405)
    assert refused(client.get("/api/runs", params={"state": "lost"}), 400)
    assert refused(client.get("/api/runs", params={"limit": "0"}), 400)
    assert refused(client.get("/api/runs", params={"limit": "many"}), 400)
    assert refused(client.get("/api/runs", params={"stop_reason": "boredom"}), 400)


# -- cancel and answers -----------------------------------------------------------------------


def test_cancel_stops_a_queued_run(client: TestClient, seeded: Seeded) -> None:
    made = client.post("/api/runs", json={"agent": ref("shop_r1"), "task": "ok to cancel"})
    run_id = made.json()["id"]
    cancelled = client.post(f"/api/runs/{run_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert (cancelled.json()["status"], cancelled.json()["stop_reason"]) == (
        "finished", "cancelled"
    )  # fmt: skip
    assert "JSON" in refused(
        client.post(f"/api/runs/{run_id}/cancel", content=b"x", headers={"content-type": "x/y"}),
        415,
    )


def test_approve_deny_and_reply_answer_waiting_runs(client: TestClient, seeded: Seeded) -> None:
    waiting_run(seeded, "api-approve", "refund")
    waiting_run(seeded, "api-deny", "refund")
    waiting_run(seeded, "api-reply", "question")
    call = client.get("/api/runs/api-approve").json()["waiting"]["call"]
    approved = client.post(
        "/api/runs/api-approve/approve", json={"call": call, "note": "fine", "by": "ana"}
    )
    assert approved.status_code == 200, approved.text
    assert (approved.json()["answer"], approved.json()["by"], approved.json()["text"]) == (
        "approved", "ana", "fine"
    )  # fmt: skip
    assert "not waiting" in refused(client.post("/api/runs/api-approve/approve", json={}), 409)

    assert "'reason' is required" in refused(client.post("/api/runs/api-deny/deny", json={}), 400)
    assert "empty" in refused(client.post("/api/runs/api-deny/deny", json={"reason": "  "}), 400)
    assert refused(client.post("/api/runs/api-deny/reply", json={"text": "x"}), 409)
    denied = client.post("/api/runs/api-deny/deny", json={"reason": "too much"})
    assert denied.json()["answer"] == "denied"
    replied = client.post("/api/runs/api-reply/reply", json={"text": "order 7"})
    assert (replied.json()["answer"], replied.json()["text"]) == ("replied", "order 7")
    with Runner(seeded.url) as runner:
        assert {runner.row(r).status.value for r in ("api-approve", "api-deny", "api-reply")} == {
            "queued"
        }


# -- who may call it ----------------------------------------------------------------------------


def test_writes_need_the_token_in_the_header_not_the_cookie(seeded: Seeded) -> None:
    body = {"agent": ref("shop_r1"), "task": "ok by cookie"}
    with TestClient(make_app(seeded.url, token=TOKEN), base_url=BASE) as browser:
        assert refused(browser.get("/api/runs"), 401)
        assert refused(browser.post("/api/runs", json=body), 401)
        # Opened once with ?token=, the browser holds the cookie: reads pass, writes do not.
        browser.get("/?token=" + TOKEN)
        assert browser.get("/api/runs").status_code == 200
        assert "Authorization: Bearer" in refused(browser.post("/api/runs", json=body), 401)
        wrong = {"authorization": "Bearer nope"}
        assert refused(browser.post("/api/runs", json=body, headers=wrong), 401)
        crossed = AUTH | {"origin": "https://evil.example"}
        assert refused(browser.post("/api/runs", json=body, headers=crossed), 403)


def test_without_a_token_writes_need_a_json_content_type(seeded: Seeded) -> None:
    with TestClient(make_app(seeded.url), base_url=BASE) as local:
        # What a form on another site can send: refused before anything is read.
        form = local.post("/api/runs", content=b"agent=a", headers={"content-type": "text/plain"})
        assert "Content-Type: application/json" in refused(form, 415)
        assert refused(local.post(f"/api/runs/{seeded.queued}/cancel"), 415)
        assert refused(local.get("/api/runs", headers={"host": "evil.example"}), 421)
        made = local.post("/api/runs", json={"agent": ref("shop_r1"), "task": "ok locally"})
        assert made.status_code == 201, made.text


# -- the document -----------------------------------------------------------------------------


def test_the_openapi_document_describes_every_route_of_the_api(client: TestClient) -> None:
    document = client.get("/api/openapi.json").json()
    assert document["openapi"].startswith("3.1")
    served: dict[str, set[str]] = {}
    app = client.app
    for route in app.routes:  # type: ignore[attr-defined]
        if isinstance(route, Mount) and route.path == "/api":
            for inner in route.routes:
                assert isinstance(inner, Route)
                methods = {m.lower() for m in inner.methods or ()} - {"head"}
                served.setdefault("/api" + inner.path, set()).update(methods)
    described = {path: set(ops) for path, ops in document["paths"].items()}
    assert described == served
