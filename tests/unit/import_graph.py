"""runner's real import graph, read from the source (nothing is imported to read it), for the
layer and circle tests (test_layers.py, test_layout.py).

Every import counts: at module level, inside a function (a lazy import), under
`if TYPE_CHECKING:`, and a call of `importlib.import_module` or `__import__` with a literal
name. A lazy or type-only import that closes a circle still ties the two modules together;
it only hides the circle from the interpreter.
"""

from __future__ import annotations

import ast
from pathlib import Path

_DYNAMIC = frozenset({"import_module", "__import__"})


def modules(root: Path, package: str) -> dict[str, Path]:
    """Every module of the package in the folder `root`, by dotted name, found on disk."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _resolved(name: str, is_package: bool, level: int, module: str | None) -> str:
    """The absolute module of `from <level dots><module> import ...` in module `name`."""
    if not level:
        return module or ""
    base = name.split(".")
    base = base[: len(base) - level + (1 if is_package else 0)]
    return ".".join(base + ([module] if module else []))


def _dynamic_target(node: ast.Call, name: str, is_package: bool) -> str | None:
    """The module an `importlib.import_module("...")` or `__import__("...")` call names,
    when the name is a literal (a relative one resolved against `package=`, if literal)."""
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if called not in _DYNAMIC or not node.args:
        return None
    first = node.args[0]
    if not isinstance(first, ast.Constant) or not isinstance(first.value, str):
        return None
    target = first.value
    if not target.startswith("."):
        return target
    package = next((k.value for k in node.keywords if k.arg == "package"), None)
    if isinstance(package, ast.Constant) and isinstance(package.value, str):
        anchor = package.value
    else:
        anchor = name if is_package else name.rpartition(".")[0]
    level = len(target) - len(target.lstrip("."))
    parts = anchor.split(".")
    parts = parts[: len(parts) - level + 1]
    rest = target.lstrip(".")
    return ".".join(parts + ([rest] if rest else []))


def every_import(path: Path, name: str, known: set[str] | dict[str, Path]) -> list[tuple[str, int]]:
    """Every module of `known` that the module `name` (at `path`) imports, anywhere in it,
    with the line of each import."""
    is_package = path.name == "__init__.py"
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = _resolved(name, is_package, node.level, node.module)
            # `from pkg import sub` imports the submodule; `from pkg import name`, pkg.
            targets = [
                f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source
                for alias in node.names
            ]
        elif isinstance(node, ast.Call):
            target = _dynamic_target(node, name, is_package)
            if target is None:
                continue
            targets = [target]
        else:
            continue
        found += [(target, node.lineno) for target in targets if target in known]
    return found


def import_graph(found: dict[str, Path]) -> dict[str, set[str]]:
    """Which of the package's modules each one imports, anywhere in it."""
    return {
        name: {target for target, _ in every_import(path, name, found) if target != name}
        for name, path in found.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of the graph, each as the modules around it (Tarjan's components)."""
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
