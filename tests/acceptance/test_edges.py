"""Numbers and sizes at their edges: refused at the edge in one line, the same on both
databases, or saturated when they come from a model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from runner import Agent, Runner
from runner.cli import main
from runner.models import OpenAIChat
from tests.providers.fake_servers import openai_completion, serving

AGENT_FILE = """
from runner import Agent

def model(transcript):
    return {"type": "final", "content": "done"}

agent = Agent(model, {}, name=NAME)
"""


def one_line_error(result: Any) -> str:
    assert result.exit_code in (1, 2), result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ["submit", "AGENT", "t", "--in", "99999999d"],
        ["submit", "AGENT", "t", "--in", "1e999d"],
        ["run", "AGENT", "t", "--max-seconds", "1e309"],
        ["run", "AGENT", "t", "--max-seconds", "1e300"],
        ["run", "AGENT", "t", "--approval-timeout", "1e300"],
        ["run", "AGENT", "t", "--max-cost", "inf"],
        ["run", "AGENT", "t", "--max-tokens", str(2**70)],
    ],
    ids=lambda a: " ".join(a[3:]),
)
def test_numbers_past_what_runner_keeps_are_refused_in_one_line(
    db_url: str, tmp_path: Path, args: list[str]
) -> None:
    file = tmp_path / "short.py"
    file.write_text(AGENT_FILE.replace("NAME", repr("short")))
    argv = [str(file) + ":agent" if a == "AGENT" else a for a in args]
    result = CliRunner().invoke(main, [*argv, "--db", db_url])
    assert result.exit_code == 2
    one_line_error(result)
    with Runner(db_url) as runner:
        assert runner.list() == []  # nothing was made


def test_a_long_agent_name_is_refused_the_same_on_both_databases(
    db_url: str, tmp_path: Path
) -> None:
    file = tmp_path / "long.py"
    file.write_text(AGENT_FILE.replace("NAME", repr("n" * 300)))
    result = CliRunner().invoke(main, ["run", f"{file}:agent", "t", "--db", db_url])
    line = one_line_error(result)
    assert "name must be text of at most 200 characters" in line, line
    with Runner(db_url) as runner:
        assert runner.list() == []


def test_a_usage_past_any_counter_is_saturated_not_retried(db_url: str) -> None:
    body = openai_completion("done")
    huge = 10**400
    body["usage"] = {"prompt_tokens": huge, "completion_tokens": huge, "total_tokens": huge}
    with serving() as server:
        server.reply(json.dumps(body).encode())  # Python's json writes the integer whole
        model = OpenAIChat("m", base_url=f"{server.url}/v1", api_key="k", price=(0.4, 1.6))
        try:
            with Runner(db_url) as runner:
                result = runner.run(Agent(model, {}, max_tokens=None), "t", id="huge-usage")
                kept = runner.row("huge-usage")
        finally:
            model.close()
        assert len(server.requests) == 1  # one paid call, not three
    assert result.stop_reason == "final" and result.output == "done", result.error
    assert kept.tokens == 2**63 - 1  # the column's most
    assert 0 < result.cost < float("inf") and 0 < kept.cost < float("inf")
