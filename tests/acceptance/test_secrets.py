"""No database secret ever reaches the terminal: `db upgrade`'s message, the worker's banner
and every error show a URL through one redaction, whatever form the secret takes.

The PostgreSQL server trusts local connections, so the passwords below are never checked:
they are there to be hidden.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy.engine import make_url

from runner.cli import main

from .harness import cli, described, one_line_error

# Each form of secret, with the fragments of it that must never show.
PASSWORD = "Xq7pw@Zr9tail"
FRAGMENTS = ["Xq7pw", "Zr9tail", "Qv5param", "Tk8token", "Sp3ssl"]


def _forms(database_url: str, *, port: int | None = None) -> dict[str, str]:
    """Each form of secret in a URL of the test server (on `port`, if given)."""
    base = make_url(database_url)
    host = f"{base.host}:{port or base.port or 5432}"
    where = f"postgresql+psycopg://{base.username}"
    return {
        "password": f"{where}:Xq7pw@{host}/{base.database}",
        "unencoded_at": f"{where}:{PASSWORD}@{host}/{base.database}",
        "query_password": f"{where}@{host}/{base.database}?password=Qv5param",
        "sslpassword": f"{where}@{host}/{base.database}?sslpassword=Sp3ssl&sslmode=disable",
    }


FORMS = ["password", "unencoded_at", "query_password", "sslpassword"]


def _unreachable(database_url: str, form: str) -> str:
    # The same URL on a port where nothing listens: every command fails with an error.
    return _forms(database_url, port=1)[form]


def _shows_no_secret(*texts: str) -> None:
    for text in texts:
        for fragment in FRAGMENTS:
            assert fragment not in text, text


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.postgres
@pytest.mark.parametrize("form", FORMS)
def test_db_upgrade_says_where_without_the_secret(form: str, postgres_database: str) -> None:
    url = _forms(postgres_database)[form]
    code, out, err = _invoke("db", "upgrade", "--db", url)
    assert code == 0, out + err
    assert "is at the latest schema revision" in out
    assert f"@{make_url(postgres_database).host}:" in out
    _shows_no_secret(out, err)


@pytest.mark.postgres
@pytest.mark.parametrize("form", FORMS)
def test_the_worker_banner_hides_the_secret(
    form: str, postgres_database: str, tmp_path: Path
) -> None:
    url = _forms(postgres_database)[form]
    served = cli("worker", "--once", "--db", url, db_url=None, ledger=tmp_path)
    assert served.returncode == 0, described(served)
    assert "serving postgresql+psycopg://" in served.stderr
    _shows_no_secret(served.stdout, served.stderr)


@pytest.mark.postgres
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(
    "args", [["db", "upgrade"], ["list"], ["show", "x"], ["sql", "SELECT 1"], ["stats"]]
)
def test_errors_hide_the_secret(form: str, args: list[str], postgres_database: str) -> None:
    url = _unreachable(postgres_database, form)
    code, out, err = _invoke(*args, "--db", url)
    assert code == 1, out + err
    line = one_line_error(err)
    assert f"{make_url(postgres_database).host}:1/" in line
    _shows_no_secret(out, err)


@pytest.mark.postgres
def test_a_worker_that_cannot_start_hides_the_secret(
    postgres_database: str, tmp_path: Path
) -> None:
    url = _unreachable(postgres_database, "unencoded_at") + "?token=Tk8token"
    failed = cli("worker", "--once", "--db", url, db_url=None, ledger=tmp_path)
    assert failed.returncode == 1, described(failed)
    _shows_no_secret(failed.stdout, failed.stderr)
    assert f"{make_url(postgres_database).host}:1/" in one_line_error(failed.stderr)


def test_a_url_that_cannot_be_used_hides_the_secret(tmp_path: Path) -> None:
    # Not a database runner knows, and not a URL at all: the message still hides the secret.
    for url in ("mysql://u:Xq7pw@Zr9tail@h/db?token=Tk8token", "postgresql+nodriver://u:Xq7pw@h/d"):
        code, out, err = _invoke("list", "--db", url)
        assert code == 1
        one_line_error(err)
        _shows_no_secret(out, err)
