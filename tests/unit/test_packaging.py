"""pyproject.toml against the folders on disk: every folder of Python modules under runner/
(and migrations/) is a package the wheel lists, and every folder of data files is package
data of its package. A folder left out is either missing from the wheel, or (with
setuptools' include-package-data) one of the ~80 lines of "Package 'runner.ui.static' is
absent from the `packages` configuration" every install used to print. That the wheel
really carries them, built quietly: tests/migrations/test_migrations.py."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def setuptools_table(text: str | None = None) -> dict[str, Any]:
    config = tomllib.loads(text or (REPO / "pyproject.toml").read_text())
    table: dict[str, Any] = config["tool"]["setuptools"]
    return table


def folders_on_disk() -> tuple[dict[str, Path], dict[Path, list[Path]]]:
    """(package name -> folder) of every folder holding modules, and (folder -> files) of
    every folder holding only data, under runner/ and migrations/."""
    packages: dict[str, Path] = {}
    data: dict[Path, list[Path]] = {}
    roots = {"runner": REPO / "runner", "runner.migrations": REPO / "migrations"}
    for name, root in roots.items():
        for folder in [root, *sorted(p for p in root.rglob("*") if p.is_dir())]:
            if folder.name == "__pycache__":
                continue
            files = [p for p in folder.iterdir() if p.is_file() and p.suffix != ".pyc"]
            if any(p.suffix == ".py" for p in files):
                dotted = ".".join([name, *folder.relative_to(root).parts])
                packages[dotted] = folder
            elif files:
                data[folder] = files
    return packages, data


def unlisted(table: dict[str, Any]) -> list[str]:
    """What the wheel's configuration leaves out, in words."""
    packages, data = folders_on_disk()
    listed = set(table.get("packages", []))
    missing = [f"package {name} ({folder})" for name, folder in packages.items()
               if name not in listed]  # fmt: skip
    package_data: dict[str, list[str]] = table.get("package-data", {})
    for folder, files in data.items():
        owner = next((name for name, path in packages.items() if path == folder.parent), None)
        patterns = package_data.get(owner or "", [])
        for file in files:
            relative = f"{folder.name}/{file.name}"
            if not any(fnmatch.fnmatch(relative, pattern) for pattern in patterns):
                missing.append(f"data file {file.relative_to(REPO)} (package data of {owner})")
    for name, folder in packages.items():
        patterns = package_data.get(name, [])
        for file in folder.iterdir():
            data_file = file.is_file() and file.suffix not in (".py", ".pyc")
            if data_file and not any(fnmatch.fnmatch(file.name, p) for p in patterns):
                missing.append(f"data file {file.relative_to(REPO)} (package data of {name})")
    return missing


def test_every_folder_of_modules_is_a_package_and_every_data_file_package_data() -> None:
    table = setuptools_table()
    assert unlisted(table) == []
    # Data folders are never packages of their own, and setuptools is not left to guess.
    assert table.get("include-package-data") is False
    packages, _ = folders_on_disk()
    assert sorted(table["packages"]) == sorted(packages)


def test_the_check_finds_a_package_left_out() -> None:
    table = setuptools_table()
    table["packages"] = [name for name in table["packages"] if name != "runner.tracing"]
    table["package-data"] = {**table["package-data"], "runner.ui": ["templates/*.html"]}
    assert sorted(unlisted(table)) == [  # sorted: a folder lists its files in any order
        "data file runner/ui/static/follow.js (package data of runner.ui)",
        "data file runner/ui/static/style.css (package data of runner.ui)",
        f"package runner.tracing ({REPO / 'runner' / 'tracing'})",
    ]
