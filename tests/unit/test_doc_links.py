"""Every relative link in the README, CHANGES.md and docs/ leads somewhere: the file
exists and, when the link names a heading (`page.md#heading`), the page has that heading,
by GitHub's rule for a heading's anchor. Links to the web are not followed (no network)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CHANGES.md", *sorted((ROOT / "docs").rglob("*.md"))]

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"(`+).+?\1", re.S)
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)


def prose(text: str) -> str:
    """The text without its fenced blocks and code spans (a link or heading in code is not)."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in it: its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings; a repeated one gets -1, -2, ... as on GitHub."""
    found: set[str] = set()
    seen: Counter[str] = Counter()
    for heading in _HEADING.findall(_FENCE.sub("", page.read_text(encoding="utf-8"))):
        base = anchor(heading)
        found.add(base if not seen[base] else f"{base}-{seen[base]}")
        seen[base] += 1
    return found


def links(page: Path) -> list[str]:
    text = prose(page.read_text(encoding="utf-8"))
    return _LINK.findall(text) + _REFERENCE.findall(text)


def broken(page: Path) -> list[str]:
    """The page's relative links (and anchors) that lead nowhere."""
    wrong = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:: not followed
            continue
        path, _, fragment = target.partition("#")
        destination = (page.parent / unquote(path)).resolve() if path else page
        if not destination.exists():
            wrong.append(f"{target}: no such file")
        elif (
            fragment
            and destination.suffix == ".md"
            and unquote(fragment) not in anchors(destination)
        ):
            wrong.append(f"{target}: {destination.name} has no such heading")
    return wrong


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    assert not broken(page), f"{page.relative_to(ROOT)}: {broken(page)}"


def test_the_check_sees_links_and_headings() -> None:
    """The checker itself: GitHub's anchors, links in code ignored, a wrong one caught."""
    assert anchor("Start-up: `runner --help` and `runner list`") == (
        "start-up-runner---help-and-runner-list"
    )
    assert anchor("SQLite: `synchronous=FULL` by default, NORMAL as an opt-in") == (
        "sqlite-synchronousfull-by-default-normal-as-an-opt-in"
    )
    sample = "See [a](docs/x.md#y) and `[b](nowhere.md)`.\n```\n[c](nor.md)\n```\n"
    assert _LINK.findall(prose(sample)) == ["docs/x.md#y"]
    readme = ROOT / "README.md"
    assert "the-two-commands" in anchors(readme)
    assert any(target.startswith("docs/") for target in links(readme))
