"""What an MCP call costs over the same tool called directly, per transport.

    .venv/bin/python benchmarks/mcp_call.py [--calls 200] [--repeats 5] [--json out.json]
        [--no-postgres] [--dir DIR]

One run of `--calls` tool calls (then the answer) with a zero-cost model, its tool `echo`
(it returns its argument) given three ways: a plain Python function (the baseline), the
same tool of an MCP server over stdio (`runner.mcp.mcp_tools(command=...)`), and over
streamable HTTP (`mcp_tools(url=...)`, the server a process of its own on loopback); the
server is benchmarks/mcp_server.py, written with the official SDK. Each run goes in memory
(`run_agent`) and durable on SQLite (`Runner.run`; PostgreSQL too unless --no-postgres).
The session is opened before the timing starts (a worker's first call opens it once).

Reported per call: the median over the repeats (min-max), as a ratio to the direct call in
the same mode, and the milliseconds an MCP call adds over it.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import common

from runner import Agent, Runner, run_agent
from runner.mcp import mcp_tools

SERVER = Path(__file__).with_name("mcp_server.py")


def model(calls: int) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
    def decide(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        done = sum(1 for message in transcript if message["role"] == "tool")
        if done >= calls:
            return {"type": "final", "content": "done"}
        return {"type": "tool", "name": "echo", "args": {"text": f"call {done}"}}

    return decide


def echo(text: str) -> str:
    """Say `text` back."""
    return text


@contextmanager
def http_server() -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if process.poll() is not None:
                raise RuntimeError("the MCP server exited")
            time.sleep(0.05)  # starting: look again
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait()


def timed(run: Callable[[], Any], calls: int) -> float:
    started = time.perf_counter()
    result = run()
    elapsed = time.perf_counter() - started
    assert result.stop_reason == "final", result
    return elapsed / calls * 1e6  # microseconds per call


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--repeats", type=int, default=5)
    options = p.parse_args()
    calls = options.calls
    budgets = {"max_steps": calls + 1, "max_repeats": None, "max_tokens": None}
    with http_server() as url, common.scratch_folder(options.dir) as folder:
        ways: dict[str, dict[str, Any]] = {
            "direct": {"echo": echo},
            "mcp stdio": mcp_tools([sys.executable, str(SERVER)]),
            "mcp http": mcp_tools(url=url),
        }
        for tools in ways.values():  # open each session before the timing
            run_agent(model(1), tools, "warm up", **budgets)
        databases = {"sqlite": common.sqlite_url(folder, "mcp")}
        postgres = common.postgres_url_or_none(options)
        results: dict[str, dict[str, list[float]]] = {}
        with common_postgres(options, postgres) as pg:
            if pg is not None:
                databases["postgres"] = pg
            runners = {name: Runner(db) for name, db in databases.items()}
            try:
                for repeat in range(options.repeats):
                    for way, tools in ways.items():
                        # Each mode's run binds this round's values now (the loop goes on).
                        def in_memory(t: Any = tools) -> Any:
                            return run_agent(model(calls), t, "go", **budgets)

                        modes: dict[str, Callable[[], Any]] = {"memory": in_memory}
                        for name, runner in runners.items():
                            agent = Agent(model(calls), tools, **budgets)

                            def durable(
                                r: Runner = runner, a: Agent = agent, w: str = way, n: int = repeat
                            ) -> Any:
                                return r.run(a, "go", id=f"{w.replace(' ', '-')}-{n}")

                            modes[name] = durable
                        for mode, run in modes.items():
                            per_call = timed(run, calls)
                            results.setdefault(mode, {}).setdefault(way, []).append(per_call)
            finally:
                for runner in runners.values():
                    runner.close()
    rows = []
    data: dict[str, Any] = {}
    for mode, by_way in results.items():
        base = common.spread(by_way["direct"])
        for way, values in by_way.items():
            s = common.spread(values)
            ratio = s["median"] / base["median"]
            added = (s["median"] - base["median"]) / 1000
            rows.append([mode, way, common.fmt_spread(s), f"{ratio:.1f}", f"{added:+.2f}"])
            data.setdefault(mode, {})[way] = {**s, "ratio": ratio, "added_ms": added}
    common.print_table(
        f"per tool call, {calls} calls a run, {options.repeats} repeats",
        ["mode", "tool", "us per call", "x direct", "ms added"],
        rows,
    )
    common.write_json(options.json, "mcp_call", options, data)


@contextmanager
def common_postgres(options: Any, admin: str | None) -> Iterator[str | None]:
    if admin is None:
        yield None
        return
    with common.scratch_postgres(admin) as url:
        yield url


if __name__ == "__main__":
    main()
