"""The CLI's logging: one handler on the `runner` logger, text or JSON lines on stderr.

The library logs through `logging` (the worker on `runner.worker`, the page on `runner.ui`,
uvicorn on its own loggers); only the command line decides where records go and how they
look. Every line has a UTC timestamp to the millisecond; a record about a run carries its
id (`run_id`), which JSON lines give as a field of its own.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from runner.cli import output

FORMATS = ("text", "json")
LEVELS = ("debug", "info", "warning", "error")
# Fields of a record worth a JSON key of their own (set with `extra=` by the library).
_FIELDS = ("run_id", "worker")
# The page's server logs on `uvicorn` (and its children): through the same handler.
_SERVER_LOGGER = "uvicorn"


def timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class TextFormatter(logging.Formatter):
    """`2026-11-30T12:00:00.123Z INFO runner.worker: run 0A1B finished: final after 2 steps`"""

    def format(self, record: logging.LogRecord) -> str:
        text = f"{timestamp(record)} {record.levelname} {record.name}: {record.getMessage()}"
        if record.exc_info:
            # One line per record: the first line of the exception's words, no traceback.
            exc = record.exc_info[1]
            words = str(exc).strip().splitlines()
            text += f" ({type(exc).__name__}: {words[0] if words else ''})"
        return text


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and run_id where known."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                data[name] = value
        if record.exc_info:
            exc = record.exc_info[1]
            data["error"] = f"{type(exc).__name__}: {exc}"
        return json.dumps(data, ensure_ascii=False, default=str)


class StderrHandler(logging.Handler):
    """Writes each record through the CLI's one way out (`output.line`, on stderr)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            output.line(self.format(record), err=True)
        except Exception:
            self.handleError(record)


_handler: StderrHandler | None = None


def configure(log_format: str = "text", level: str = "info") -> None:
    """Send runner's records (and the page server's) to stderr, in `log_format`."""
    global _handler
    formatter: logging.Formatter = JsonFormatter() if log_format == "json" else TextFormatter()
    if _handler is None:
        _handler = StderrHandler()
    _handler.setFormatter(formatter)
    chosen = getattr(logging, level.upper())
    for name in ("runner", _SERVER_LOGGER):
        logger = logging.getLogger(name)
        if _handler not in logger.handlers:
            logger.addHandler(_handler)
        logger.setLevel(chosen)
