"""Loading an agent from many threads at once: each file or module runs once, and every
thread gets its Agent, never a module still being executed by another thread."""

from __future__ import annotations

import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner import Agent, AgentLoadError
from runner.core.agent import load_agent

THREADS = 16

# Slow to import, as a file that builds a client or imports heavy libraries is; every
# execution appends a line beside it, so a test can count them.
SLOW_AGENT = textwrap.dedent(
    """
    import time
    from pathlib import Path

    from runner import Agent

    with open(Path(__file__).with_suffix(".runs"), "a") as runs:
        runs.write("ran\\n")
    time.sleep({seconds})
    if {fail}:
        raise RuntimeError("the agent file is broken")


    def model(transcript):
        return {{"type": "final", "content": "loaded"}}


    agent = Agent(model, name="slow")
    """
)


def write_agent(path: Path, *, seconds: float = 0.3, fail: bool = False) -> Path:
    path.write_text(SLOW_AGENT.format(seconds=seconds, fail=fail))
    return path


def executions(path: Path) -> int:
    runs = path.with_suffix(".runs")
    return len(runs.read_text().splitlines()) if runs.exists() else 0


def load_at_once(ref: str, threads: int = THREADS) -> list[Agent | Exception]:
    """`load_agent(ref)` on `threads` threads released together: what each one got."""
    start = threading.Barrier(threads)
    got: list[Agent | Exception] = [RuntimeError("never ran")] * threads

    def load(i: int) -> None:
        start.wait(30)
        try:
            got[i] = load_agent(ref)
        except Exception as exc:
            got[i] = exc

    workers = [threading.Thread(target=load, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert not any(worker.is_alive() for worker in workers)
    return got


@pytest.fixture
def forget_modules() -> Iterator[None]:
    """Drop the modules a test loaded, so none outlives its temporary folder."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith(("runner_agent_file_", "slow_agent_module")):
            del sys.modules[name]


@pytest.mark.usefixtures("forget_modules")
def test_threads_loading_one_slow_agent_file_all_get_the_same_agent(tmp_path: Path) -> None:
    path = write_agent(tmp_path / "slow_agent.py")
    got = load_at_once(f"{path}:agent")
    failures = [str(g) for g in got if not isinstance(g, Agent)]
    assert failures == []
    assert len({id(agent) for agent in got}) == 1
    assert executions(path) == 1  # loaded once, not once per thread


@pytest.mark.usefixtures("forget_modules")
def test_a_failed_load_leaves_nothing_behind(tmp_path: Path) -> None:
    path = write_agent(tmp_path / "broken_agent.py", seconds=0.1, fail=True)
    got = load_at_once(f"{path}:agent", threads=4)
    # Each thread ran the file itself (a failure is not cached) and saw why it failed.
    assert all(isinstance(g, AgentLoadError) for g in got), got
    assert all("RuntimeError: the agent file is broken" in str(g) for g in got), got
    assert executions(path) == 4

    write_agent(path, seconds=0)  # fixed, as a deploy would fix it
    agent = load_agent(f"{path}:agent")
    assert agent.model([]) == {"type": "final", "content": "loaded"}


@pytest.mark.usefixtures("forget_modules")
def test_threads_importing_one_slow_agent_module_all_get_the_same_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `module:attr` goes through importlib, whose per-module lock does the same job.
    path = write_agent(tmp_path / "slow_agent_module.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    got = load_at_once("slow_agent_module:agent")
    failures = [str(g) for g in got if not isinstance(g, Agent)]
    assert failures == []
    assert len({id(agent) for agent in got}) == 1
    assert executions(path) == 1


def test_an_agent_file_imports_the_modules_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "agents_beside"
    folder.mkdir()
    (folder / "issue22_helpers.py").write_text("ANSWER = 'from the helper'\n")
    (folder / "beside.py").write_text(
        textwrap.dedent(
            """
            from issue22_helpers import ANSWER

            from runner import Agent


            def model(transcript):
                return {"type": "final", "content": ANSWER}


            agent = Agent(model)
            """
        )
    )
    monkeypatch.chdir(tmp_path)  # not the file's folder: as `runner run agents/x.py:agent`
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "issue22_helpers", raising=False)
    agent = load_agent(f"{folder / 'beside.py'}:agent")
    assert agent.model([]) == {"type": "final", "content": "from the helper"}
    assert sys.path[0] == str(folder)
