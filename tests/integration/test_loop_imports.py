"""The step machine knows nothing of storage, the CLI or tracing: importing it loads none."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHECK = """
import sys
import {module}
heavy = ("sqlalchemy", "alembic", "click", "psycopg", "opentelemetry")
loaded = sorted(name for name in heavy if name in sys.modules)
assert not loaded, f"importing {module} loaded {{loaded}}"
"""


@pytest.mark.parametrize(
    "module",
    [
        "runner.core.loop",
        "runner.core.journal",
        "runner.core.actions",
        "runner.core.budgets",
        "runner.core.stop_reasons",
        "runner.core.model_call",
        "runner.core.tool_runs",
        "runner.core.stop_rules",
        "runner.service.run_agent",
        "runner.core.agent_loop",
        "runner.core.tools",
        "runner.core.calls",
        "runner.core.spans",
        "runner.core.steps",
    ],
)
def test_module_imports_no_storage_or_cli(module: str) -> None:
    # A fresh interpreter: this test process has long since imported everything.
    done = subprocess.run(
        [sys.executable, "-c", CHECK.format(module=module)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_the_check_itself_can_fail() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHECK.format(module="sqlalchemy")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "loaded ['sqlalchemy']" in done.stderr
