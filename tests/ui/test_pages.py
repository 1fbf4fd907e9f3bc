"""The page over a real history on SQLite and PostgreSQL, through Starlette's test client:
what each page shows, paging, the one write (cancel) and its CSRF check, the token, the
Host check, the headers, escaping, and a read-only connection. A real browser drives the
real server in test_browser.py."""

from __future__ import annotations

import hmac
import html
import re
import secrets
from collections.abc import Iterator
from html.parser import HTMLParser
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from starlette.testclient import TestClient

from runner import Runner
from runner.sql.urls import redact_url
from runner.ui import make_app, pages
from runner.ui.security import TOKEN_COOKIE

from .agents import HOSTILE
from .seed import LONG_STEPS, Seeded

BASE = "http://127.0.0.1:8780"


@pytest.fixture(scope="module")
def client(seeded: Seeded) -> Iterator[TestClient]:
    with TestClient(make_app(seeded.url), base_url=BASE) as found:
        yield found


def run_links(page: str) -> list[str]:
    return re.findall(r'class="run-link" href="/runs/([^"]+)"', page)


def visible(page: str) -> str:
    """The page's text as a person reads it: tags gone, entities decoded, spaces collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def get(client: TestClient, path: str, **params: str) -> str:
    response = client.get(path, params=params) if params else client.get(path)
    assert response.status_code == 200, response.text
    return response.text


def all_ids(seeded: Seeded) -> list[str]:
    with Runner(seeded.url) as runner:
        return [row.id for row in runner.list(limit=1000)]


# -- the runs -------------------------------------------------------------------------------


def test_runs_are_listed_newest_first(client: TestClient, seeded: Seeded) -> None:
    shown = run_links(get(client, "/"))
    assert shown == all_ids(seeded)  # the store's own newest-first order
    assert shown[0] == seeded.running and len(shown) == 26


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"status": "queued"}, {"queued-1", "cancel-me"}),
        ({"status": "running"}, {"running-1"}),
        (
            {"release": "r2", "stop_reason": "max_steps"},
            {"r2-00", "r2-02", "r2-04", "r2-06", "r2-08", "long-1"},
        ),
        ({"agent": "long"}, {"long-1"}),
        ({"stop_reason": "tool_errors"}, {"fail-1"}),
        ({"agent": "nobody"}, set()),
        ({"status": "not-a-status"}, None),  # ignored: every run
    ],
)
def test_runs_are_filtered(
    client: TestClient, seeded: Seeded, params: dict[str, str], expected: set[str] | None
) -> None:
    page = get(client, "/", **params)
    shown = run_links(page)
    assert set(shown) == (expected if expected is not None else set(all_ids(seeded)))
    if not expected and expected is not None:
        assert "No runs match." in page


def test_runs_are_paged_by_keyset(
    client: TestClient, seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pages, "RUNS_PER_PAGE", 6)
    seen: list[str] = []
    page = get(client, "/", release="r2")
    while True:
        seen.extend(run_links(page))
        older = re.search(r'<a href="([^"]+)" rel="next">Older', page)
        if older is None:
            break
        response = client.get(html.unescape(older.group(1)))
        assert response.status_code == 200
        page = response.text
        assert "« Newest" in page
    expected = [i for i in all_ids(seeded) if i.startswith("r2-") or i in ("long-1", "fail-1")]
    assert seen == expected and len(seen) == 12


# -- one run --------------------------------------------------------------------------------


def test_a_run_is_a_conversation_with_its_tool_calls(client: TestClient) -> None:
    raw = get(client, "/runs/r1-00")
    page = visible(raw)
    assert "ok 1" not in page  # not another run's
    for text_shown in (
        "ok 0",  # the task
        "model calls add",
        "key r1-00-1",
        "done",
        "attempt 1",
        "add returned (attempt 1)",
        "the sum is 5",  # the answer
        "runner show r1-00",
        "runner export --run r1-00",
        "Stopped: answered.",
        "nobody",  # no owner: finished
    ):
        assert text_shown in page, text_shown
    assert "runner resume r1-00" not in page  # finished: nothing to resume
    assert 'action="/runs/r1-00/cancel"' not in raw


def test_every_command_a_page_shows_is_one_the_cli_has() -> None:
    from runner.cli import main
    from runner.ui.state import COMMANDS

    for name, arguments, _ in COMMANDS:
        assert name in main.commands, name
        options = {flag for param in main.commands[name].params for flag in param.opts}
        for word in arguments.split():
            assert not word.startswith("--") or word in options, (name, word)


def test_an_unfinished_run_shows_its_owner_lease_and_commands(
    client: TestClient, seeded: Seeded
) -> None:
    with Runner(seeded.url) as runner:
        row = runner.row(seeded.running)
    raw = get(client, f"/runs/{seeded.running}")
    page = visible(raw)
    assert row.lease_owner is not None and row.lease_owner in page
    assert "(live)" in page and f"epoch {row.lease_epoch}" in page
    assert f"runner resume {seeded.running}" in page
    assert f"runner cancel {seeded.running}" in page
    assert f'action="/runs/{seeded.running}/cancel"' in raw


def test_failed_steps_show_their_error_and_streak(client: TestClient, seeded: Seeded) -> None:
    page = visible(get(client, f"/runs/{seeded.failing}"))
    assert "broken failed (attempt 1)" in page
    assert "ValueError: broken tool called with 0" in page
    assert "3 failed in a row" in page
    assert "too many failed steps in a row (max_consecutive_errors=2)" in page


def steps_on(page: str) -> list[int]:
    return [int(n) for n in re.findall(r'<div class="step-head">step (\d+)', page)]


def test_a_long_transcript_is_paged(client: TestClient, seeded: Seeded) -> None:
    first = get(client, f"/runs/{seeded.long}")
    assert steps_on(first) == list(range(1, 51))
    assert '<div class="step-head">task' in first
    assert f"steps 1\u201350 of {LONG_STEPS}" in first
    middle = get(client, f"/runs/{seeded.long}", **{"from": "51"})
    assert steps_on(middle) == list(range(51, 101))
    assert '<div class="step-head">task' not in middle
    assert 'rel="prev">' in middle and 'rel="next">' in middle
    last = get(client, f"/runs/{seeded.long}", **{"from": "101"})
    assert steps_on(last) == list(range(101, LONG_STEPS + 1))
    assert 'rel="next">' not in last
    # A page past the end, or not a number, is the nearest real page.
    assert steps_on(get(client, f"/runs/{seeded.long}", **{"from": "99999"})) == steps_on(last)
    assert steps_on(get(client, f"/runs/{seeded.long}", **{"from": "x"})) == steps_on(first)
    # The chart draws every step's counters, whatever the page.
    assert first.count("<polyline") == 1


def test_missing_and_ambiguous_runs_are_one_line_404s(client: TestClient) -> None:
    missing = client.get("/runs/no-such-run")
    assert missing.status_code == 404
    assert "no run with id no-such-run" in missing.text
    ambiguous = client.get("/runs/r1-0")
    assert ambiguous.status_code == 404
    assert "more than one run id starts with r1-0" in ambiguous.text
    nowhere = client.get("/nowhere")
    assert nowhere.status_code == 404 and "no such page" in nowhere.text
    assert "Traceback" not in missing.text + ambiguous.text + nowhere.text


def test_a_unique_prefix_finds_the_run(client: TestClient) -> None:
    assert "ok 3" in visible(get(client, "/runs/r1-03"))
    assert "Run hostile-1" in visible(get(client, "/runs/hostil"))


# -- stop reasons per release ---------------------------------------------------------------


def test_the_regressed_release_is_flagged(client: TestClient) -> None:
    raw = get(client, "/stats")
    page = visible(raw)
    assert "<svg" in raw
    # r2: 5 of its 11 runs hit the step cap (the failing run is r2's too); r1: none of 10.
    assert "shop r2 : max_steps 0.0% → 45.5% (+45.5 points since shop r1" in page
    assert 'class="r-max_steps flagged"' in raw  # the bar's segment is marked
    assert "shop r1" in page and "10 runs" in page
    by_agent = visible(get(client, "/stats", by="agent"))
    assert "Stop reasons per agent" in by_agent and "Flagged rises" not in by_agent
    assert "Stop reasons per release" in visible(get(client, "/stats", by="nonsense"))
    only_long = visible(get(client, "/stats", agent="long"))
    assert "long r2" in only_long and "shop r1" not in only_long


# -- escaping -------------------------------------------------------------------------------


class Elements(HTMLParser):
    """Every element of a page with its attributes, as a browser's parser would see them."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str | None]]] = []
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, dict(attrs)))


@pytest.mark.parametrize("path", ["/", "/runs/hostile-1", "/stats", "/stats?by=agent"])
def test_model_and_tool_output_is_escaped_everywhere(client: TestClient, path: str) -> None:
    page = client.get(path).text
    elements = Elements(page).found
    assert elements and not [tag for tag, _ in elements if tag in ("script", "img", "iframe")]
    handlers = [(tag, a) for tag, attrs in elements for a in attrs if a.startswith("on")]
    assert handlers == []
    links = [attrs.get("href") or "" for tag, attrs in elements if tag == "a"]
    assert links and all(link.startswith(("/", "?")) for link in links), links
    assert not [tag for tag, _ in elements if tag in ("u", "i")]  # the agent's name and release
    if path == "/runs/hostile-1":
        # Shown as text: the task, the tool's result and the answer.
        assert html.unescape(page).count(HOSTILE) >= 3
        assert "&lt;script&gt;" in page


# -- the one write: cancel -------------------------------------------------------------------


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found, "no CSRF field in the form"
    return found.group(1)


def status_of(seeded: Seeded, run_id: str) -> tuple[str | None, str | None]:
    with Runner(seeded.url) as runner:
        result = runner.get(run_id)
    return result.status, None if result.stop_reason is None else str(result.stop_reason)


def test_cancel_is_a_post_with_a_csrf_token(client: TestClient, seeded: Seeded) -> None:
    target = f"/runs/{seeded.to_cancel}/cancel"
    page = get(client, f"/runs/{seeded.to_cancel}")
    token = csrf_of(page)
    refused = [
        client.post(target, data={}),
        client.post(target, data={"csrf": "0" * 64}),
        client.post(target, data={"csrf": token}, headers={"origin": "http://evil.example"}),
        TestClient(client.app, base_url=BASE).post(target, data={"csrf": token}),  # no cookie
    ]
    assert [r.status_code for r in refused] == [403, 403, 403, 403]
    assert status_of(seeded, seeded.to_cancel) == ("queued", None)
    assert client.get(target).status_code == 405  # a GET never writes

    done = client.post(target, data={"csrf": token}, follow_redirects=False)
    assert done.status_code == 303
    assert done.headers["location"] == f"/runs/{seeded.to_cancel}?notice=cancelled"
    assert status_of(seeded, seeded.to_cancel) == ("finished", "cancelled")
    after = get(client, done.headers["location"])
    assert "The run is cancelled." in visible(after)
    assert 'action="/runs/cancel-me/cancel"' not in after
    again = client.post(target, data={"csrf": token}, follow_redirects=False)
    assert again.headers["location"].endswith("notice=cancelled")


# -- who may see the page --------------------------------------------------------------------


def test_a_token_is_required_on_every_request(seeded: Seeded) -> None:
    with TestClient(make_app(seeded.url, token="s3cret"), base_url=BASE) as guarded:
        for path in ("/", "/runs/r1-00", "/stats", "/static/style.css", "/nowhere"):
            assert guarded.get(path).status_code == 401, path
        assert guarded.get("/", params={"token": "wrong"}).status_code == 401
        header = guarded.get("/", headers={"authorization": "Bearer s3cret"})
        assert header.status_code == 200
        opened = guarded.get(
            "/stats", params={"by": "day", "token": "s3cret"}, follow_redirects=False
        )
        assert opened.status_code == 303
        assert opened.headers["location"] == "/stats?by=day"  # the token leaves the URL
        assert "s3cret" not in opened.headers["set-cookie"]
        assert guarded.get("/stats", params={"by": "day"}).status_code == 200  # the cookie
        # The token cookie is for GETs and POSTs alike, the CSRF check still applies.
        assert guarded.post(f"/runs/{seeded.queued}/cancel", data={}).status_code == 403


def test_the_token_cookie_is_compared_in_constant_time(
    seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29: the cookie compared with `==` (which returns at the first byte that
    differs, so its time tells how much of a guess is right) survived the suite."""
    compared: list[tuple[object, object]] = []
    constant_time = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        compared.append((a, b))
        return constant_time(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    monkeypatch.setattr(secrets, "compare_digest", spy)
    with TestClient(make_app(seeded.url, token="s3cret"), base_url=BASE) as guarded:
        opened = guarded.get("/", params={"token": "s3cret"}, follow_redirects=False)
        cookie = guarded.cookies[TOKEN_COOKIE]
        assert opened.status_code == 303 and cookie
        for given, status in ((cookie, 200), ("0" * len(cookie), 401)):
            guarded.cookies.clear()
            guarded.cookies.set(TOKEN_COOKIE, given)
            del compared[:]
            assert guarded.get("/stats").status_code == status
            seen = {_text(value) for pair in compared for value in pair}
            assert given in seen, f"the cookie {given!r} never went through compare_digest"


def _text(value: object) -> object:
    return value.decode() if isinstance(value, bytes) else value


def test_without_a_token_only_loopback_names_are_served(seeded: Seeded) -> None:
    app = make_app(seeded.url)
    with TestClient(app, base_url="http://127.0.0.1:8780") as local:
        assert local.get("/").status_code == 200
        for host in ("localhost:8780", "[::1]:8780", "127.0.0.1"):
            assert local.get("/", headers={"host": host}).status_code == 200, host
        # A rebinding attack arrives with the attacker's name in Host.
        for host in ("evil.example", "evil.example:8780", "127.0.0.1.evil.example"):
            assert local.get("/", headers={"host": host}).status_code == 421, host


def test_every_response_forbids_scripts_and_frames(client: TestClient) -> None:
    for path in ("/", "/runs/r1-00", "/stats", "/runs/missing", "/static/style.css"):
        headers = client.get(path).headers
        assert "default-src 'none'" in headers["content-security-policy"], path
        policy = headers["content-security-policy"]
        # Scripts and connections: the server's own files and itself, nothing inline.
        assert "script-src 'self';" in policy and "connect-src 'self';" in policy
        assert "unsafe" not in policy
        assert headers["x-frame-options"] == "DENY"
        assert headers["x-content-type-options"] == "nosniff"
    assert client.get("/static/style.css").headers["content-type"].startswith("text/css")


def test_pages_read_through_a_read_only_connection(client: TestClient) -> None:
    reader = client.app.state.ui.reader  # type: ignore[attr-defined]
    with pytest.raises(SQLAlchemyError) as refused, reader.connect() as connection:
        connection.execute(text("UPDATE runs SET task = 'changed'"))
        connection.commit()
    assert "read" in str(refused.value).lower()  # readonly / read-only transaction


def test_no_page_shows_the_database_password(seeded: Seeded) -> None:
    url = make_url(seeded.url)
    if url.get_backend_name() == "postgresql":  # trust auth: any password connects
        url = url.set(password="SECRETPW")
    with TestClient(make_app(url.render_as_string(hide_password=False)), base_url=BASE) as app:
        for path in ("/", "/runs/r1-00", f"/runs/{seeded.long}", "/stats", "/runs/missing"):
            page = app.get(path).text
            assert "SECRETPW" not in page, path
            assert html.escape(redact_url(url)) in page, path


# -- provider limits ------------------------------------------------------------------------


def test_the_limits_page_shows_each_limit_and_its_headroom(client: TestClient) -> None:
    page = visible(get(client, "/limits"))
    assert "Provider limits" in page
    assert "openai/gpt-4.1" in page and "0 / 60,000" in page and "0 / 300" in page
