"""Ctrl-C while a step's calls run at once: KeyboardInterrupt reaches the calling thread
only, and the loop gives the run back at once, not after the other calls end (sync threads
cannot be stopped: they run on, their outcomes dropped, for a resume to settle)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from runner.core.budgets import Budgets
from runner.core.calls import Together
from runner.core.journal import EntryKind, MemoryJournal
from runner.core.loop import drive
from runner.core.tools import as_tools

Transcript = list[dict[str, Any]]


class Blocked:
    """Calls that block until released, except the one on the calling thread, which is
    interrupted (as SIGINT interrupts the main thread) once the others have started."""

    def __init__(self, others: int) -> None:
        self.caller = threading.current_thread()
        self.others = threading.Semaphore(0)
        self.count = others
        self.release = threading.Event()
        self.ended = threading.Event()

    def call(self) -> str:
        if threading.current_thread() is self.caller:
            for _ in range(self.count):
                self.others.acquire()
            raise KeyboardInterrupt
        self.others.release()
        # Bounded, so that a Together that waits for it (the fault this guards against)
        # fails the test instead of hanging it.
        self.release.wait(60)
        self.ended.set()
        return "ended"


def test_together_gives_up_at_once_when_the_calling_thread_is_interrupted() -> None:
    blocked = Blocked(others=1)
    jobs: list[Callable[[], None]] = [blocked.call, blocked.call, blocked.call]
    together = Together(2)
    try:
        with pytest.raises(KeyboardInterrupt):
            together.run(jobs)
        assert not blocked.ended.is_set()  # returned while the other call still ran
    finally:
        blocked.release.set()
        together.close()


def test_an_interrupted_step_records_no_outcome_of_the_calls_left_running() -> None:
    blocked = Blocked(others=1)
    journal = MemoryJournal(run_id="r")

    def model(transcript: Transcript) -> dict[str, Any]:
        calls = [{"name": "block", "args": {"n": n}, "id": str(n)} for n in (1, 2)]
        return {"type": "tool", "calls": calls}

    tools = as_tools({"block": lambda n: blocked.call()})
    with pytest.raises(KeyboardInterrupt):
        drive(model, tools, "t", Budgets(max_parallel_tools=2), journal)
    blocked.release.set()
    for thread in threading.enumerate():  # the step's threads, done with the call
        if thread.name.startswith("runner-tool"):
            thread.join(60)
    assert blocked.ended.is_set()
    # The call left running ended after the run was given back: its outcome is dropped,
    # for the resume to settle by the tool's declaration.
    kinds = [entry.kind for entry in journal.entries]
    assert kinds == [EntryKind.TASK, EntryKind.ACTION, EntryKind.ACTION]
