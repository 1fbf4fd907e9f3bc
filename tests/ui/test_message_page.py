"""The page shows a message in place, in the step whose model call first read it, escaped
like any text of the transcript; on SQLite and PostgreSQL."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from runner import Runner
from runner.ui import make_app

from .seed import Seeded, ref

BASE = "http://127.0.0.1:8780"


@pytest.fixture(scope="module")
def client(seeded: Seeded) -> Iterator[TestClient]:
    with TestClient(make_app(seeded.url), base_url=BASE) as found:
        yield found


def test_a_message_is_shown_in_its_place(client: TestClient, seeded: Seeded) -> None:
    with Runner(seeded.url) as runner:
        runner.submit(ref("shop_r1"), "ok told on the page", id="page-told")
        runner.send("page-told", "<b>mind the budget</b>", key="page-key-1")
        runner.resume("page-told")
    raw = client.get("/runs/page-told").text
    assert "&lt;b&gt;mind the budget&lt;/b&gt;" in raw and "<b>mind the budget</b>" not in raw
    page = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", raw)).split())
    told = page.index("message sent to the run (key page-key-1) <b>mind the budget</b>")
    # After the task, before the model's first call: step 1 read it.
    assert page.index("ok told on the page") < told < page.index("model calls add")
