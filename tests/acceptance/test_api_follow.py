"""Acceptance: a run followed over HTTP (`runner ui`'s `/api/`, Server-Sent Events) with a
real HTTP client (httpx), through a crash of its worker, on SQLite and PostgreSQL.

The run is submitted through the API, its events followed from another process while a
`runner resume` works it; the worker is held at its first tool call by the agents' gate
file (so the first events are seen live), the follower goes away, the worker is SIGKILLed
inside a later tool call, the follower comes back with `Last-Event-ID`, and a second worker
finishes the run. Every durable event arrives exactly once, in order, through to `end`.
"""

from __future__ import annotations

import json
import queue
import re
import socket
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conditions import GENEROUS

from .agents import ANSWERS
from .harness import KILLED, RUNNER, agent_ref, cli_env, journal, start, wait_for

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "follow-token-77"
AUTH = {"authorization": f"Bearer {TOKEN}"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class UiServer:
    """`runner ui --token` in a subprocess, its log in a file, up once it answers."""

    def __init__(self, db_url: str, ledger: Path, cwd: Path | None = None) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = ledger / "ui.log"
        self._log = self.log_path.open("wb")
        args = ["ui", "--db", db_url, "--port", str(self.port), "--token", TOKEN]
        self.proc = subprocess.Popen(
            [str(RUNNER), *args], stdin=subprocess.DEVNULL, stdout=self._log,
            stderr=self._log, env=cli_env(db_url, ledger), cwd=cwd or ledger,
        )  # fmt: skip

        def answers() -> bool:
            assert self.proc.poll() is None, self.log_path.read_text()
            try:
                urllib.request.urlopen(self.base + "/static/style.css", timeout=2).close()
            except urllib.error.HTTPError:
                return True  # it answers (401 without the token)
            except OSError:
                return False
            return True

        wait_for(answers, what="runner ui to answer")

    def close(self) -> str:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(GENEROUS)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.log_path.read_text()


@pytest.fixture
def server(db_url: str, ledger: Path) -> Iterator[UiServer]:
    started = UiServer(db_url, ledger)
    try:
        yield started
    finally:
        log = started.close()
    assert "Traceback" not in log, log


class Follower:
    """One SSE connection read in a thread: each event's fields arrive on `events`."""

    def __init__(self, base: str, run_id: str, last_event_id: str | None = None) -> None:
        headers = dict(AUTH)
        if last_event_id is not None:
            headers["last-event-id"] = last_event_id
        self.client = httpx.Client(base_url=base, headers=headers, timeout=GENEROUS)
        self.events: queue.Queue[dict[str, str] | None] = queue.Queue()
        self.status: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(run_id,), daemon=True)
        self._thread.start()

    def _read(self, run_id: str) -> None:
        try:
            with self.client.stream("GET", f"/api/runs/{run_id}/events") as response:
                self.status = response.status_code
                fields: dict[str, str] = {}
                for line in response.iter_lines():
                    if self._stop.is_set():
                        return
                    if not line:
                        if "data" in fields:  # a block without data is no event
                            self.events.put(fields)
                        fields = {}
                    elif not line.startswith(":"):  # a comment (the ping) is no event
                        name, _, value = line.partition(":")
                        fields[name] = fields.get(name, "") + value.removeprefix(" ")
        except httpx.HTTPError:
            if not self._stop.is_set():
                raise
        finally:
            self.events.put(None)

    def next(self) -> dict[str, str] | None:
        return self.events.get(timeout=GENEROUS)

    def close(self) -> None:
        """Go away mid-stream, as a browser tab closed or a network cut does."""
        self._stop.set()
        self.client.close()
        self._thread.join(GENEROUS)


def test_a_follower_reconnects_with_last_event_id_through_a_worker_crash(
    db_url: str, ledger: Path, server: UiServer
) -> None:
    run_id = "followed"
    submitted = httpx.post(
        f"{server.base}/api/runs",
        json={"agent": agent_ref("ledgered"), "task": run_id},
        headers=AUTH | {"idempotency-key": run_id},
    )
    assert submitted.status_code == 201, submitted.text

    first = Follower(server.base, run_id)
    gate = ledger / "gate"
    env = cli_env(db_url, ledger, fault="during_tool@2", gate=gate)
    worker = start("resume", run_id, env=env, cwd=ledger)
    got: list[dict[str, str]] = []
    # Live: the task and the first call arrive while the worker is held at that call.
    for _ in range(2):
        event = first.next()
        assert event is not None
        got.append(event)
    assert [e["id"] for e in got] == ["0", "1"]
    assert first.status == 200 and worker.poll() is None
    first.close()

    # The worker goes on without anyone following, and dies inside its second tool call.
    gate.touch()
    out, err = worker.communicate(timeout=GENEROUS)
    assert worker.returncode == KILLED, f"{out}\n{err}"
    committed = len(journal(db_url, run_id))
    assert committed > 2  # what the follower missed while away

    # Back, from the last event it saw: what the dead worker committed, then the rest as a
    # second worker finishes the run.
    second = Follower(server.base, run_id, last_event_id=got[-1]["id"])
    for _ in range(committed - 2):
        event = second.next()
        assert event is not None
        got.append(event)
    finisher = start("resume", run_id, env=cli_env(db_url, ledger), cwd=ledger)
    while (event := second.next()) is not None:
        got.append(event)
    out, err = finisher.communicate(timeout=GENEROUS)
    assert finisher.returncode == 0, f"{out}\n{err}"
    second.close()

    rows = journal(db_url, run_id)
    entries, end = got[:-1], got[-1]
    # Every durable event exactly once, in order: the ids are the positions 0..n-1.
    assert [e["id"] for e in entries] == [str(row["seq"]) for row in rows]
    assert [json.loads(e["data"])["kind"] for e in entries] == [row["kind"] for row in rows]
    assert all(e["event"] == "entry" for e in entries)
    ending = json.loads(end["data"])
    assert (end["event"], "id" in end) == ("end", False)
    assert (ending["status"], ending["stop_reason"], ending["output"]) == (
        "finished", "final", ANSWERS["ledgered"]
    )  # fmt: skip
    assert ending["position"] == rows[-1]["seq"]
    assert ending["resumes"] >= 1  # it really was taken over after the crash


def test_a_body_declared_too_large_is_refused_before_it_is_sent(server: UiServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=GENEROUS) as raw:
        raw.sendall(
            b"POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Authorization: Bearer {TOKEN}\r\n".encode()
            + b"Content-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n{"
        )
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = raw.recv(65536)
            if not chunk:
                break
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), answer
    assert "at most" in json.loads(body)["error"]


def test_an_unknown_run_and_a_bad_last_event_id_are_json_4xx(server: UiServer) -> None:
    with httpx.Client(base_url=server.base, headers=AUTH, timeout=GENEROUS) as client:
        missing = client.get("/api/runs/nope/events")
        assert (missing.status_code, missing.json()) == (404, {"error": "no such run"})
        client.post("/api/runs", json={"agent": agent_ref("ledgered"), "task": "t"},
                    headers={"idempotency-key": "idle"})  # fmt: skip
        bad = client.get("/api/runs/idle/events", headers={"last-event-id": "x" * 5000})
        assert bad.status_code == 400 and "Last-Event-ID" in bad.json()["error"]
        # A queued run (no entry yet: its task is journaled when a worker starts it): the
        # stream stays open, saying so at once (a comment and how soon to reconnect).
        with client.stream("GET", "/api/runs/idle/events") as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            lines = response.iter_lines()
            assert [next(lines) for _ in range(2)] == [": run idle after -1", "retry: 1000"]


def test_the_guides_curl_example_works_as_shown(db_url: str, ledger: Path) -> None:
    """docs/guides/ui.md shows its curl commands (a block marked not-run: they need a live
    server); here they run as written against one serving from the repository's folder (the
    agent's path is the server's to resolve), a worker finishing the run they submit."""
    guide = (ROOT / "docs" / "guides" / "ui.md").read_text()
    shown = re.search(r"```bash\n(curl .*?)```", guide, re.S)
    assert shown is not None, "the guide shows no curl commands"
    block = shown.group(1)
    server = UiServer(db_url, ledger, cwd=ROOT)
    try:
        script = block.replace("http://127.0.0.1:8780", server.base)
        # Serving until the script has its answer: a worker started with `--once` may look
        # for work before the script has submitted any, and end with nothing done.
        worker = start("worker", "--poll", "0.1", env=cli_env(db_url, ledger), cwd=ROOT)
        try:
            done = subprocess.run(
                ["bash", "-c", script], cwd=ROOT, capture_output=True, text=True,
                timeout=GENEROUS, env={**cli_env(db_url, ledger), "RUNNER_UI_TOKEN": TOKEN},
                check=False,
            )  # fmt: skip
        finally:
            worker.terminate()
            worker.communicate(timeout=GENEROUS)
    finally:
        assert "Traceback" not in server.close()
    assert done.returncode == 0, done.stderr
    submitted, end = json.JSONDecoder().raw_decode(done.stdout)  # the first curl's answer
    streamed = done.stdout[end:]
    assert submitted.get("id") == "order-1042", done.stdout[:500]
    ids = re.findall(r"^id: (\d+)", streamed, re.M)
    rows = journal(db_url, "order-1042")
    assert ids == [str(row["seq"]) for row in rows[3:]]  # after Last-Event-ID: 2
    assert "event: end" in streamed and '"stop_reason":"final"' in streamed
