"""A run's trace survives its process: killed with SIGKILL in a tool call and resumed in
another process, the resumed spans continue the same trace, and no finished step is traced
twice. The killed process's spans are read from the file it exported them to as they ended;
the resumed process's from the SDK's in-memory exporter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runner import Runner
from runner.tracing.otel import run_context

from .harness import KILLED, cli, cli_env, described
from .traced_agents import SPANS_VARIABLE, span_json

AGENT = f"{Path(__file__).with_name('traced_agents.py')}:agent"


def test_a_resumed_run_continues_the_trace_of_the_killed_process(ledger: Path, db_url: str) -> None:
    spans_file = ledger / "spans.jsonl"
    env = {**cli_env(db_url, ledger, fault="during_tool@2"), SPANS_VARIABLE: str(spans_file)}
    killed = cli(
        "run", AGENT, "count to three", "--id", "traced", db_url=db_url, ledger=ledger, env=env
    )
    assert killed.returncode == KILLED, described(killed)
    before = [json.loads(line) for line in spans_file.read_text().splitlines()]
    # Step 1 whole, then the model call of step 2; the tool call of step 2 never ended.
    assert [s["name"] for s in before] == [
        "chat scripted-1",
        "execute_tool add",
        "step 1",
        "chat scripted-1",
    ]

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with Runner(db_url, tracer_provider=provider) as runner:
        result = runner.resume("traced")
    provider.shutdown()
    assert (result.stop_reason, result.output) == ("final", "3")
    after = [span_json(span) for span in exporter.get_finished_spans()]

    root = run_context("traced")
    assert {s["trace_id"] for s in before + after} == {root.trace_id}
    names = [(s["name"], s["attributes"].get("runner.step")) for s in after]
    # Step 2's action was journaled: its model is not asked again, its tool runs again.
    assert names == [
        ("execute_tool add", 2),
        ("step 2", 2),
        ("chat scripted-1", 3),
        ("execute_tool add", 3),
        ("step 3", 3),
        ("chat scripted-1", 4),
        ("step 4", 4),
        ("invoke_agent counter", None),
    ]
    by_name: dict[str, list[dict[str, Any]]] = {}
    for span in after:
        by_name.setdefault(span["name"], []).append(span)
    (invoked,) = by_name["invoke_agent counter"]
    assert invoked["parent_id"] == root.span_id
    assert invoked["attributes"]["runner.resumes"] == 1
    retried = by_name["execute_tool add"][0]["attributes"]
    assert (retried["runner.idempotency_key"], retried["runner.attempt"]) == ("traced-2", 2)
    # The killed process's steps hung from its own invoke_agent span (never ended, so
    # never exported), whose parent is the same root.
    first_steps = [s for s in before if s["name"] == "step 1"]
    assert first_steps[0]["parent_id"] not in {s["span_id"] for s in after}
