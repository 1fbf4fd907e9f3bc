"""`runner ui` refuses what it must before it serves: a public address without a token, a
missing extra. (Serving itself is tested in tests/ui.)"""

from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner

from runner.cli import main
from runner.errors import MissingExtra
from runner.ui import is_loopback, require_extra


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.7", "example.org", "::"])
def test_a_public_address_needs_a_token(host: str) -> None:
    result = CliRunner().invoke(main, ["ui", "--host", host], env={"RUNNER_UI_TOKEN": ""})
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not a loopback address: give --token" in lines[0]


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.0.1", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("10.0.0.1", False),
        ("localhost.example", False),
    ],
)
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_a_missing_extra_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "starlette", None)  # importing it now fails
    with pytest.raises(MissingExtra, match=r"needs starlette: pip install 'durable-runner\[ui\]'"):
        require_extra()
    result = CliRunner().invoke(main, ["ui", "--db", "sqlite:///nowhere.db"])
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "Error: runner ui needs starlette: pip install 'durable-runner[ui]'"
    )


def test_access_log_lines_hide_the_token() -> None:
    import logging

    from runner.ui.app import HidesTokens

    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5", "GET", "/stats?by=day&token=s3cret&x=1", "1.1", 303),
        None,
    )
    assert HidesTokens().filter(record)
    assert record.getMessage() == '127.0.0.1:5 - "GET /stats?by=day&token=***&x=1 HTTP/1.1" 303'
