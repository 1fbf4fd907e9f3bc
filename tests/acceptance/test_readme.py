"""The README is accurate to the letter: its Python blocks and shell commands run as written."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
BIN = Path(sys.executable).parent


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, re.S)


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_python_block_runs(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # blocks may create a database file in the working folder
    code = blocks("python")[index]
    exec(compile(code, f"README.md python block {index}", "exec"), {"__name__": "readme"})


def shell_commands() -> list[str]:
    return [command for command, _ in shell_lines()]


def shell_lines() -> list[tuple[str, str]]:
    """Each command of the shell blocks with its comment (`# exits 3: ...` sets its code)."""
    lines = [line for block in blocks("sh") for line in block.splitlines()]
    pairs = [line.partition("  #")[::2] for line in lines if line.strip()]
    return [(command.strip(), comment.strip()) for command, comment in pairs]


def expected_exit(command: str, comment: str) -> set[int]:
    # Killed by SIGKILL: a shell reports 137; bash -c may exec the command itself (-9).
    if "kill -KILL" in command:
        return {137, -9}
    said = re.match(r"exits (\d+)", comment)
    return {int(said.group(1))} if said else {0}


def expected_exits() -> dict[str, int]:
    """Commands whose comment says they exit with another code: `...  # exits 4: ...`."""
    lines = [line for block in blocks("sh") for line in block.splitlines()]
    found = (re.search(r"  # exits (\d+)", line) for line in lines)
    return {
        line.split("  #")[0].strip(): int(match.group(1))
        for line, match in zip(lines, found, strict=True)
        if match
    }


def run_line(line: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", line], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_shell_commands_run_as_written(tmp_path: Path) -> None:
    """Every command of the README's shell blocks, in order, against a scratch database."""
    env = {**os.environ, "RUNNER_DATABASE_URL": f"sqlite:///{tmp_path / 'readme.db'}"}
    env["PATH"] = f"{BIN}:{env['PATH']}"
    lines = [(c, note) for c, note in shell_lines() if not c.startswith("make ")]
    assert any("kill -KILL" in c for c, _ in lines)
    assert {4} in [expected_exit(c, note) for c, note in lines]  # the refund run waits
    for command, comment in lines:
        done = run_line(command, env)
        assert done.returncode in expected_exit(command, comment), (
            command,
            done.stdout,
            done.stderr,
        )
        assert "Traceback" not in done.stderr
        if "list --status stalled" in command and "demo-crash" in comment:
            assert done.stdout.splitlines()[1].split()[:2] == ["demo-crash", "stalled"]
        if command.endswith(("resume demo-crash", "resume demo-short --max-steps 5")):
            assert done.stdout.strip() == "35"
        if command.endswith("show demo-crash"):
            assert "finished: final" in done.stdout
            assert re.search(r", 1 resume$", done.stdout, re.M), done.stdout  # not "1 resumes"
        if "fork demo-crash" in command:
            assert done.stdout.strip() == "35"
            assert "forked from demo-crash at step 1" in done.stderr
        if command.endswith("replay demo-crash"):
            assert "agrees" in done.stdout
        if command.endswith("resume demo-tree"):
            assert done.stdout.strip() == "Yes, in moderation: the web and the papers agree."
        if "list --status stalled" in command and "sub-agents" in comment:
            stalled = [line.split() for line in done.stdout.splitlines()[1:]]
            assert stalled and all(row[0].startswith("demo-tree") for row in stalled)
        if "--id refund-1" in command:
            assert "runner approve refund-1 --call refund-1-2" in done.stderr
        if command.endswith("resume refund-1"):
            assert done.stdout.strip() == "Done: refunded 249.00 EUR on order 1042."
        if command.endswith("show refund-2"):
            assert "Denied: refunded already, as refund-1" in done.stdout
            assert "answer    No refund for 1042." in done.stdout


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


def test_history_commands_run_as_written(tmp_path: Path) -> None:
    """The `console` block of run-history commands, in a scratch folder with a few runs."""
    env = {**os.environ, "RUNNER_DATABASE_URL": f"sqlite:///{tmp_path / 'history.db'}"}
    env["PATH"] = f"{BIN}:{env['PATH']}"
    agent = ROOT / "examples" / "calculator.py"
    for task in ("What is (1 + 2) * 3?", "What is 4?"):
        seeded = run_line(f"runner run {agent}:agent {shlex.quote(task)}", env)
        assert seeded.returncode in (0, 3), seeded.stderr
    commands = [
        line.split("  #")[0].strip()
        for block in blocks("console")
        for line in block.splitlines()
        if line.strip()
    ]
    assert any(c.startswith("runner stats") for c in commands)
    for command in commands:
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
    exported = (tmp_path / "runs.jsonl").read_text().splitlines()
    assert len(exported) == 2


def test_ui_commands_serve_as_written(tmp_path: Path) -> None:
    """The `runner ui` lines of the README start a server that answers (on a free port)."""
    import socket
    import time
    import urllib.error
    import urllib.request

    from runner.store.database import open_engine, upgrade

    db = f"sqlite:///{tmp_path / 'ui.db'}"
    engine = open_engine(db)
    upgrade(engine)
    engine.dispose()
    lines = [
        line.split("  #")[0].strip()
        for block in blocks("bash")  # servers: `sh` blocks must end, `shell` ones need a model
        for line in block.splitlines()
        if line.startswith(".venv/bin/runner ui")
    ]
    assert len(lines) == 2
    plain = {k: v for k, v in os.environ.items() if k != "RUNNER_UI_TOKEN"}
    for line in lines:
        env = {**plain, "RUNNER_DATABASE_URL": db}
        if "--token" in line:
            env["RUNNER_UI_TOKEN"] = "readme-token"
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        command = line.replace(".venv/bin/runner", str(BIN / "runner"), 1) + f" --port {port}"
        server = subprocess.Popen(
            ["bash", "-c", f"exec {command}"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    status = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).status
                except urllib.error.HTTPError as exc:
                    status = exc.code
                except OSError:
                    assert server.poll() is None and time.monotonic() < deadline, command
                    time.sleep(0.05)
                    continue
                break
            # Loopback: open; with --token: closed to a request without it.
            assert status == (401 if "--token" in line else 200), (command, status)
        finally:
            server.terminate()
            output, _ = server.communicate(timeout=10)
        assert "Traceback" not in output and "on http://" in output, output


# -- docs/*.md: their commands run under the same rules -----------------------------------------

DOCS = sorted((ROOT / "docs").glob("*.md"))
# Fences the README test runs (`sh`, `python`), or that say they are not run: output and
# pictures (no language, `text`), statements for an administrator (`sql`). A `bash`, `shell`
# or `console` block would be run in the README and silently not here: say which it is.
NOT_RUN = {"", "text", "sql"}


def doc_blocks(page: Path, language: str) -> list[str]:
    """The page's `language` blocks, those indented in a list item too (dedented)."""
    text = page.read_text(encoding="utf-8")
    found = re.findall(rf"^[ \t]*```{language}\n(.*?)^[ \t]*```", text, re.S | re.M)
    return [textwrap.dedent(block) for block in found]


def test_docs_blocks_say_whether_they_run() -> None:
    for page in DOCS:
        text = page.read_text(encoding="utf-8")
        fences = re.findall(r"^[ \t]*```(\S*)\n.*?^[ \t]*```", text, re.S | re.M)
        unknown = set(fences) - NOT_RUN - {"sh", "python"}
        assert not unknown, f"{page.name}: fences {sorted(unknown)}: use sh, python, text or sql"


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_docs_commands_run_as_written(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page's `python` blocks, then its `sh` commands in order, as the README's run."""
    monkeypatch.chdir(tmp_path)
    for index, code in enumerate(doc_blocks(page, "python")):
        exec(compile(code, f"{page.name} python block {index}", "exec"), {"__name__": "docs"})
    env = {**os.environ, "RUNNER_DATABASE_URL": f"sqlite:///{tmp_path / 'docs.db'}"}
    env["PATH"] = f"{BIN}:{env['PATH']}"
    lines = [line for block in doc_blocks(page, "sh") for line in block.splitlines()]
    for command, comment in (line.partition("  #")[::2] for line in lines if line.strip()):
        done = run_line(command.strip(), env)
        assert done.returncode in expected_exit(command, comment.strip()), (
            command,
            done.stdout,
            done.stderr,
        )
        assert "Traceback" not in done.stderr
