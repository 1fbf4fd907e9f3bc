"""The page marks where a run was compacted: the summary the model was shown from there on,
in the step whose model call it came before."""

from __future__ import annotations

import html
import re
from pathlib import Path

from starlette.testclient import TestClient

from runner import Agent, Compaction, Runner
from runner.sql.database import open_engine, upgrade
from runner.ui import make_app
from tests.unit.test_compaction import Reader, read


def test_the_page_shows_the_summary_where_it_was_made(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runner.db'}"
    engine = open_engine(url)
    upgrade(engine)
    engine.dispose()
    agent = Agent(Reader(last=4), {"read": read}, context=Compaction(above_tokens=300,
                  keep_steps=1), max_steps=10, max_tokens=None, max_repeats=None)  # fmt: skip
    with Runner(url) as runner:
        assert runner.run(agent, "read", id="compacted").output == "done"
    with TestClient(make_app(url), base_url="http://127.0.0.1:8780") as client:
        raw = client.get("/runs/compacted").text
    page = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", raw)).split())
    mark = page.index("compacted: the model is shown this summary of the first 2 steps")
    # Asked before step 4's model call: after step 3, before step 4's call.
    assert page.index("page 3 ") < mark < page.index("read up to page 2", mark)
    assert page.index("read up to page 2", mark) < page.index("page 4 ", mark)
