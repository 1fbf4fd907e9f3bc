"""A zero-cost model and tools for the benchmarks, importable by reference (workers load it).

The task says how long the run is: "200" makes 199 tool calls and then answers, 200 steps in
all, each tool call `echo` with a short observation; "200:1024" does the same with `read`,
whose observations are 1,024 bytes of text (a stand-in for a page or a file an agent reads).
The model looks only at the transcript's length, so a step costs the loop nothing but its
own bookkeeping; every call has new arguments, so no repeat rule fires.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from runner import Agent, tool

# Budgets that never stop a benchmark run before its answer.
UNLIMITED: dict[str, Any] = {
    "max_steps": 1_000_000,
    "max_tokens": None,
    "max_consecutive_errors": None,
    "max_repeats": None,
}

_WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "runner"]


def task(steps: int, observation_bytes: int = 0) -> str:
    return f"{steps}:{observation_bytes}" if observation_bytes else str(steps)


def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    steps, _, size = str(transcript[0]["content"]).partition(":")
    done = (len(transcript) - 1) // 2  # the task, then an action and an observation a step
    if done >= int(steps) - 1:
        return {"type": "final", "content": f"done after {done} tool calls"}
    if size:
        return {"type": "tool", "name": "read", "args": {"path": f"docs/{done}.md", "n": int(size)}}
    return {"type": "tool", "name": "echo", "args": {"i": done}}


def echo(i: int) -> str:
    return f"echo {i}"


def read(path: str, n: int) -> str:
    """`n` bytes of plain text that differs from call to call."""
    head = f"{path}: "
    words, length, k = [head], len(head), len(path)
    while length < n:
        word = _WORDS[k % len(_WORDS)]
        words.append(word)
        length += len(word) + 1
        k += 7
    return " ".join(words)[:n]


def tools() -> dict[str, Any]:
    return {"echo": echo, "read": read}


def make_agent() -> Agent:
    return Agent(model, tools(), name="bench", ref=REF, **UNLIMITED)


REF = f"{Path(__file__).resolve()}:make_agent"


def make_marked_agent() -> Agent:
    """The same agent, its tools declared `mark_start`: one more commit per tool call."""
    marked = {name: tool(mark_start=True)(fn) for name, fn in tools().items()}
    return Agent(model, marked, name="bench-marked", ref=MARKED_REF, **UNLIMITED)


MARKED_REF = f"{Path(__file__).resolve()}:make_marked_agent"


# benchmarks/approvals.py: one call that needs approval, which notes when it starts (in the
# file RUNNER_BENCH_STARTS names), then the answer.
STARTS_VARIABLE = "RUNNER_BENCH_STARTS"


@tool(approval=True)
def pay(n: int) -> str:
    with open(os.environ[STARTS_VARIABLE], "a") as starts:
        starts.write(f"{n} {time.time():.6f}\n")
    return f"paid {n}"


def approval_model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    if len(transcript) == 1:
        return {"type": "tool", "name": "pay", "args": {"n": int(transcript[0]["content"])}}
    return {"type": "final", "content": "done"}


approval_agent = Agent(approval_model, {"pay": pay}, name="approvals-bench")
APPROVAL_REF = f"{Path(__file__).resolve()}:approval_agent"


# benchmarks/fleet.py: a model that waits like a real one. The task "4:1.0" asks for four
# model calls of 1.0 s each: three tool calls (`echo`), then the answer.
def waiting_model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    calls, _, seconds = str(transcript[0]["content"]).partition(":")
    time.sleep(float(seconds))
    done = (len(transcript) - 1) // 2
    if done >= int(calls) - 1:
        return {"type": "final", "content": f"done after {done} tool calls"}
    return {"type": "tool", "name": "echo", "args": {"i": done}}


def make_waiting_agent() -> Agent:
    return Agent(waiting_model, {"echo": echo}, name="fleet-bench", ref=WAITING_REF, **UNLIMITED)


WAITING_REF = f"{Path(__file__).resolve()}:make_waiting_agent"


# benchmarks/limits.py: an agent on the real OpenAI adapter, against the local fake provider
# at OPENAI_BASE_URL. Each model call asks for at most RUNNER_BENCH_COMPLETION tokens, and
# the fake answers with exactly that many; the calls draw from `openai/bench-model` (a
# limit only if the benchmark set it).


def make_provider_agent() -> Agent:
    from runner.models import OpenAIChat

    completion = int(os.environ.get("RUNNER_BENCH_COMPLETION", "300"))
    model = OpenAIChat("bench-model", api_key="bench", max_completion_tokens=completion)
    return Agent(model, tools(), name="bench-provider", ref=PROVIDER_REF, **UNLIMITED)


PROVIDER_REF = f"{Path(__file__).resolve()}:make_provider_agent"
