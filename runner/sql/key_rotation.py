"""Key rotation: every payload encrypted with a key other than the ring's newest, decrypted
and sealed again through the store's codecs, a batch of rows per transaction, while workers
run (`runner keys rotate`).

Each batch reads rows after the last one done, in primary-key order, and writes each value
it seals again only where the row still holds what was read (a text column; arguments are
never rewritten by anything else). A value offloaded is offloaded again, to a blob written
before its row (encrypted with the newest key); the old blob is swept once no row names it.
A crash loses at most the batch in flight, which the next rotation does again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, Text, cast, select, tuple_, update

from runner.core.faults import fault
from runner.errors import RequestRefused
from runner.sql.blob_references import PAYLOAD_COLUMNS
from runner.store.encryption import KeyRing
from runner.store.payloads import (
    Payloads,
    is_envelope,
    open_args,
    open_text,
    parse_envelope,
)


@dataclass
class Rotated:
    """What a rotation did: values sealed again, and rows read to find them."""

    values: int = 0
    read: int = 0


def stale(value: Any, newest: str) -> bool:
    """Whether a stored value is encrypted with a key other than `newest`."""
    if not is_envelope(value):
        return False
    layers = parse_envelope(value)["codecs"]
    return any(
        layer.get("codec") == KeyRing.name and layer.get("key") != newest for layer in layers
    )


def rotate(
    engine: Engine,
    payloads: Payloads,
    *,
    batch_size: int = 200,
    progress: Callable[[Rotated], None] | None = None,
) -> Rotated:
    """Seal again every payload not encrypted with the newest key of `payloads`' ring."""
    rings = [codec for codec in payloads.codecs if isinstance(codec, KeyRing)]
    if not rings:
        raise RequestRefused("no key ring to rotate to: set RUNNER_KEYS or RUNNER_KEY_FILE")
    newest = rings[0].newest
    done = Rotated()
    for table, name in PAYLOAD_COLUMNS:
        column = table.c[name]
        is_args = name == "args"
        key = list(table.primary_key.columns)
        marked = (cast(column, Text) if is_args else column).like(f"%{KeyRing.name}%")
        last: tuple[Any, ...] | None = None
        while True:
            query = select(*key, column).where(marked)
            if last is not None:
                query = query.where(tuple_(*key) > tuple_(*last))
            with engine.begin() as connection:
                rows = connection.execute(query.order_by(*key).limit(batch_size)).all()
                if not rows:
                    break
                for row in rows:
                    *ids, value = row
                    done.read += 1
                    if not stale(value, newest):
                        continue
                    if is_args:
                        new: Any = payloads.seal_args(open_args(value))
                        where = [k == v for k, v in zip(key, ids, strict=True)]
                    else:
                        new = payloads.seal(open_text(value))
                        where = [*(k == v for k, v in zip(key, ids, strict=True)), column == value]
                    connection.execute(update(table).where(*where).values({name: new}))
                    done.values += 1
                fault("before_rotation_commit")  # sealed again, not committed
            last = tuple(rows[-1][: len(key)])
            if progress is not None:
                progress(done)
    return done
