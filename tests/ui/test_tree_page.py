"""A run's page shows the tree of runs it is in: a child's page links its parent (and its
root), and every page of the tree draws the tree with each run's state, stop reason and
spend, each run a link to its own page, the run shown marked."""

from __future__ import annotations

import re
from pathlib import Path

from starlette.testclient import TestClient

from runner import Runner
from runner.ui import make_app
from tests.integration.trees import answers, build_tree

BASE = "http://127.0.0.1:8780"


def test_a_childs_page_links_its_parent_and_draws_the_tree(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tree.db'}"
    with Runner(url) as runner:
        build_tree(runner)
        runner.run(answers("alone"), "alone", id="single")
    with TestClient(make_app(url), base_url=BASE) as client:
        leaf = client.get("/runs/a1")
        assert leaf.status_code == 200
        page = leaf.text
        assert re.search(
            r'A sub-agent of run <a class="mono" href="/runs/a">a</a>, started by its'
            r" call <code>a-1</code>; its tree's root is run"
            r' <a class="mono" href="/runs/root">root</a>',
            page,
        ), page
        tree = page[
            page.index('<section class="tree">') : page.index(
                "</section>", page.index('<section class="tree">')
            )
        ]
        assert "4 runs · 6 steps · 600 tokens" in tree
        links = re.findall(r'<a class="mono" href="/runs/(\w+)"( aria-current="page")?>', tree)
        assert links == [("root", ""), ("a", ""), ("a1", ' aria-current="page"'), ("b", "")]
        assert re.search(r"b</a>\s+sub\s+<span class=\"status s-queued\">queued</span>", tree)
        assert 'call <span class="mono">root-2</span>' in tree
        root = client.get("/runs/root").text
        assert "A sub-agent of" not in root and '<section class="tree">' in root
        alone = client.get("/runs/single").text  # a run alone in its tree: no tree drawn
        assert '<section class="tree">' not in alone and "A sub-agent of" not in alone
