"""The unit layer's guard (tests/unit/conftest.py) refuses what the layer must not do."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest


def test_a_unit_test_can_open_no_database(tmp_path: Path) -> None:
    from runner import Runner

    with pytest.raises(AssertionError, match="opened a SQLite database"):
        sqlite3.connect(tmp_path / "runs.db")
    with pytest.raises(AssertionError, match="opened a SQLite database"):
        Runner(f"sqlite:///{tmp_path / 'runs.db'}")  # through SQLAlchemy's pool too
    assert not (tmp_path / "runs.db").exists()


def test_a_unit_test_can_start_no_process() -> None:
    with pytest.raises(AssertionError, match="started a subprocess"):
        subprocess.run([sys.executable, "-c", "pass"], check=False)
