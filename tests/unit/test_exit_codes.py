"""The exit codes each command's --help names agree with the manual's list of exit codes
(docs/reference/commands.md).

`runner replay --help` once said it exits 4 when the agent differs, while the code and the
manual say 5 (4 is a run waiting for a person's answer). Each code a help text names must be
one the manual lists, for the same thing: the words around it share a word with the manual's.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from runner.cli import main
from runner.cli.runs import EXIT_DIFFERS, EXIT_FINAL, EXIT_STOPPED, EXIT_WAITING

LISTED = Path(__file__).resolve().parents[2] / "docs" / "reference" / "commands.md"

# "0 for a final answer", "5 when it differs", "1 on errors": a code, then what it means.
_CODE = re.compile(r"(?<![\w+-])(\d{1,3})\s+(?:for|when|on)\s")
# "... exits 4": what it means comes before it, from the clause's start.
_EXITS = re.compile(r"([^.:;]*?)\bexits\s+(\d{1,3})\b")
_FILLER = frozenset(
    [
        "a",
        "an",
        "and",
        "any",
        "as",
        "at",
        "by",
        "for",
        "from",
        "if",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "run",
        "runs",
        "the",
        "that",
        "to",
        "when",
        "with",
        "runner",
    ]
)


def _words(text: str) -> frozenset[str]:
    """The words that carry meaning, crudely stemmed (waits/waiting -> wait)."""
    words = set()
    for word in re.findall(r"[a-z]+", text.lower()):
        if word in _FILLER or len(word) < 2:
            continue
        words.add(re.sub(r"(ing|ed|es|s)$", "", word) or word)
    return frozenset(words)


def _pairs(text: str) -> list[tuple[int, frozenset[str]]]:
    """Each exit code `text` names, with the words that say what it means."""
    text = " ".join(text.split())
    found: list[tuple[int, frozenset[str]]] = []
    listed = text[text.index("Exit code") :] if "Exit code" in text else ""
    matches = list(_CODE.finditer(listed))
    ends = [m.start() for m in matches[1:]] + [len(listed)]
    for match, end in zip(matches, ends[: len(matches)], strict=True):
        meaning = re.split(r"[.;](?:\s|$)", listed[match.end() : end])[0]
        found.append((int(match.group(1)), _words(meaning)))
    for match in _EXITS.finditer(text):
        found.append((int(match.group(2)), _words(match.group(1))))
    return found


def listed_codes() -> dict[int, frozenset[str]]:
    """The manual's list: the paragraph that begins its exit codes, code -> meaning."""
    paragraphs = LISTED.read_text(encoding="utf-8").split("\n\n")
    (listing,) = [p for p in paragraphs if "Exit codes:" in p]
    codes: dict[int, frozenset[str]] = {}
    for code, words in _pairs(listing):
        codes[code] = codes.get(code, frozenset()) | words
    return codes


def commands(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    found: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        found[prefix + name] = command
        if isinstance(command, click.Group):
            found.update(commands(command, f"{prefix}{name} "))
    return found


def test_the_manual_lists_the_codes_the_cli_exits_with() -> None:
    codes = listed_codes()
    assert {EXIT_FINAL, EXIT_STOPPED, EXIT_WAITING, EXIT_DIFFERS, 1, 2, 130} <= set(codes)
    assert "differ" in codes[EXIT_DIFFERS] and "wait" in codes[EXIT_WAITING]


def test_every_exit_code_a_help_names_means_what_the_manual_says() -> None:
    codes = listed_codes()
    checked = set()
    for name, command in commands(main).items():
        for code, words in _pairs(command.help or ""):
            checked.add(name)
            assert code in codes, f"runner {name} --help names exit code {code}: not in the manual"
            assert words & codes[code], (
                f"runner {name} --help says exit code {code} means {sorted(words)}; the "
                f"the manual says it means {sorted(codes[code])}"
            )
    assert {"run", "resume", "replay"} <= checked  # the help texts that name codes were read


def test_replay_help_names_the_code_it_exits_with_when_the_agent_differs() -> None:
    help_text = " ".join((main.commands["replay"].help or "").split())
    assert f"{EXIT_DIFFERS} when it differs" in help_text
