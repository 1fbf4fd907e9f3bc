"""Every page of the manual can be found: each Markdown file under docs/ is in mkdocs.yml's
nav (a guide added without it would build, and be reachable from no menu), and each page the
nav names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def nav_pages() -> list[str]:
    """The pages named in mkdocs.yml's nav (`- Title: path.md` lines after `nav:`)."""
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = config.split("\nnav:\n", 1)[1]
    return re.findall(r"^\s+- (?:[^:\n]+: )?(\S+\.md)\s*$", nav, re.M)


def test_every_page_is_in_the_nav() -> None:
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    listed = nav_pages()
    missing = sorted(pages - set(listed))
    assert not missing, f"add these pages to mkdocs.yml's nav: {missing}"
    assert sorted(set(listed) - pages) == [], "mkdocs.yml's nav names pages that do not exist"
    assert len(listed) == len(set(listed)), "a page is in the nav twice"


def test_the_commands_at_a_glance_name_every_command() -> None:
    """docs/reference/commands.md's table names each command (it once left out two)."""
    import click

    from runner.cli import main

    def leaves(command: click.Command, path: tuple[str, ...] = ()) -> list[str]:
        if not isinstance(command, click.Group):
            return [" ".join(path)]
        return [n for name, sub in command.commands.items() for n in leaves(sub, (*path, name))]

    page = (DOCS / "reference" / "commands.md").read_text(encoding="utf-8")
    table = "\n".join(line for line in page.splitlines() if line.startswith("| `runner "))
    missing = [name for name in leaves(main) if f"`runner {name}" not in table]
    assert not missing, f"docs/reference/commands.md's table does not name {missing}"
