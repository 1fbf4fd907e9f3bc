"""The README and the manual (docs/) are accurate to the letter: their code blocks run.

Each page's ```bash and ```python blocks run in the order the page gives them, in a scratch
folder holding a copy of examples/, against a scratch SQLite database (RUNNER_DATABASE_URL),
with the venv's `runner` first on PATH (the pages say `runner ...` for a shell where the venv
is active). A bash block runs line by line: each line must exit 0, or the code its comment
names (`runner ...  # exits 4: it waits`), and print no traceback. A python block runs in this
process, as a script would.

A block that cannot run there (it needs a provider's key, or serves until stopped) is
marked by a `<!-- not-run: reason -->` comment on the line before it; those are counted and
kept few. Blocks fenced `text`, `json`, `sql` or with no language are output, data or
statements for an administrator, shown and not run (the documented SQL queries are run by
tests/integration/test_history.py). Any other fence is refused: a block is either run or
says why not.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUN = {"bash", "python"}
SHOWN = {"", "text", "json", "sql"}
# Few on purpose: a block that is not run is a block that can silently go wrong.
MOST_NOT_RUN = 12

_FENCE = re.compile(r"^([ \t]*)```(\S*)")
_NOT_RUN = re.compile(r"^\s*<!--\s*not-run:\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # where its fence opens, from 1
    language: str
    code: str
    not_run: str | None  # the reason given, for a block marked not to run

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def page_blocks(page: Path) -> list[Block]:
    """Every fenced block of a page, those indented in a list item too (dedented)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opened = _FENCE.match(lines[index])
        if not opened:
            index += 1
            continue
        before = next((line for line in reversed(lines[:index]) if line.strip()), "")
        marked = _NOT_RUN.match(before)
        body: list[str] = []
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith("```"):
            body.append(lines[end])
            end += 1
        code = textwrap.dedent("\n".join(body)) + "\n"
        found.append(
            Block(page, index + 1, opened.group(2), code, marked.group(1) if marked else None)
        )
        index = end + 1
    return found


ALL = [block for page in PAGES for block in page_blocks(page)]


def commands(block: Block) -> list[tuple[str, str]]:
    """A bash block's commands with their comments; a line ending in `\\` goes on."""
    joined = block.code.replace("\\\n", " ")
    pairs = [line.partition("  #")[::2] for line in joined.splitlines()]
    return [(c.strip(), note.strip()) for c, note in pairs if c.strip()]


def expected_exit(command: str, comment: str) -> set[int]:
    # Killed by SIGKILL: a shell reports 137; bash -c may exec the command itself (-9).
    if "kill -KILL" in command:
        return {137, -9}
    said = re.match(r"exits (\d+)", comment)
    return {int(said.group(1))} if said else {0}


# What some commands must print, beyond exiting as their comment says: the claims the prose
# around them makes (command suffix or fragment -> a check of stdout and stderr).
def _stalled_is_demo_crash(out: str, err: str) -> None:
    assert out.splitlines()[1].split()[:2] == ["demo-crash", "stalled"], out


def _answers_35(out: str, err: str) -> None:
    assert out.strip() == "35", (out, err)


def _shows_one_resume(out: str, err: str) -> None:
    assert "finished: final" in out
    assert re.search(r", 1 resume$", out, re.M), out  # not "1 resumes"


def _forked(out: str, err: str) -> None:
    assert out.strip() == "35"
    assert "forked from demo-crash at step 1" in err


def _agrees(out: str, err: str) -> None:
    assert "agrees" in out, out


def _tree_answer(out: str, err: str) -> None:
    assert out.strip() == "Yes, in moderation: the web and the papers agree.", (out, err)


def _stalled_children(out: str, err: str) -> None:
    stalled = [line.split() for line in out.splitlines()[1:]]
    assert stalled and all(row[0].startswith("demo-tree") for row in stalled), out


def _refund_waits(out: str, err: str) -> None:
    assert "runner approve refund-1 --call refund-1-2" in err, err


def _refunded(out: str, err: str) -> None:
    assert out.strip() == "Done: refunded 249.00 EUR on order 1042.", (out, err)


def _denied(out: str, err: str) -> None:
    assert "Denied: refunded already, as refund-1" in out, out
    assert "answer    No refund for 1042." in out, out


def _order_unknown(out: str, err: str) -> None:
    # The destructive MCP call cut short is not made again: the model is told so.
    assert out.strip() == "I cannot tell whether the order of 2 tea went through: check it."


def _gate_names_the_run(out: str, err: str) -> None:
    assert "run deploy-small differs at step 1: the run called lookup_order" in out, out


def _parked_by_the_check(out: str, err: str) -> None:
    assert "queued (parked: check_failed; for a worker of release 1)" in out, out
    assert "has no tool lookup_order" in out, out


CHECKS: dict[str, Callable[[str, str], None]] = {
    "runner list --status stalled  # demo-crash": _stalled_is_demo_crash,
    "runner resume demo-crash": _answers_35,
    "runner resume demo-short --max-steps 5": _answers_35,
    "runner show demo-crash": _shows_one_resume,
    "runner fork demo-crash --at-step 1 --id demo-fork": _forked,
    "runner replay demo-crash": _agrees,
    "runner resume demo-tree": _tree_answer,
    "runner list --status stalled  # the sub-agents": _stalled_children,
    "--id refund-1  # exits 4": _refund_waits,
    "runner resume refund-1": _refunded,
    "runner show refund-2": _denied,
    "runner resume mcp-demo": _order_unknown,
    "--since 1d  # exits 5": _gate_names_the_run,
    "runner show deploy-check": _parked_by_the_check,
}


def _check_for(line: str) -> Callable[[str, str], None] | None:
    for fragment, check in CHECKS.items():
        if line.strip().endswith(fragment) or ("  #" in fragment and fragment in line):
            return check
    return None


def run_line(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def scratch(tmp_path: Path) -> dict[str, str]:
    """A folder as a reader's checkout looks (examples/ in it), and the environment."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    env = {**os.environ, "RUNNER_DATABASE_URL": f"sqlite:///{tmp_path / 'docs.db'}"}
    env["PATH"] = f"{BIN}:{env['PATH']}"
    return env


def test_every_block_is_run_or_says_why_not() -> None:
    unknown = [b.where + f" ```{b.language}" for b in ALL if b.language not in RUN | SHOWN]
    assert not unknown, f"fence these bash or python (run), or text, json or sql: {unknown}"
    unexplained = [b.where for b in ALL if b.not_run is not None and not b.not_run]
    assert not unexplained, f"a not-run block says why: {unexplained}"
    stray = [b.where for b in ALL if b.not_run is not None and b.language not in RUN]
    assert not stray, f"only bash and python blocks are run, so only they are marked: {stray}"


def test_the_blocks_not_run_are_at_least_well_formed() -> None:
    """What is not run is still parsed: Python compiles, bash passes `bash -n`."""
    for block in (b for b in ALL if b.not_run is not None):
        if block.language == "python":
            compile(block.code, block.where, "exec")
        else:
            parsed = subprocess.run(
                ["bash", "-n"], input=block.code, capture_output=True, text=True, check=False
            )
            assert parsed.returncode == 0, (block.where, parsed.stderr)


def test_the_blocks_not_run_are_few() -> None:
    marked = [f"{b.where}: {b.not_run}" for b in ALL if b.not_run is not None]
    run = [b for b in ALL if b.language in RUN and b.not_run is None]
    report = f"{len(run)} blocks run, {len(marked)} not run:\n" + "\n".join(marked)
    print(report)
    assert len(marked) <= MOST_NOT_RUN, report
    assert len(run) >= 30, report  # the collection finds the pages' blocks


RUNNABLE = sorted({b.page for b in ALL if b.language in RUN and b.not_run is None})


@pytest.mark.parametrize("page", RUNNABLE, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_blocks_run_as_written(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = scratch(tmp_path)
    monkeypatch.chdir(tmp_path)  # python blocks may create a database file where they run
    monkeypatch.setenv("RUNNER_DATABASE_URL", env["RUNNER_DATABASE_URL"])
    for block in page_blocks(page):
        if block.language not in RUN or block.not_run is not None:
            continue
        if block.language == "python":
            code = compile(block.code, block.where, "exec")
            exec(code, {"__name__": "docs"})
            continue
        for command, comment in commands(block):
            done = run_line(command, tmp_path, env)
            context = (block.where, command, done.stdout[-2000:], done.stderr[-2000:])
            assert done.returncode in expected_exit(command, comment), context
            assert "Traceback" not in done.stderr, context
            check = _check_for(f"{command}  # {comment}" if comment else command)
            if check is not None:
                check(done.stdout, done.stderr)


def test_the_checks_find_their_commands() -> None:
    """Each check above still meets its command on some page (a renamed id would skip it)."""
    lines = [
        f"{c}  # {note}" if note else c
        for b in ALL
        if b.language == "bash" and b.not_run is None
        for c, note in commands(b)
    ]
    for fragment in CHECKS:
        assert any(_check_for(line) is CHECKS[fragment] for line in lines), fragment


def test_make_demo_recipe_runs(tmp_path: Path) -> None:
    """`make demo` runs its recipe after installing; the recipe itself must answer 35."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^demo:.*\n\t(.+)$", makefile, re.M)
    assert recipe is not None
    command = recipe.group(1).replace("$(BIN)/", f"{BIN}/")
    env = {**os.environ, "RUNNER_DATABASE_URL": f"sqlite:///{tmp_path / 'demo.db'}"}
    done = subprocess.run(
        shlex.split(command), cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "35"
    assert "step 3  final" in done.stderr


def test_ui_commands_serve_as_written(tmp_path: Path) -> None:
    """The `runner ui` lines (not run above: they serve until stopped) start a server that
    answers, on a free port: open on loopback, closed without the token with --token."""
    env = scratch(tmp_path)
    lines = [
        command
        for b in ALL
        if b.language == "bash"
        for command, _ in commands(b)
        if command.startswith("runner ui")
    ]
    assert len(lines) == 2
    created = run_line("runner db upgrade", tmp_path, env)  # the pages' database, at head
    assert created.returncode == 0, created.stderr
    plain = {k: v for k, v in env.items() if k != "RUNNER_UI_TOKEN"}
    for line in lines:
        served = {**plain, "RUNNER_UI_TOKEN": "docs-token"} if "--token" in line else plain
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = subprocess.Popen(
            ["bash", "-c", f"exec {line} --port {port}"],
            cwd=tmp_path,
            env=served,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            status = _first_answer(f"http://127.0.0.1:{port}/", server, line)
            assert status == (401 if "--token" in line else 200), (line, status)
        finally:
            server.terminate()
            output, _ = server.communicate(timeout=10)
        assert "Traceback" not in output and "on http://" in output, output


def _first_answer(url: str, server: subprocess.Popen[str], line: str) -> int:
    deadline = time.monotonic() + 30
    while True:
        try:
            return int(urllib.request.urlopen(url, timeout=2).status)
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            assert server.poll() is None and time.monotonic() < deadline, line
            time.sleep(0.05)  # the server is starting: look again
