"""Acceptance: `runner tail --follow` shows a streaming model call as it streams, from
another process, on SQLite and PostgreSQL.

The fake provider stops its stream halfway, so "tail printed the first pieces" is seen while
the call is still in flight (nothing of it is journaled yet); then the stream ends, and tail
prints the journaled answer and the run's end. `--json` marks each piece as a delta, with
no position of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

from tests.conditions import GENEROUS
from tests.providers.fake_servers import serving
from tests.providers.fake_streams import openai_events
from tests.providers.test_streaming import OPENAI_BODIES

from .harness import cli_env, journal, start, wait_for
from .stream_agents import URL_VARIABLE

AGENTS = Path(__file__).with_name("stream_agents.py")
BODY = OPENAI_BODIES["text"]
ANSWER = BODY["choices"][0]["message"]["content"]


class Reader:
    """What a process wrote to stdout so far, read as it comes (lines end or not)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        self.fd = process.stdout.fileno()
        self.text = ""
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while chunk := os.read(self.fd, 4096):
            self.text += chunk.decode()


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_tail_follow_shows_the_pieces_while_the_call_streams(
    db_url: str, ledger: Path, as_json: bool
) -> None:
    hold = threading.Event()
    with serving() as server:
        server.stream(openai_events(BODY, size=4), hold=hold, hold_after=4)
        env = cli_env(db_url, ledger) | {URL_VARIABLE: server.url}
        worker = start("run", f"{AGENTS}:openai", "35?", "--id", "t", env=env, cwd=ledger)
        try:
            wait_for(lambda: journal(db_url, "t"), what="the run's task")
            args = ["tail", "t", "--follow", *(["--json"] if as_json else [])]
            tail = start(*args, env=env, cwd=ledger)
            seen = Reader(tail)
            first = ANSWER[:12]  # the three pieces sent before the stream stops
            if as_json:
                wait_for(lambda: seen.text.count('"event": "delta"') >= 3, what="three deltas")
            else:
                wait_for(lambda: f"step 1 streams: {first}" in seen.text, what="streamed text")
            # Shown while the call is in flight: nothing of it is journaled yet.
            assert [row["kind"] for row in journal(db_url, "t")] == ["task"]
            hold.set()
            assert tail.wait(timeout=GENEROUS) == 0
            seen.thread.join(GENEROUS)
            worker.communicate(timeout=GENEROUS)
        finally:
            hold.set()
            for process in (worker, tail):
                if process.poll() is None:
                    process.kill()
                process.communicate(timeout=GENEROUS)
    if as_json:
        objects = [json.loads(line) for line in seen.text.splitlines()]
        kinds = [o.get("kind") or o["event"] for o in objects]
        deltas = [o for o in objects if o["event"] == "delta"]
        assert kinds[0] == "task" and kinds[-2:] == ["final", "end"]
        assert set(kinds[1:-2]) == {"delta"}
        assert all("position" not in d and d["after"] == 0 and d["step"] == 1 for d in deltas)
        assert ANSWER.startswith("".join(d["text"] for d in deltas))
        assert [d["ordinal"] for d in deltas] == list(range(len(deltas)))
    else:
        lines = seen.text.splitlines()
        streams = [line for line in lines if line.startswith("step 1 streams: ")]
        assert len(streams) == 1 and ANSWER.startswith(streams[0].removeprefix("step 1 streams: "))
        assert ANSWER in lines[lines.index(streams[0]) + 1]  # then the journaled answer
