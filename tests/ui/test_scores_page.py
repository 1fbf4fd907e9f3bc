"""Scores on the page, in a real browser (headless chromium, as tests/ui/test_browser.py):
a run's scores on its page, and each release's score means with a planted drop flagged on
the stop reasons page, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from runner import Runner

from .seed import Seeded
from .test_browser import Server, _chrome, by_css


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = _chrome(scripts=False)
    yield driver
    driver.quit()


def test_the_page_shows_a_runs_scores_and_the_scores_per_release(
    seeded: Seeded, browser: Any, tmp_path: Any
) -> None:
    with Runner(seeded.url) as runner:
        for run_id in seeded.finished:  # release 1 answers well, release 2 worse
            good = run_id.startswith("r1-")
            runner.score(run_id, "helpful", (0.9 if good else 0.4) + 0.01 * (len(run_id) % 3))
        runner.score("r1-00", "correct", 1, note="checked by hand")
    server = Server(seeded.url, tmp_path / "server.log")
    try:
        browser.get(server.base + "/runs/r1-00")
        card = by_css(browser, ".card.scores")[0].text
        assert "correct\n1 (given) checked by hand" in card and "helpful\n0.9" in card

        browser.get(server.base + "/stats")
        rows = [r.text for r in by_css(browser, "table.scores tbody tr")]
        assert [r.split()[:4] for r in rows] == [
            ["shop", "r1", "correct", "1"],
            ["shop", "r1", "helpful", "10"],
            ["shop", "r2", "helpful", "10"],
        ]
        [flagged] = [r for r in rows if "▼" in r]
        assert flagged.startswith("shop r2 helpful")
        assert "helpful 0.9" in by_css(browser, "ul.drops li")[0].text
    finally:
        server.close()
