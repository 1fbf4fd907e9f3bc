"""Database URLs as shown to people: every form of secret hidden, nothing else changed."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url

from runner.sql.urls import encode_password, password_span, redact_url

HIDDEN_FORMS = [
    # (URL, what it must show, the secrets that must not show)
    (
        "postgresql+psycopg://alice:hunter2@db.example/runs",
        "postgresql+psycopg://alice:***@db.example/runs",
        ["hunter2"],
    ),
    # An unencoded '@' inside the password: SQLAlchemy would show 'ss9@db.example' as the host.
    (
        "postgresql://alice:hun@ter2@db.example:5433/runs",
        "postgresql://alice:***@db.example:5433/runs",
        ["hun", "ter2"],
    ),
    (
        "postgresql://alice:a@b@c@db.example/runs?sslmode=require",
        "postgresql://alice:***@db.example/runs?sslmode=require",
        ["a@b", "b@c"],
    ),
    (
        "postgresql://alice:pa/ss?wd@db.example/runs",
        "postgresql://alice:***@db.example/runs",
        ["pa/ss", "ss?wd"],
    ),
    (
        "postgresql://alice@db.example/runs?password=hunter2&sslmode=require",
        "postgresql://alice@db.example/runs?password=***&sslmode=require",
        ["hunter2"],
    ),
    (
        "postgresql://db.example/runs?user=alice&PassWord=hunter2&sslpassword=keyphrase9",
        "postgresql://db.example/runs?user=alice&PassWord=***&sslpassword=***",
        ["hunter2", "keyphrase9"],
    ),
    (
        "postgresql://alice:first1@db.example/runs?passwd=second2&pwd=third3&token=t0k"
        "&api_key=k3y&client_secret=s3c&auth=a9&application_name=mine",
        "postgresql://alice:***@db.example/runs?passwd=***&pwd=***&token=***&api_key=***"
        "&client_secret=***&auth=***&application_name=mine",
        ["first1", "second2", "third3", "t0k", "k3y", "s3c", "a9"],
    ),
    (
        "sqlite:///runs.db?password=hunter2",  # SQLCipher-style
        "sqlite:///runs.db?password=***",
        ["hunter2"],
    ),
]


@pytest.mark.parametrize(("url", "shown", "secrets"), HIDDEN_FORMS, ids=range(len(HIDDEN_FORMS)))
def test_every_secret_is_hidden(url: str, shown: str, secrets: list[str]) -> None:
    assert redact_url(url) == shown
    for secret in secrets:
        assert secret not in redact_url(url)


def test_sqlalchemy_alone_leaks_the_tail_of_a_password_with_an_at_sign() -> None:
    # Why runner does not rely on SQLAlchemy's own hiding: it ends the password at the first @.
    url = "postgresql://alice:hun@ter2@db.example/runs"
    assert "ter2" in make_url(url).render_as_string(hide_password=True)
    assert "ter2" not in redact_url(url)


def test_an_sqlalchemy_url_object_is_redacted_the_same_way() -> None:
    url = make_url(encode_password("postgresql://alice:hun@ter2@db.example/runs?token=t0k"))
    assert url.password == "hun@ter2" and url.host == "db.example"
    assert redact_url(url) == "postgresql://alice:***@db.example/runs?token=***"


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///runner.db",
        "sqlite:////tmp/a:b@c/runner.db",  # a path is never a password
        "postgresql+psycopg://postgres@127.0.0.1:5432/test",
        "postgresql://db.example:5432/runs?sslmode=require&application_name=x",
        "not a url at all",
    ],
)
def test_a_url_without_secrets_is_shown_as_it_is(url: str) -> None:
    assert redact_url(url) == url
    assert encode_password(url) == url


def test_encode_password_changes_only_the_at_signs_of_the_password() -> None:
    assert encode_password("postgresql://u:p@ss@h/db?application_name=a@b") == (
        "postgresql://u:p%40ss@h/db?application_name=a@b"
    )
    assert encode_password("postgresql://u:plain@h/db") == "postgresql://u:plain@h/db"
    assert password_span("postgresql://u@h/db") is None
