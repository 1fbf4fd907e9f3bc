"""Text as UTF-8 can carry it.

The journal keeps what a model or a tool said exactly, lone surrogates included (they are
stored as JSON escapes, see `runner.store.rows.encode`), because what the model is shown on
a resume must be what it was shown before. No UTF-8 stream can carry a lone surrogate, so
every face (the terminal, the page, an export file, logs, spans) writes each one as the
escape `\\ud800` instead: text that is shown, never text that fails.
"""

from __future__ import annotations


def utf8_safe(text: str) -> str:
    """`text` with every lone surrogate written as its escape (`\\ud800`); all else as is."""
    if text.isascii():  # the common case, and free: CPython knows it without a scan
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # Only surrogates fail to encode as UTF-8: backslashreplace writes them as \udXXX.
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text
