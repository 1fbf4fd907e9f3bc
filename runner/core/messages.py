"""Messages sent to a run while it goes (`runner send`): what one is and what it journals.

A message waits in the run's inbox until the worker executing the run reaches its next step
boundary; it is then journaled as a `message` entry (a user turn: the model is shown
`{"role": "user", "content": body}`) before the model is asked for that step. Each message
carries an idempotency key, unique per run: the same key sent twice is one message. This
module knows no SQL: the store keeps the inbox (runner.sql.messages), the loop reads the
entries back on resume.

The rest of this feature (docs/architecture.md, "Where a feature lives"):
`runner.testing.memory_messages`, `runner.service.messaging`, `runner.cli.messages`.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime

from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind
from runner.core.status import RunStatus

# The width of messages.idempotency_key (and entries.idempotency_key).
KEY_LIMIT = 80


def new_key() -> str:
    """A key for a message sent with none: `m-` and 20 random letters and digits."""
    return "m-" + secrets.token_hex(10)


def check_key(key: str) -> str:
    """The key, or ValueError for one no store would keep."""
    if not key.strip():
        raise ValueError("a message's key must not be empty")
    if len(key) > KEY_LIMIT:
        raise ValueError(f"a message's key must be at most {KEY_LIMIT} characters")
    if not key.isprintable():
        raise ValueError("a message's key must be printable text")
    return key


def check_body(body: str) -> str:
    """The body, or ValueError for one the model could not be shown."""
    if not isinstance(body, str):
        raise ValueError(f"a message is text, not {type(body).__name__}")
    if not body.strip():
        raise ValueError("a message must not be empty")
    return body


def message_entry(step: int, counters: Counters, key: str, body: str) -> Entry:
    """The journal entry of a message delivered before the model call of `step`."""
    return Entry(EntryKind.MESSAGE, step, counters, content=body, idempotency_key=key)


@dataclass(frozen=True)
class Sent:
    """A message in a run's inbox, as the sender learns of it."""

    run_id: str
    key: str
    number: int  # 1, 2, 3, ...: its place among the run's messages
    sent_at: datetime
    status: RunStatus  # the run's, once the message was in (queued after a revival)
    duplicate: bool = False  # the key was sent before: this is that message, not a second
    delivered_seq: int | None = None  # its entry's place in the journal, once delivered
    revived: bool = False  # the run had stopped, and was queued again to read it
