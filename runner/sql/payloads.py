"""The codecs each engine's payloads are written through (runner.store.payloads).

A `SqlStore` binds its `Payloads` to its engine; the SQL that writes a payload finds them
from the engine or connection it writes on. An engine bound to none writes plain values.
"""

from __future__ import annotations

import threading
from weakref import WeakKeyDictionary

from sqlalchemy import Connection, Engine

from runner.store.payloads import PLAIN, Payloads

_bound: WeakKeyDictionary[Engine, Payloads] = WeakKeyDictionary()
_lock = threading.Lock()


def bind_payloads(engine: Engine, payloads: Payloads) -> None:
    with _lock:
        _bound[engine] = payloads


def payloads_of(bind: Engine | Connection) -> Payloads:
    engine = bind.engine if isinstance(bind, Connection) else bind
    return _bound.get(engine, PLAIN)
