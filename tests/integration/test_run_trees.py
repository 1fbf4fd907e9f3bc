"""Trees of runs, seen, on SQLite and PostgreSQL: a root with two children and a grandchild,
each a real durable run inserted with its parent's call key (as a sub-agent's call inserts
it) and run to its end. `show` names each run's parent and children, `show --tree` and
`list --tree` draw the tree with each run's state, stop reason and spend, `root_spend` sums
it, and a fork of the root is a root of its own, never a part of the tree."""

from __future__ import annotations

import json

from click.testing import CliRunner
from sqlalchemy import text

from runner import Runner
from runner.cli import main

from .trees import answers, build_tree


def cli(db_url: str, *args: str) -> str:
    done = CliRunner().invoke(main, [*args, "--db", db_url])
    assert done.exit_code == 0, done.output
    return done.output


def test_a_tree_is_read_whole_from_any_of_its_runs(db_url: str) -> None:
    with Runner(db_url) as runner:
        build_tree(runner)
        assert [runner.row(i).root_id for i in ("root", "a", "b", "a1")] == ["root"] * 4
        assert (runner.row("a1").parent_id, runner.row("a1").parent_call_key) == ("a", "a-1")
        for run_id in ("root", "a", "b", "a1"):
            tree = runner.tree(run_id)
            shape = [(t.row.id, [c.row.id for c in t.children]) for t in tree.walk()]
            assert shape == [("root", ["a", "b"]), ("a", ["a1"]), ("a1", []), ("b", [])]
        tree = runner.tree("b")
        # Each run's own spend: root and a took 3 and 2 steps, a1 one, b none yet.
        assert [(t.row.id, t.row.steps, t.row.tokens) for t in tree.walk()] == [
            ("root", 3, 300), ("a", 2, 200), ("a1", 1, 100), ("b", 0, 0),
        ]  # fmt: skip
        assert (tree.runs, tree.steps, tree.tokens, tree.cost) == (4, 6, 600, 1.5)


def test_root_spend_sums_the_tree(db_url: str) -> None:
    with Runner(db_url) as runner:
        build_tree(runner)
        runner.run(answers("alone"), "alone", id="single")
        with runner.engine.connect() as connection:
            found = connection.execute(
                text(
                    "SELECT root_id, runs, steps, tokens, cost, queued, running, waiting,"
                    " finished FROM root_spend ORDER BY root_id"
                )
            ).all()
    assert [tuple(row) for row in found] == [
        ("root", 4, 6, 600, 1.5, 1, 0, 0, 3),
        ("single", 1, 1, 100, 0.25, 0, 0, 0, 1),
    ]


def test_show_names_the_parent_and_the_children(db_url: str) -> None:
    with Runner(db_url) as runner:
        build_tree(runner)
    page = cli(db_url, "show", "a")
    assert "parent    run root, started by its call root-1 (step 1)\n" in page
    assert "children  1: a1 (finished: final)\n" in page
    assert "tree      4 runs, 6 steps, 600 tokens, cost 1.5 (runner show a --tree)\n" in page
    leaf = cli(db_url, "show", "a1")
    assert "parent    run a, started by its call a-1 (step 1)\nroot      run root\n" in leaf
    assert "children" not in leaf
    top = cli(db_url, "show", "root")
    assert "children  2: a (finished: final), b (queued)\n" in top and "parent" not in top
    document = json.loads(cli(db_url, "show", "a", "--json"))
    assert (document["parent_id"], document["root_id"], document["parent_call_key"]) == (
        "root", "root", "root-1",
    )  # fmt: skip
    assert document["children"] == ["a1"]


def test_show_tree_draws_each_run_with_its_state_stop_and_spend(db_url: str) -> None:
    with Runner(db_url) as runner:
        build_tree(runner)
    drawn = cli(db_url, "show", "a1", "--tree").splitlines()
    assert drawn == [
        "root  boss  finished: final  3 steps, 300 tokens, cost 0.75",
        "├── a  sub  finished: final  2 steps, 200 tokens, cost 0.5  called at step 1",
        "│   └── a1  sub  finished: final  1 step, 100 tokens, cost 0.25  called at step 1"
        "  <- this run",
        "└── b  sub  queued  0 steps, 0 tokens, cost 0  called at step 2",
        "tree: 4 runs, 6 steps, 600 tokens, cost 1.5",
    ]
    data = json.loads(cli(db_url, "show", "b", "--tree", "--json"))
    assert data["tree"] == {"runs": 4, "steps": 6, "tokens": 600, "cost": 1.5, "cut": False}
    assert [c["id"] for c in data["children"]] == ["a", "b"]
    assert data["children"][0]["children"][0] == {
        "id": "a1", "agent_name": "sub", "status": "finished", "state": "finished",
        "stop_reason": "final", "steps": 1, "tokens": 100, "cost": 0.25, "parent_id": "a",
        "parent_call_key": "a-1", "children": [],
    }  # fmt: skip


def test_list_tree_draws_each_listed_tree_once_and_a_fork_apart(db_url: str) -> None:
    with Runner(db_url) as runner:
        build_tree(runner)
        forked = runner.fork("root", 1, id="fk")
        assert runner.row(forked).root_id == "fk"  # a fork is a root of its own
        assert runner.tree("fk").runs == 1
        assert runner.tree("root").find("fk") is None
    drawn = cli(db_url, "list", "--tree")
    trees = drawn.split("\n\n")
    # Newest first: the fork's tree, then root's (listed through several of its runs).
    assert trees[0].splitlines() == [
        "fk  boss  queued  1 step, 100 tokens, cost 0.25",
        "tree: 1 run, 1 step, 100 tokens, cost 0.25",
    ]
    assert trees[1].splitlines()[0] == "root  boss  finished: final  3 steps, 300 tokens, cost 0.75"
    assert len(trees) == 2
    only_b = json.loads(cli(db_url, "list", "--tree", "--status", "queued", "--json"))
    assert [tree["id"] for tree in only_b] == ["fk", "root"]  # b's tree, drawn from its root


def test_stats_by_root_counts_each_tree_for_its_roots_agent(db_url: str) -> None:
    with Runner(db_url) as runner:
        build_tree(runner)
        runner.run(answers("alone"), "alone", id="single")  # a root of agent "sub"
    by_agent = json.loads(cli(db_url, "stats", "--by", "agent", "--json"))
    assert [(g["group"], g["runs"]) for g in by_agent["groups"]] == [("boss", 1), ("sub", 3)]
    by_root = json.loads(cli(db_url, "stats", "--by", "root", "--json"))
    # root, a and a1 finished in boss's tree (b is queued); single is sub's own.
    assert [(g["group"], g["runs"]) for g in by_root["groups"]] == [("boss", 3), ("sub", 1)]
    assert cli(db_url, "stats", "--by", "root").splitlines() == [
        "ROOT  RUNS  final",
        "boss     3  3 100.0%",
        "sub      1  1 100.0%",
    ]
