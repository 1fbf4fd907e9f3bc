"""Token streaming: the latency from the provider sending a piece of a response to a
follower in another process receiving it, on SQLite and PostgreSQL (target: about 100 ms).

    .venv/bin/python benchmarks/delta_latency.py [--runs 3] [--pieces 200] [--json out.json]

A fake OpenAI server in this process answers each chat completion as a stream of
`--pieces` pieces of text, one every 10 to 50 ms (random), and notes the moment it wrote
and flushed each one (time.time()). A `runner run` process (the real command) runs an
agent whose `OpenAIChat(..., stream=True)` talks to it, on a scratch database. Two
followers watch the run from the start, each noting when each piece reached it:
`Runner.events(id, follow=True, deltas=True)` in this process (a thread), and `runner
tail ID --follow --json` as a process of its own, its stdout read as it comes. A piece's
latency is the follower's moment minus the server's: the adapter's read, the worker's
batched write (at most one every 50 ms), and the follower's wake (PostgreSQL: the write's
NOTIFY to the process's listener; SQLite: the process's poller, every 50 ms).

The baseline in the same run is the journal as a follower without deltas sees it: a third
follower, `Runner.events(id, follow=True)` (on SQLite, its poller looks every 0.25 s for
it alone, 50 ms while a follower of deltas shares the process), and the latency from the
run's answer being committed (`runs.finished_at`, the same transaction) to its having it.
Pieces written in a call's last moments may be deleted (the call's action is journaled)
before a slow follower looks: "received" counts what each follower got.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import common

from runner import DeltaEvent, Runner

RUNNER = Path(sys.executable).parent / "runner"
AGENT = f"{Path(__file__).with_name('stream_agent.py')}:agent"


class StreamingServer:
    """Chat Completions as a stream of numbered pieces; `sent` maps piece to moment."""

    def __init__(self, pieces: int, seed: int) -> None:
        self.pieces = pieces
        self.rng = random.Random(seed)
        self.go = threading.Event()
        self.sent: dict[str, float] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                server.go.wait()
                self._event({"delta": {"role": "assistant", "content": ""}})
                for n in range(server.pieces):
                    time.sleep(server.rng.uniform(0.01, 0.05))
                    piece = f"p{n:05d} "
                    self._event({"delta": {"content": piece}})
                    server.sent[piece] = time.time()
                self._event({"delta": {}, "finish_reason": "stop"})
                self._write(b"data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")

            def _event(self, choice: dict[str, Any]) -> None:
                chunk = {
                    "id": "c",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": "bench",
                    "choices": [{"index": 0, "finish_reason": None} | choice],
                }
                self._write(f"data: {json.dumps(chunk)}\n\n".encode())

            def _write(self, data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        port = self.http.server_address[1]
        return f"http://127.0.0.1:{port}"

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def wait_until(predicate: Any, timeout: float, what: str) -> None:
    give_up = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > give_up:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.005)


def one_run(url: str, server: StreamingServer, run_id: str, folder: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNER_")}
    env["RUNNER_BENCH_STREAM_URL"] = server.url
    log = open(folder / f"{run_id}.log", "wb")  # noqa: SIM115 - closed below
    worker = subprocess.Popen(
        [str(RUNNER), "run", AGENT, "go", "--id", run_id, "--db", url],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        env=env,
    )
    in_process: dict[str, float] = {}
    in_tail: dict[str, float] = {}
    entries: dict[int, float] = {}  # the journal follower's (no deltas)
    with_deltas: dict[int, float] = {}
    try:
        with Runner(url) as runner:
            wait_until(lambda: _exists(runner, run_id), 60, "the run")
            stream = runner.events(run_id, follow=True, deltas=True)

            def follow() -> None:
                for event in stream:
                    now = time.time()
                    if isinstance(event, DeltaEvent):
                        in_process[event.delta.text] = now
                    else:
                        with_deltas[event.position] = now

            follower = threading.Thread(target=follow, daemon=True)
            follower.start()
            plain = runner.events(run_id, follow=True)

            def follow_journal() -> None:
                for event in plain:
                    entries[event.position] = time.time()

            journal_follower = threading.Thread(target=follow_journal, daemon=True)
            journal_follower.start()
            tail = subprocess.Popen(
                [str(RUNNER), "tail", run_id, "--follow", "--json", "--db", url],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
                text=True,
            )
            tail_started = threading.Event()

            def read_tail() -> None:
                assert tail.stdout is not None
                for line in tail.stdout:
                    now = time.time()
                    tail_started.set()
                    data = json.loads(line)
                    if data["event"] == "delta":
                        in_tail[data["text"]] = now

            reader = threading.Thread(target=read_tail, daemon=True)
            reader.start()
            wait_until(
                lambda: 0 in entries and 0 in with_deltas and tail_started.is_set(),
                60,
                "the followers",
            )
            server.go.set()
            worker.wait(300)
            follower.join(60)
            journal_follower.join(60)
            tail.wait(60)
            reader.join(60)
            committed = runner.row(run_id).finished_at
    finally:
        if worker.poll() is None:
            worker.kill()
        log.close()
    last = max(entries)
    journal_ms = (entries[last] - committed.timestamp()) * 1000 if committed else None
    return {
        "events": _latencies(server.sent, in_process),
        "tail": _latencies(server.sent, in_tail),
        "journal_ms": journal_ms,
    }


def _exists(runner: Runner, run_id: str) -> bool:
    try:
        runner.row(run_id)
    except Exception:
        return False
    return True


def _latencies(sent: dict[str, float], got: dict[str, float]) -> list[float]:
    return [(got[piece] - at) * 1000 for piece, at in sent.items() if piece in got]


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def measure(url: str, label: str, runs: int, pieces: int, folder: Path) -> list[dict[str, Any]]:
    found: dict[str, list[float]] = {"events": [], "tail": []}
    journal: list[float] = []
    for n in range(runs):
        server = StreamingServer(pieces, seed=n)
        try:
            result = one_run(url, server, f"{label}-{n}", folder)
        finally:
            server.go.set()
            server.close()
        for follower in found:
            found[follower] += result[follower]
        if result["journal_ms"] is not None:
            journal.append(result["journal_ms"])
    rows = []
    for follower, ms in found.items():
        rows.append(
            {
                "database": label,
                "follower": "Runner.events" if follower == "events" else "runner tail",
                "sent": runs * pieces,
                "received": len(ms),
                "p50_ms": percentile(ms, 50),
                "p90_ms": percentile(ms, 90),
                "p99_ms": percentile(ms, 99),
                "max_ms": max(ms),
                "mean_ms": statistics.fmean(ms),
                "journal_entry_median_ms": statistics.median(journal) if journal else None,
            }
        )
    return rows


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--runs", type=int, default=3, help="streamed runs per database")
    p.add_argument("--pieces", type=int, default=200, help="pieces per response")
    options = p.parse_args()
    postgres = common.postgres_url_or_none(options)
    results: list[dict[str, Any]] = []
    with common.scratch_folder(options.dir) as folder:
        url = common.sqlite_url(folder, "deltas")
        results += measure(url, "sqlite", options.runs, options.pieces, folder)
        if postgres is not None:
            with common.scratch_postgres(postgres) as url:
                results += measure(url, "postgresql", options.runs, options.pieces, folder)
    common.print_table(
        "provider sends a piece -> follower in another process has it (ms)",
        [
            "database",
            "follower",
            "received",
            "p50",
            "p90",
            "p99",
            "max",
            "mean",
            "journal p50",
        ],
        [
            [
                r["database"],
                r["follower"],
                f"{r['received']}/{r['sent']}",
                f"{r['p50_ms']:.1f}",
                f"{r['p90_ms']:.1f}",
                f"{r['p99_ms']:.1f}",
                f"{r['max_ms']:.1f}",
                f"{r['mean_ms']:.1f}",
                f"{r['journal_entry_median_ms']:.1f}" if r["journal_entry_median_ms"] else "-",
            ]
            for r in results
        ],
    )
    common.write_json(options.json, "delta_latency", options, results)


if __name__ == "__main__":
    main()
