"""Database URLs as text: where their secrets are, and the one way a URL is shown.

Every URL that reaches a person (a message, an error, the worker's banner, a log line) goes
through `redact_url`: the password of the user part and every query parameter named like a
secret (`?password=`, `?sslpassword=`, `?token=`, ...) become `***`. This module loads no
database library, so the CLI's error handling can use it even before SQLAlchemy is loaded.

A password with an unencoded `@` (`postgresql://u:p@ss@host/db`) is common and
ambiguous: SQLAlchemy ends the password at the first `@` and takes `ss@host` for the host,
so its own redaction (`u:***@ss@host`) leaves the password's tail in view. Here the user
part ends at the last `@` before the query, and `encode_password` makes the engine read
the URL the same way, so the tail never becomes a host name in a driver's message either.
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import unquote

from runner.defaults import DEFAULT_URL, DIRECT_URL_VARIABLE, READ_URL_VARIABLE, URL_VARIABLE

HIDDEN = "***"

# A query parameter whose name contains one of these holds a secret (password, passwd, pwd,
# sslpassword, secret, client_secret, token, access_token, key, api_key, sslkey, auth, ...).
_SECRET_NAME = re.compile(r"pass|pwd|secret|token|key|auth|cred", re.IGNORECASE)
# Before the password: the scheme and the user name (which never holds ':', '/' or '@').
_USER = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^:/@?#]*:")


def resolve_url(url: str | None) -> str:
    """The URL a command uses: `url` (--db), else RUNNER_DATABASE_URL, else ./runner.db."""
    return url or os.environ.get(URL_VARIABLE) or DEFAULT_URL


def resolve_direct_url(direct: str | None = None) -> str | None:
    """The PostgreSQL server itself, when the database URL is a pooler: `direct`
    (--direct-db), else RUNNER_DIRECT_DATABASE_URL, else None (the URL is the server)."""
    return direct or os.environ.get(DIRECT_URL_VARIABLE) or None


def resolve_read_url(read: str | None = None) -> str | None:
    """The streaming replica history's reads go to: `read` (--read-db), else
    RUNNER_READ_DATABASE_URL, else None (they read the database itself)."""
    return read or os.environ.get(READ_URL_VARIABLE) or None


def password_span(url: str) -> tuple[int, int] | None:
    """Where the password of the user part is in `url` (start, end), or None if it has none.

    The password starts after `scheme://user:` and ends at the last `@` before the query;
    the query starts at the first `?` after the first `@` (SQLAlchemy reads a `?` before
    any `@` as part of the password, and so does this). SQLite URLs have no user part.
    """
    if url.lower().startswith("sqlite"):
        return None
    user = _USER.match(url)
    if user is None:
        return None
    start = user.end()
    first_at = url.find("@", start)
    if first_at < 0:
        return None
    query = url.find("?", first_at)
    end = url.rfind("@", start, query if query >= 0 else len(url))
    return start, end


def redact_url(url: Any) -> str:
    """`url` (text or an SQLAlchemy URL) with its password and secret parameters hidden."""
    text = _as_text(url)
    span = password_span(text)
    if span is not None:
        start, end = span
        text = text[:start] + HIDDEN + text[end:]
        query_from = text.find("?", start + len(HIDDEN))
    else:
        query_from = text.find("?")
    if query_from < 0:
        return text
    head, query = text[: query_from + 1], text[query_from + 1 :]
    return head + "&".join(_redact_parameter(item) for item in query.split("&"))


def encode_password(url: str) -> str:
    """`url` with each `@` inside its password written `%40`, as SQLAlchemy needs it.

    Nothing else changes, so a URL that SQLAlchemy already reads correctly stays as it is.
    """
    span = password_span(url)
    if span is None:
        return url
    start, end = span
    return url[:start] + url[start:end].replace("@", "%40") + url[end:]


def _redact_parameter(item: str) -> str:
    name, equals, _value = item.partition("=")
    if equals and _SECRET_NAME.search(unquote(name)):
        return f"{name}={HIDDEN}"
    return item


def _as_text(url: Any) -> str:
    render = getattr(url, "render_as_string", None)  # an SQLAlchemy URL, without importing it
    if callable(render):
        return str(render(hide_password=False))
    return str(url)


def not_a_url(text: str) -> str:
    """The message for `text` that is no database URL; a file path gets the URL it meant
    (`/data/runs.db` is `sqlite:////data/runs.db`: three slashes, then the path's own)."""
    shown = redact_url(text)
    if "://" not in text:
        # No scheme, so redact_url sees no user part: `user:secret@host/db` would show its
        # password. Whatever sits between the first ':' and the last '@' is hidden.
        shown = re.sub(r"^([^:@/]*):.*@", rf"\1:{HIDDEN}@", shown)
    said = f"not a database URL: {shown}"
    if re.fullmatch(r"[^@:?\s]+", text):  # a path: nothing in it a secret could hide behind
        said += f" (a SQLite file is a URL: sqlite:///{text})"
    return said
