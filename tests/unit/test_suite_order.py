"""The suite runs its fastest layers first: a failure in the unit layer shows in seconds, not
after the acceptance tests' subprocesses (issue 34: a busy machine ran only acceptance tests
for 40 minutes)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ["unit", "integration", "migrations", "providers", "ui", "over_mcp", "acceptance"]


def test_testpaths_name_every_layer_fastest_first() -> None:
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    paths = options["ini_options"]["testpaths"]
    assert paths == [f"tests/{layer}" for layer in LAYERS]
    # A new folder of tests would not run at all unless it is named here.
    found = {p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and any(p.glob("test_*.py"))}
    assert found == set(LAYERS)


def test_make_test_keeps_the_collection_order_across_workers() -> None:
    """`-n auto` alone means `--dist load`, which hands each worker consecutive tests from
    the front of the collection as it asks for more; `loadfile` or `loadscope` would
    spread the files of every layer from the start."""
    makefile = (ROOT / "Makefile").read_text()
    [line] = [line for line in makefile.splitlines() if "-m pytest -n" in line]
    assert "--dist" not in line or "--dist load " in f"{line} "
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    assert "--dist" not in options["ini_options"].get("addopts", "")
