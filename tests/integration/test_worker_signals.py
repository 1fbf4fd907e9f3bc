"""A worker's second SIGTERM exits at once, even one that lands while the first is handled."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

# The log call of the first signal's handler sends the second signal: Python runs the
# handler again inside itself, the moment a naive "already stopping?" check gets wrong.
SIGNAL_INSIDE_THE_HANDLER = textwrap.dedent(
    """
    import logging, os, signal, sys, time
    from runner.service.worker import Worker

    lines = []

    class Log(logging.Handler):
        def emit(self, record):
            line = record.getMessage()
            lines.append(line)
            if "stopping gracefully" in line and len(lines) == 1:
                os.kill(os.getpid(), signal.SIGTERM)

    logging.getLogger("runner.worker").addHandler(Log())
    logging.getLogger("runner.worker").setLevel(logging.INFO)
    worker = Worker(sys.argv[1])
    worker.install_signal_handlers()
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
    print(lines)
    """
)


def worker_script(script: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """`script` run in a process of its own on a worker of a scratch SQLite database."""
    url = f"sqlite:///{folder / 'runner.db'}"
    return subprocess.run(
        [sys.executable, "-c", script, url], capture_output=True, text=True, timeout=60
    )


def test_a_second_signal_during_the_first_handler_exits_at_once(tmp_path: Path) -> None:
    done = worker_script(SIGNAL_INSIDE_THE_HANDLER, tmp_path)
    assert done.returncode == 128 + signal.SIGTERM, done.stdout + done.stderr


# The signal lands while the main thread holds the lock of the event the handler sets, as
# `Event.wait` does for a few bytecodes after it wakes (an idle worker polling). A handler
# that set the event itself would wait for its own thread forever.
SIGNAL_WHILE_THE_EVENT_IS_HELD = textwrap.dedent(
    """
    import os, signal, sys
    from runner.service.worker import Worker

    worker = Worker(sys.argv[1])
    worker.install_signal_handlers()
    with worker._wake._cond:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # bytecodes: the handler runs among them, the lock held
            pass
    print("stopping" if worker.stopping.wait(30) and worker._wake.wait(30) else "not set")
    """
)


def test_a_signal_while_the_serving_loop_holds_its_wake_event_stops_the_worker(
    tmp_path: Path,
) -> None:
    done = worker_script(SIGNAL_WHILE_THE_EVENT_IS_HELD, tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "stopping", done.stdout + done.stderr
