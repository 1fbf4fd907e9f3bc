"""Log lines a person can read and a machine can parse: UTC timestamps, run ids, JSON."""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from runner.cli import logs, main

STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def record(message: str, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord("runner.worker", logging.INFO, __file__, 1, message, None, None)
    made.created = 1_790_000_000.25  # 2026-09-21T14:13:20.250Z
    for name, value in extra.items():
        setattr(made, name, value)
    return made


def test_text_lines_have_a_utc_timestamp_level_and_logger() -> None:
    line = logs.TextFormatter().format(record("run abc finished: final", run_id="abc"))
    assert line == "2026-09-21T14:13:20.250Z INFO runner.worker: run abc finished: final"


def test_json_lines_carry_the_run_id_as_a_field() -> None:
    line = logs.JsonFormatter().format(record("run abc claimed", run_id="abc", worker="w:1"))
    assert json.loads(line) == {
        "time": "2026-09-21T14:13:20.250Z",
        "level": "info",
        "logger": "runner.worker",
        "message": "run abc claimed",
        "run_id": "abc",
        "worker": "w:1",
    }
    assert "run_id" not in json.loads(logs.JsonFormatter().format(record("serving")))


def test_an_exception_is_one_line_never_a_traceback() -> None:
    failed = record("run abc interrupted")
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        failed.exc_info = sys.exc_info()
    text = logs.TextFormatter().format(failed)
    assert "Traceback" not in text and text.endswith("(ValueError: bad)")
    assert json.loads(logs.JsonFormatter().format(failed))["error"] == "ValueError: bad\nvalue"


@pytest.fixture
def restored() -> Iterator[None]:
    """The `runner` and `uvicorn` loggers as they were before the CLI configured them."""
    saved = {
        name: (list(logging.getLogger(name).handlers), logging.getLogger(name).level)
        for name in ("runner", "uvicorn")
    }
    yield
    for name, (handlers, level) in saved.items():
        logging.getLogger(name).handlers[:] = handlers
        logging.getLogger(name).setLevel(level)


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_the_cli_sends_runner_records_to_stderr(log_format: str, restored: None) -> None:
    @main.command("log-probe", hidden=True)
    def probe() -> None:
        """Log one record, as the worker would."""
        logging.getLogger("runner.worker").info("run r1 claimed", extra={"run_id": "r1"})
        logging.getLogger("runner.worker").debug("not shown at info")

    try:
        result = CliRunner().invoke(main, ["--log-format", log_format, "log-probe"])
    finally:
        main.commands.pop("log-probe")
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    if log_format == "json":
        assert json.loads(lines[0])["run_id"] == "r1"
    else:
        assert re.fullmatch(STAMP + r" INFO runner\.worker: run r1 claimed", lines[0]), lines


def test_log_format_comes_from_the_environment_too(restored: None) -> None:
    result = CliRunner().invoke(main, ["list", "--help"], env={"RUNNER_LOG_FORMAT": "yaml"})
    assert result.exit_code == 2
    assert "yaml" in result.stderr
