"""A payload codec: one step of the seam (runner.store.payloads) between a value and its row."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

Header = Mapping[str, Any]


@dataclass(frozen=True)
class Encoded:
    """What a codec made of a payload's bytes: the new bytes, and the words it needs to
    undo it (JSON values: a key id, a hash), kept in the envelope beside its name."""

    data: bytes
    header: dict[str, Any]


@runtime_checkable
class Codec(Protocol):
    """One step of the seam. `name` is written into every envelope it makes (short, unique
    among a process's codecs, never changed once rows carry it). `encode` returns None to
    leave the bytes as they are (an offload below its size); `decode` undoes `encode`, given
    the header it returned."""

    name: str

    def encode(self, data: bytes) -> Encoded | None: ...

    def decode(self, data: bytes, header: Header) -> bytes: ...
