"""The payload codec seam: every payload a store keeps passes through one ordered list of
codecs on its way to a row, and back through them, in reverse, on its way out.

Payloads are what a run carries (its task, the model's outputs, tool arguments and results,
messages, answers, the output); metadata (ids, status, stop reasons, counters, spend, tool
names, keys, times, release) never passes here, so the history stays plain SQL.

A value no codec changed is stored as it is. A value a codec changed is stored as an
*envelope*: JSON text in the same column, beginning with ENVELOPE_PREFIX, that says which
codecs made it (in order, each with its own words: a key id, a blob's hash) and holds the
bytes they made (base64; none when the last codec put them elsewhere). A plain value that
happens to begin with the prefix is stored in an envelope of no codecs, so a stored value
is an envelope exactly when it begins with the prefix.

Reading needs no store: an envelope names its codecs, and `open_text` finds each among
the codecs this process knows (`known`): those of every `Payloads` made here, and the
built-in ones (offload reads a blob from the store its envelope names; encryption from the
key ring of the environment).

Around it: a codec's protocol (`store/codec.py`), the codecs a store is configured with
(`store/payload_config.py`), encryption (`store/encryption.py`), offload (`store/offload.py`)
to blob stores (`store/blobs.py`) and the sweep of blobs no row names (`store/blob_sweep.py`);
in SQL, each engine's codecs (`sql/payloads.py`: a `SqlStore` binds them to its engine), the
blobs rows name (`sql/blob_references.py`) and key rotation (`sql/key_rotation.py`); `runner
keys` (`service/keys.py`, `cli/keys.py`).
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from runner.errors import KeyMissing, PayloadError
from runner.store.codec import Codec as Codec  # re-exported: the seam's one protocol
from runner.store.codec import Encoded as Encoded
from runner.store.codec import Header as Header

ENVELOPE_PREFIX = '{"runner.payload":1,'

_known: dict[str, Codec] = {}
_known_lock = threading.Lock()


def know(codec: Codec) -> None:
    """Make `codec` the one this process decodes its envelopes with (the latest wins)."""
    with _known_lock:
        _known[codec.name] = codec


def known(name: str, key_id: str | None = None) -> Codec:
    """The codec named `name` to decode with: one made here, else a built-in one
    (`key_id`: the key an encrypted value names, for the error if no ring is set)."""
    codec = _known.get(name)
    if codec is not None:
        return codec
    if name == "blob":
        from runner.store.offload import Offload

        codec = Offload.reader()
    elif name == "aes-gcm":
        from runner.store.encryption import KeyRing

        codec = KeyRing.from_environment(required=False)
    if codec is None and name == "aes-gcm":
        raise KeyMissing(
            f"a stored value is encrypted with key {key_id}, and this process has no key "
            f"ring: set RUNNER_KEYS or RUNNER_KEY_FILE"
        )
    if codec is None:
        raise PayloadError(
            f"a stored value was written with the codec {name!r}, which this process is not "
            f"configured with (give it the codec: Runner(codecs=...) or RUNNER_CODECS)"
        )
    with _known_lock:
        return _known.setdefault(name, codec)


class Payloads:
    """An ordered list of codecs: a store's way of writing payloads (`seal`, `seal_args`).

    Reading (`open_text`, `open_args`) is the module's: any envelope, whatever wrote it.
    """

    def __init__(self, codecs: Sequence[Codec] = ()) -> None:
        names = [codec.name for codec in codecs]
        if len(set(names)) != len(names):
            raise ValueError(f"two codecs of one name in {names}")
        self.codecs: tuple[Codec, ...] = tuple(codecs)
        for codec in self.codecs:
            know(codec)

    def __repr__(self) -> str:
        return f"Payloads({[codec.name for codec in self.codecs]})"

    def seal(self, text: str | None) -> str | None:
        """A text value as its column keeps it: itself, or its envelope."""
        if text is None:
            return None
        if not self.codecs:
            return _escaped(text) if text.startswith(ENVELOPE_PREFIX) else text
        return self._sealed(_bytes(text), plain=text)

    def seal_args(self, args: dict[str, Any] | None) -> dict[str, Any] | str | None:
        """Tool arguments as their JSON column keeps them: the object itself, or its
        envelope as a JSON string (arguments are always an object, so a string is one)."""
        if args is None or not self.codecs:
            return args
        text = json.dumps(args, allow_nan=False, ensure_ascii=False)
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: JSON's own escape keeps it exactly
            data = json.dumps(args, allow_nan=False).encode("ascii")
        sealed = self._sealed(data, plain=None)
        return args if sealed is None else sealed

    def _sealed(self, data: bytes, *, plain: str | None) -> str | None:
        size = len(data)
        layers: list[dict[str, Any]] = []
        for codec in self.codecs:
            encoded = codec.encode(data)
            if encoded is None:
                continue
            data = encoded.data
            layers.append({"codec": codec.name, **encoded.header})
        if not layers:
            if plain is None:
                return None
            return _escaped(plain) if plain.startswith(ENVELOPE_PREFIX) else plain
        return _envelope(size, layers, data)


PLAIN = Payloads()


def _envelope(size: int, layers: list[dict[str, Any]], data: bytes) -> str:
    # `bytes` first after the prefix: SQL reads it with a JSON function (the views' sizes).
    body = json.dumps(
        {"bytes": size, "codecs": layers, "data": base64.b64encode(data).decode("ascii")},
        separators=(",", ":"),
    )
    return ENVELOPE_PREFIX + body[1:]


def _bytes(text: str) -> bytes:
    """A text payload's bytes: UTF-8, a lone surrogate (which the journal keeps exactly, see
    runner.core.utf8) passed through as its three bytes, and read back the same way."""
    return text.encode("utf-8", "surrogatepass")


def _escaped(text: str) -> str:
    data = _bytes(text)
    return _envelope(len(data), [], data)


def is_envelope(value: object) -> bool:
    return isinstance(value, str) and value.startswith(ENVELOPE_PREFIX)


def parse_envelope(stored: str) -> dict[str, Any]:
    """An envelope's fields: `bytes` (the plain value's size), `codecs` (each layer's
    header, in the order they were applied), `data` (base64)."""
    try:
        fields = json.loads(stored)
        if not isinstance(fields.get("codecs"), list):
            raise ValueError("no codecs")
    except ValueError as exc:
        raise PayloadError(f"a stored value is a damaged envelope: {exc}") from None
    return dict(fields)


def open_bytes(stored: str) -> bytes:
    """The plain bytes an envelope holds, each codec undone, last applied first."""
    fields = parse_envelope(stored)
    data = base64.b64decode(fields.get("data", ""))
    for layer in reversed(fields["codecs"]):
        data = known(str(layer.get("codec")), layer.get("key")).decode(data, layer)
    if len(data) != fields.get("bytes"):
        raise PayloadError(
            f"a stored value decoded to {len(data)} bytes, not the {fields.get('bytes')} "
            f"written (codecs {describe(stored)})"
        )
    return data


def open_text(stored: str | None) -> str | None:
    """A text column's value as it was given (an envelope opened)."""
    if stored is None or not stored.startswith(ENVELOPE_PREFIX):
        return stored
    return open_bytes(stored).decode("utf-8", "surrogatepass")


def open_args(stored: Any) -> dict[str, Any] | None:
    """Tool arguments as they were given (an envelope, a JSON string, opened)."""
    if isinstance(stored, str) and stored.startswith(ENVELOPE_PREFIX):
        value = json.loads(open_bytes(stored))
        if not isinstance(value, dict):
            raise PayloadError("stored tool arguments decoded to something other than an object")
        return value
    return stored  # type: ignore[no-any-return]


def describe(stored: str) -> str:
    """An envelope in words, without opening it (what `runner sql` shows in its place):
    e.g. `encrypted (key k2), offloaded (sha256 1f3a...), 1,204,331 bytes`."""
    try:
        fields = parse_envelope(stored)
    except PayloadError:
        return "a damaged envelope"
    words = [_layer_words(layer) for layer in fields["codecs"]]
    size = fields.get("bytes")
    words.append(f"{size:,} bytes" if isinstance(size, int) else "size unknown")
    return "[" + ", ".join(words) + "]"


def _layer_words(layer: Mapping[str, Any]) -> str:
    name = layer.get("codec")
    if name == "aes-gcm":
        return f"encrypted (key {layer.get('key')})"
    if name == "blob":
        return f"offloaded (sha256 {str(layer.get('sha256', ''))[:12]}...)"
    return f"encoded ({name})"


def blob_references(stored: Any) -> list[tuple[str, str]]:
    """The (store URL, sha256) of every blob an envelope refers to (none for a plain value)."""
    if not is_envelope(stored):
        return []
    try:
        fields = parse_envelope(stored)
    except PayloadError:
        return []
    return [
        (str(layer["store"]), str(layer["sha256"]))
        for layer in fields["codecs"]
        if layer.get("codec") == "blob" and "store" in layer and "sha256" in layer
    ]
