"""The package's layout: no import circle among runner's modules (every import counts: lazy
ones inside functions, type-only ones and `importlib.import_module` with a literal name, see
tests/unit/import_graph.py), and a CLI that documents every command and option. (That every
module imports first, in a fresh interpreter, and
that `--help` loads nothing heavy: tests/integration/test_startup_imports.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click

import runner
from runner.cli import main
from tests.unit.import_graph import cycles, import_graph, modules

PACKAGE = Path(runner.__file__).parent


def test_no_import_cycle_among_runner_modules() -> None:
    graph = import_graph(modules(PACKAGE, "runner"))
    assert "runner.cli.output" in graph["runner.cli.history"]  # the walk sees the CLI
    assert cycles(graph) == []


def test_the_cycle_check_itself_can_fail(tmp_path: Path) -> None:
    # The shape this layout avoids: a package whose __init__ registers a submodule's command
    # while the submodule takes a decorator from the package.
    root = tmp_path / "pkg"
    (root / "cli").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "cli" / "__init__.py").write_text(
        "from pkg.cli import runs\n\ndef reports_errors(fn):\n    return fn\n"
    )
    (root / "cli" / "runs.py").write_text("from pkg.cli import reports_errors\n")
    graph = import_graph(modules(root, "pkg"))
    assert graph["pkg.cli.runs"] == {"pkg.cli"}
    assert cycles(graph) == [["pkg.cli", "pkg.cli.runs"]]


HIDDEN = {
    # An import inside a function hides a circle from the interpreter, not from the test.
    "lazy": "def later():\n    from pkg.core import loop\n    return loop\n",
    # So does one the type checker alone reads.
    "type_only": (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.core.loop import drive\n"
    ),
    # And a module named to importlib or __import__ in a literal, relative ones too.
    "importlib": (
        "import importlib\ndef later():\n    return importlib.import_module('pkg.core.loop')\n"
    ),
    "relative": "import importlib\nloop = importlib.import_module('.loop', package='pkg.core')\n",
    "dunder": "def later():\n    return __import__('pkg.core.loop')\n",
}


def test_the_cycle_check_counts_every_import(tmp_path: Path) -> None:
    for how, text in HIDDEN.items():
        root = tmp_path / how / "pkg"
        (root / "core").mkdir(parents=True)
        (root / "__init__.py").write_text("")
        (root / "core" / "__init__.py").write_text("")
        (root / "core" / "loop.py").write_text("from pkg.core import tree\n")
        (root / "core" / "tree.py").write_text("import os\n")
        assert cycles(import_graph(modules(root, "pkg"))) == [], how
        (root / "core" / "tree.py").write_text(text)
        assert cycles(import_graph(modules(root, "pkg"))) == [["pkg.core.loop", "pkg.core.tree"]], (
            how
        )


def _commands(
    command: click.Command, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from _commands(sub, (*path, name))


def test_every_command_and_option_has_help() -> None:
    missing = []
    for path, command in _commands(main):
        where = " ".join(("runner", *path))
        if not (command.help or "").strip():
            missing.append(where)
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden and not param.help:
                missing.append(f"{where} {param.opts[-1]}")
    assert missing == []
    assert len(list(_commands(main))) > 10  # the walk reached the commands
