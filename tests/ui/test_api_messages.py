"""`POST /api/runs/{id}/messages` on SQLite and PostgreSQL, through Starlette's test client:
a message into a queued run (201, its key from the `Idempotency-Key` header), the same key
again (200, one message), another message under that key (409), a finished run (409,
unless `"revive": true`), and hostile bodies (400). Each call is `Runner.send`, the library
`runner send` calls, tested at length in tests/integration/test_messages.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from runner import Runner
from runner.ui import make_app

from .seed import Seeded, ref
from .test_api import AUTH, BASE, TOKEN, refused


@pytest.fixture(scope="module")
def client(seeded: Seeded) -> Iterator[TestClient]:
    with TestClient(make_app(seeded.url, token=TOKEN), base_url=BASE) as found:
        found.headers.update(AUTH)
        yield found


def test_a_message_goes_into_a_queued_run_once_per_key(client: TestClient, seeded: Seeded) -> None:
    with Runner(seeded.url) as runner:
        runner.submit(ref("shop_r1"), "ok told", id="api-told")
    url = "/api/runs/api-told/messages"
    first = client.post(url, json={"message": "hurry"}, headers={"idempotency-key": "m-1"})
    assert first.status_code == 201, first.text
    sent = first.json()
    assert (sent["id"], sent["key"], sent["number"], sent["status"]) == (
        "api-told", "m-1", 1, "queued"
    )  # fmt: skip
    assert (sent["duplicate"], sent["delivered"], sent["revived"]) == (False, False, False)

    again = client.post(url, json={"message": "hurry"}, headers={"idempotency-key": "m-1"})
    assert again.status_code == 200 and again.json()["duplicate"] is True
    other = client.post(url, json={"message": "slow"}, headers={"idempotency-key": "m-1"})
    assert "key m-1 was sent to run api-told with another message" in refused(other, 409)
    keyless = client.post(url, json={"message": "and more"})
    assert keyless.status_code == 201 and keyless.json()["key"].startswith("m-")
    with Runner(seeded.url) as runner:
        assert [m.key for m in runner.inbox("api-told")] == ["m-1", keyless.json()["key"]]


def test_a_finished_run_takes_a_message_only_to_be_revived(
    client: TestClient, seeded: Seeded
) -> None:
    with Runner(seeded.url) as runner:
        done = runner.run(ref("shop_r1"), "ok done", id="api-done")
    assert done.stop_reason == "final"
    url = "/api/runs/api-done/messages"
    assert "run api-done is finished (final)" in refused(
        client.post(url, json={"message": "x"}), 409
    )
    revived = client.post(url, json={"message": "once more", "revive": True})
    assert revived.status_code == 201, revived.text
    assert (revived.json()["revived"], revived.json()["status"]) == (True, "queued")


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({}, "'message' is required"),
        ({"message": 3}, "'message' is required"),
        ({"message": "x", "revive": "yes"}, "'revive' must be true or false"),
        ({"message": "x", "extra": 1}, "extra"),
        ({"message": "   "}, "must not be empty"),
        ({"message": {"a": 1}}, "accepts text messages, not dict"),
        ({"message": "x", "budgets": {"max_steps": -1}}, "bad budgets"),
    ],
)
def test_a_bad_message_is_a_400(
    client: TestClient, seeded: Seeded, body: dict[str, object], said: str
) -> None:
    response = client.post(f"/api/runs/{seeded.queued}/messages", json=body)
    assert said in refused(response, 400)


def test_a_message_to_no_such_run_is_a_404(client: TestClient) -> None:
    refused(client.post("/api/runs/nobody/messages", json={"message": "x"}), 404)
