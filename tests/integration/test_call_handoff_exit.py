"""Timed calls' spare threads across a process's life (runner.core.calls), in processes of
their own: one that exits while a call abandoned on its spare thread still runs keeps the
eventfds the threads signal each other through open until it ends, so that call's late end
writes to no file the exit work opened and raises nothing in its thread; a forked child
starts with no spare thread nor event loop of its parent's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.core import calls

# A process exits while a call abandoned at its timeout still runs; exit work registered
# before runner's (so it runs after runner's, last registered first) opens a file, then lets
# the call end and tell its caller.
AT_EXIT = """
import atexit, os, sys, threading

told = threading.Event()
go = threading.Event()

def exit_work():
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)  # lowest free number
    go.set()
    told.wait(10.0)
    os.close(fd)

atexit.register(exit_work)
from runner.core import calls

finish = calls._ThreadCall.finish

def finish_then_say(call):
    finish(call)
    told.set()

calls._ThreadCall.finish = finish_then_say
try:
    calls.invoke(go.wait, (), {}, 0.05)
except calls.CallTimedOut:
    pass
"""


def test_a_call_ending_during_exit_writes_to_no_file_of_the_process(tmp_path: Path) -> None:
    if not calls._EVENTFD:
        pytest.skip("no eventfd on this system")
    opened = tmp_path / "exit-work"
    done = subprocess.run(
        [sys.executable, "-c", AT_EXIT, str(opened)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # Its descriptors stay open until the process ends: the caller's signal was never
    # closed and reused for that file, and the spare thread's wait finds its own.
    assert opened.read_bytes() == b""
    assert "Traceback" not in done.stderr


# A process with a spare thread idle and its background event loop running forks; the
# child makes a timed call and an async call of its own.
AFTER_FORK = """
import os
from runner.core import calls

async def child():
    return "child"

assert calls.invoke(lambda: "parent", (), {}, 5.0) == "parent"  # leaves a spare thread idle
assert calls.invoke(child, (), {}, 5.0) == "child"  # starts the background loop
pid = os.fork()
if pid == 0:
    try:
        ok = calls.invoke(lambda: "child", (), {}, 5.0) == "child"
        ok = ok and calls.invoke(child, (), {}, 5.0) == "child"
    except BaseException:
        ok = False
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
"""


def test_a_forked_child_gets_threads_of_its_own_for_its_calls() -> None:
    if not hasattr(os, "fork"):
        pytest.skip("no fork on this system")
    done = subprocess.run(
        [sys.executable, "-c", AFTER_FORK],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # The parent's idle thread and loop are not in the child: handed a call, neither would
    # ever run it.
    assert done.stdout.strip() == "child 0", done.stderr
