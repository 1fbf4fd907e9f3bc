"""Long runs: the shape of temporalio/sdk-python #1890, with compaction off and on.

    .venv/bin/python benchmarks/long_run.py [--calls 100] [--no-postgres] [--json out.json]

One agent makes `--calls` model calls (a tool call each, then its answer) through the real
OpenAI adapter, against a local fake provider (a thread of this process speaking the Chat
Completions wire format, answering at once). Each tool result is 50-200 KB of text; the
model is shown each one cut to 8,000 characters, so the context grows by about 2,000 tokens a
step, to about 200k tokens at step 100 (#1890 died at its 50 MB history cap after 53 of 100
calls at about 209k tokens). With compaction on, the agent's context is
`Compaction(above_tokens=30_000, keep_steps=8, cut_observations=8_000)`: the steps before the
latest 8 are summarised by the same model whenever the view passes 30k tokens.

For each database and setting, in fresh processes (`--child`):

- run A goes to step `calls - 1` and is SIGKILLed after that step's result is committed
  (RUNNER_FAULT): its per-step times, from one model call's start to the next, split into the
  model call (the adapter and the HTTP round trip) and runner's own part (the context, the
  journal writes, the tool);
- its resume: the time from `Runner.resume` to the first model call, and the process's peak
  RSS then; the resumed run goes on to its answer (step `calls`);
- run B is killed after step 9, and resumed the same way: the resume at step 10 that the one
  at step `calls` is compared with;
- then the database's growth: its size on disk (SQLite: the file; PostgreSQL: the entries
  table with its TOAST and indexes), the entries table's own bytes, against the payload bytes
  the run produced (tool results, arguments, answers, summaries).

Goals (issue 37): step `calls` within 1.2x of step 10; resume memory within 2x of a 10-step
run's; with offload on, database rows under 10% of the payload bytes.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import re
import resource
import sqlite3
import statistics
import string
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import common
from sqlalchemy import text

from runner import Agent, Compaction, Runner
from runner.context import cut_observations
from runner.core.compaction import INSTRUCTIONS
from runner.models import OpenAIChat
from runner.sql.database import open_engine

CUT = 8_000  # characters of each tool result the model is shown
SMALLEST, LARGEST = 50_000, 200_000  # a tool result's size
# Random letters: not much for a database's compression to take away.
_BLOCK = "".join(random.Random(37).choices(string.ascii_letters + string.digits, k=LARGEST))


def result_size(i: int) -> int:
    """Tool result i's size: 50, 87.5, 125, 162.5 or 200 KB in turn (every five steps
    weigh the same, so a window of five is compared with another like it)."""
    return SMALLEST + (i % 5) * (LARGEST - SMALLEST) // 4


def fetch(i: int) -> str:
    """The tool: result i, 50-200 KB."""
    head = f"result {i}: "
    return head + _BLOCK[: result_size(i) - len(head)]


def agent(url: str, compaction: bool, timed: Timed | None = None) -> Agent:
    model = OpenAIChat("gpt-4.1-mini", base_url=f"{url}/v1", api_key="bench", price_table=False)
    context: Any = cut_observations(CUT)
    if compaction:
        # The same model, shown no tools, as its own call (the timed calls are the steps').
        summary = model if timed is None else timed.wrap(model, step=False)
        context = Compaction(above_tokens=30_000, keep_steps=8, cut_observations=CUT, model=summary)
    return Agent(
        model if timed is None else timed.wrap(model, step=True),
        {"fetch": fetch},
        name="long-run",
        context=context,
        max_steps=1_000,
        max_tokens=None,
        max_repeats=None,
    )


# -- the fake provider ---------------------------------------------------------------------------


class Provider:
    """Asks for fetch(i + 1) after result i (the latest in the request), answers after
    `calls - 1` results; a summary request gets a short summary. Counts both."""

    def __init__(self, calls: int) -> None:
        self.calls = calls
        self.requests = 0
        self.summaries = 0
        self.lock = threading.Lock()

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body["messages"]
        last = str(messages[-1].get("content") or "")
        size = sum(len(str(m.get("content") or "")) for m in messages)
        if last.startswith(INSTRUCTIONS):
            with self.lock:
                self.summaries += 1
            done = max((int(n) for n in re.findall(r"result (\d+):", last)), default=0)
            message: dict[str, Any] = {
                "role": "assistant",
                "content": f"fetched results 1 to {done}; nothing in them changes the plan",
            }
        else:
            with self.lock:
                self.requests += 1
            done = 0
            for m in reversed(messages):
                found = re.match(r"result (\d+):", str(m.get("content") or ""))
                if m.get("role") == "tool" and found:
                    done = int(found.group(1))
                    break
            if done >= self.calls - 1:
                message = {"role": "assistant", "content": f"fetched {done} results"}
            else:
                arguments = json.dumps({"i": done + 1})
                call = {"id": f"call_{done + 1}", "type": "function",
                        "function": {"name": "fetch", "arguments": arguments}}  # fmt: skip
                message = {"role": "assistant", "content": None, "tool_calls": [call]}
        return {
            "id": "chatcmpl-long", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "gpt-4.1-mini"),
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
            "usage": {"prompt_tokens": size // 4, "completion_tokens": 30,
                      "total_tokens": size // 4 + 30},
        }  # fmt: skip


@contextlib.contextmanager
def serving(provider: Provider) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            raw = json.dumps(provider.answer(body)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(raw)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# -- the measured processes ---------------------------------------------------------------------


class Timed:
    """The run's model calls, timed: each step's call's start and end (perf_counter),
    appended to a file as they come (the process is SIGKILLed at its fault point). On a
    resume, the first model call (a step's, or a summary's) writes the resume's figures and,
    unless the run is to go on, ends the process."""

    def __init__(self, log: Path, resumed_at: float | None, go_on: bool) -> None:
        self.log = log.open("a")
        self.resumed_at = resumed_at
        self.go_on = go_on

    def wrap(self, model: Any, *, step: bool) -> Any:
        def call(transcript: list[dict[str, Any]]) -> Any:
            start = time.perf_counter()
            self.first_call(start, len(transcript))
            output = model(transcript)
            if step:
                self.log.write(f"{start} {time.perf_counter()}\n")
                self.log.flush()
            return output

        return call

    def first_call(self, start: float, messages: int) -> None:
        if self.resumed_at is None:
            return
        figures = {
            "resume_seconds": start - self.resumed_at,
            "rss_peak_kib": _status_kib("VmHWM"),
            "rss_kib": _status_kib("VmRSS"),
        }
        self.resumed_at = None
        print(json.dumps(figures), flush=True)
        if not self.go_on:
            os._exit(0)


def child(mode: str, db: str, provider_url: str, run_id: str, compaction: bool, log: str) -> None:
    """One measured process: `run` (to its fault point or end) or `resume`/`resume-go-on`.
    The provider's SDK is loaded first: its import is no part of a resume."""
    import openai  # noqa: F401

    with Runner(db) as runner:
        if mode == "run":
            built = agent(provider_url, compaction, Timed(Path(log), None, True))
            runner.run(built, "fetch every result", id=run_id)
            return
        timed = Timed(Path(log), time.perf_counter(), mode == "resume-go-on")
        built = agent(provider_url, compaction, timed)
        timed.resumed_at = time.perf_counter()
        runner.resume(run_id, agent=built)


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def in_a_process(*args: str, blobs: str, fault: str | None = None) -> tuple[int, str]:
    env = dict(os.environ)
    env.pop("RUNNER_FAULT", None)
    env["RUNNER_BLOBS"] = blobs
    if fault is not None:
        env["RUNNER_FAULT"] = fault
    command = [sys.executable, str(Path(__file__).resolve()), "--child", *args]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode not in (0, -9):
        raise SystemExit(f"a measured process failed ({done.returncode}):\n{done.stderr}")
    return done.returncode, done.stdout


def resumed(stdout: str) -> dict[str, Any]:
    return dict(json.loads(stdout.strip().splitlines()[0]))


# -- figures ------------------------------------------------------------------------------------


def step_times(log: Path) -> list[tuple[float, float]]:
    """Per step from the second: (the whole step, runner's part), from one model call's start
    to the next's, less the model call itself."""
    calls = [tuple(map(float, line.split())) for line in log.read_text().splitlines()]
    out = []
    for (start, end), (following, _) in itertools.pairwise(calls):
        out.append((following - start, following - end))
    return out


# Ten steps around step 10, and the last ten timed: medians of ten, against the machine's noise.
WINDOW = 10


def window(times: list[tuple[float, float]], first: int, part: int) -> float:
    """The median, in ms, over steps first..first + 9 of part 0 (the step) or 1 (runner's)."""
    chosen = times[first - 1 : first - 1 + WINDOW]  # times[j] is step j + 1's
    return statistics.median(t[part] for t in chosen) * 1000


def database_bytes(url: str) -> dict[str, int]:
    """The entries table's bytes (its pages, or with its TOAST and indexes), and the
    database's on disk (SQLite: the file and its WAL; PostgreSQL: the same as the table)."""
    if url.startswith("sqlite"):
        path = Path(url.removeprefix("sqlite:///"))
        with contextlib.closing(sqlite3.connect(path)) as connection:
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            (rows,) = connection.execute(
                "SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name = 'entries'"
            ).fetchone()
        disk = sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
        return {"entries_bytes": int(rows), "disk_bytes": disk}
    engine = open_engine(url)
    try:
        with engine.connect() as connection:
            size = connection.execute(text("SELECT pg_total_relation_size('entries')"))
            total = int(size.scalar_one())
            return {"entries_bytes": total, "disk_bytes": total}
    finally:
        engine.dispose()


def payload_bytes(url: str, run_ids: tuple[str, ...]) -> int:
    """The bytes of what the runs' entries carry: contents and arguments, as read back."""
    total = 0
    with Runner(url) as runner:
        for run_id in run_ids:
            for entry, _ in runner.store.load_entries(run_id):
                total += len(str(entry.content or "").encode())
                total += len(json.dumps(entry.args).encode()) if entry.args else 0
    return total


def measure(name: str, url: str, provider_url: str, calls: int, compaction: bool,
            offload: bool, folder: Path) -> dict[str, Any]:  # fmt: skip
    tag = f"{name}-{'compaction' if compaction else 'plain'}-{'offload' if offload else 'rows'}"
    flag = "1" if compaction else "0"
    blob_folder = folder / f"{tag}.blobs"
    # Offload on: payloads of 64 KiB or more (the default size) to a folder of files.
    blobs = blob_folder.as_uri() if offload else "off"
    log = folder / f"{tag}.steps"
    started = time.perf_counter()
    code, _ = in_a_process("run", url, provider_url, "long", flag, str(log), blobs=blobs,
                           fault=f"after_observation_commit@{calls - 1}")  # fmt: skip
    assert code == -9, f"run A was not killed at step {calls - 1}"
    times = step_times(log)
    _, out = in_a_process("resume-go-on", url, provider_url, "long", flag, str(log), blobs=blobs)
    at_end = resumed(out)
    wall = time.perf_counter() - started
    short_log = folder / f"{tag}.short"
    code, _ = in_a_process("run", url, provider_url, "short", flag, str(short_log), blobs=blobs,
                           fault="after_observation_commit@9")  # fmt: skip
    assert code == -9, "run B was not killed at step 9"
    _, out = in_a_process("resume", url, provider_url, "short", flag, str(short_log), blobs=blobs)
    at_ten = resumed(out)
    with Runner(url) as runner:
        row = runner.store.find_run("long")
        assert row.stop_reason == "final", row.stop_reason
        summaries = sum(
            entry.kind == "compaction" for entry, _ in runner.store.load_entries("long")
        )
    sizes = database_bytes(url)
    payload = payload_bytes(url, ("long", "short"))  # the database holds both
    blob_bytes = sum(p.stat().st_size for p in blob_folder.rglob("*") if p.is_file())
    return {
        "database": name,
        "compaction": compaction,
        "offload": offload,
        "blob_bytes": blob_bytes,
        "calls": calls,
        "summaries": summaries,
        "wall_seconds": wall,
        "step_ms_10": window(times, 6, 0),
        "step_ms_last": window(times, len(times) - WINDOW + 1, 0),
        "runner_ms_10": window(times, 6, 1),
        "runner_ms_last": window(times, len(times) - WINDOW + 1, 1),
        "resume_ms_10": at_ten["resume_seconds"] * 1000,
        "resume_ms_last": at_end["resume_seconds"] * 1000,
        "rss_peak_mib_10": at_ten["rss_peak_kib"] / 1024,
        "rss_peak_mib_last": at_end["rss_peak_kib"] / 1024,
        "payload_bytes": payload,
        **sizes,
    }


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--calls", type=int, default=100, help="model calls of the long run")
    p.add_argument("--child", nargs=6, metavar="ARG", help=argparse_hidden())
    options = p.parse_args()
    if options.child:
        mode, db, provider_url, run_id, flag, log = options.child
        child(mode, db, provider_url, run_id, flag == "1", log)
        return
    postgres = common.postgres_url_or_none(options)
    results = []
    with common.scratch_folder(options.dir) as folder:
        provider = Provider(options.calls)
        with serving(provider) as provider_url:
            for offload in (False, True):
                for compaction in (False, True):
                    case = (options.calls, compaction, offload, folder)
                    url = common.sqlite_url(folder, f"long-{int(compaction)}-{int(offload)}")
                    results.append(measure("sqlite", url, provider_url, *case))
                    if postgres is not None:
                        with common.scratch_postgres(postgres) as pg_url:
                            results.append(measure("postgres", pg_url, provider_url, *case))
    report(results, options.calls)
    common.write_json(options.json, "long_run", options, results)


def argparse_hidden() -> str:
    return "internal: one measured process (mode, db, provider, run id, compaction, log)"


def case(r: dict[str, Any]) -> list[str]:
    return [r["database"], "on" if r["compaction"] else "off", "on" if r["offload"] else "off"]


def report(results: list[dict[str, Any]], calls: int) -> None:
    last = calls - 1
    common.print_table(
        f"per step, ms (medians of steps 6-15 and {last - WINDOW}-{last - 1}): the step, "
        "and runner's own part (the step less its model call)",
        ["database", "compaction", "offload", "step ~10", f"step ~{calls}", "ratio",
         "runner ~10", f"runner ~{calls}", "ratio"],
        [
            [*case(r), f"{r['step_ms_10']:.1f}",
             f"{r['step_ms_last']:.1f}", f"{r['step_ms_last'] / r['step_ms_10']:.2f}x",
             f"{r['runner_ms_10']:.1f}", f"{r['runner_ms_last']:.1f}",
             f"{r['runner_ms_last'] / r['runner_ms_10']:.2f}x"]
            for r in results
        ],
    )  # fmt: skip
    common.print_table(
        f"resume at step 10 vs step {calls}: to the first model call, peak RSS",
        ["database", "compaction", "offload", "resume 10 ms", f"resume {calls} ms", "RSS 10 MiB",
         f"RSS {calls} MiB", "ratio"],
        [
            [*case(r), f"{r['resume_ms_10']:.0f}",
             f"{r['resume_ms_last']:.0f}", f"{r['rss_peak_mib_10']:.0f}",
             f"{r['rss_peak_mib_last']:.0f}",
             f"{r['rss_peak_mib_last'] / r['rss_peak_mib_10']:.2f}x"]
            for r in results
        ],
    )  # fmt: skip
    common.print_table(
        f"database after {calls} calls: payload bytes vs the entries table",
        ["database", "compaction", "offload", "summaries", "payload MB", "entries MB",
         "rows/payload", "blobs MB", "wall s"],
        [
            [*case(r), r["summaries"],
             f"{r['payload_bytes'] / 1e6:.1f}", f"{r['entries_bytes'] / 1e6:.1f}",
             f"{r['entries_bytes'] / r['payload_bytes']:.1%}", f"{r['blob_bytes'] / 1e6:.1f}",
             f"{r['wall_seconds']:.0f}"]
            for r in results
        ],
    )  # fmt: skip


if __name__ == "__main__":
    main()
