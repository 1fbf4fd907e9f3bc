"""The package's layout: no import cycle among runner's modules, and a CLI that documents
every command and option. (That every module imports first, in a fresh interpreter, and
that `--help` loads nothing heavy: tests/integration/test_startup_imports.py.)"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import click

import runner
from runner.cli import main

PACKAGE = Path(runner.__file__).parent


def modules(root: Path, package: str) -> dict[str, Path]:
    """Every module of the package in the folder `root`, by dotted name, found on disk (none
    is imported to find it)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements run when the module is imported: not function bodies, and not the
    `if TYPE_CHECKING:` blocks that only the type checker reads."""
    for node in body:
        if isinstance(node, ast.If):
            test = node.test
            checking = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
            )
            if not checking:
                yield from _module_level(node.body)
            yield from _module_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, *(h.body for h in node.handlers), node.orelse):
                yield from _module_level(block)
            yield from _module_level(node.finalbody)
        elif isinstance(node, ast.With):
            yield from _module_level(node.body)
        else:
            yield node


def import_graph(found: dict[str, Path]) -> dict[str, set[str]]:
    """Which of the package's modules each one imports when it is imported."""
    graph: dict[str, set[str]] = {}
    for name, path in found.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for node in _module_level(ast.parse(path.read_text(), str(path)).body):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from . import x, from .y import z
                    base = name.split(".")
                    base = base[: len(base) - node.level + (1 if is_package else 0)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                for alias in node.names:
                    # `from pkg import sub` imports the submodule; `from pkg import name`, pkg.
                    sub = f"{source}.{alias.name}"
                    targets.add(sub if sub in found else source)
        graph[name] = {t for t in targets if t in found and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of the graph, each as the modules around it (Tarjan's components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


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
    (root / "cli" / "runs.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from pkg.cli import reports_errors\n"
        "if TYPE_CHECKING:\n    import pkg\n"
        "def later():\n    import pkg\n"
    )
    graph = import_graph(modules(root, "pkg"))
    assert graph["pkg.cli.runs"] == {"pkg.cli"}  # neither the TYPE_CHECKING nor the lazy one
    assert cycles(graph) == [["pkg.cli", "pkg.cli.runs"]]


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
