"""The payload codec seam (runner.store.payloads): every payload type through every order
of codecs comes back as it was written; envelopes say what made them; keys are named."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner import Agent
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind
from runner.errors import KeyMissing, PayloadError
from runner.store.payloads import (
    ENVELOPE_PREFIX,
    PLAIN,
    Payloads,
    describe,
    know,
    open_args,
    open_text,
)
from runner.store.rows import entry_of, entry_row
from runner.testing import FunctionModel, InMemoryStore, call, final, tool_results

from .payload_codecs import KEY_A, KEY_B, offload, ring, squeeze
from .store_support import memory_runner

AT = datetime(2026, 1, 1, tzinfo=UTC)

# Any text a model or a tool may give, lone surrogates included (the journal keeps them
# exactly: runner.core.utf8); hypothesis leaves them out unless asked.
any_text = st.text(st.characters(blacklist_categories=()))
texts = any_text | st.just(ENVELOPE_PREFIX + "x") | st.text(min_size=40, max_size=400)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | any_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=10,
)


def orders(folder: Path | str) -> list[Payloads]:
    """Every order of every subset of the three kinds of codec."""
    kinds = [squeeze(), ring(), offload(folder)]
    chains = []
    for size in range(len(kinds) + 1):
        for chosen in itertools.permutations(kinds, size):
            chains.append(Payloads(chosen))
    return chains


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(content=json_values | texts, args=st.dictionaries(any_text, json_values, max_size=3))
def test_every_payload_comes_back_through_every_codec_order(
    tmp_path: Path, content: Any, args: dict[str, Any]
) -> None:
    for payloads in orders("memory://orders"):
        for kind in (EntryKind.TASK, EntryKind.ACTION, EntryKind.OBSERVATION, EntryKind.ANSWER):
            entry = Entry(kind, 1, Counters(1, 2, 0.5, 0), content=content, tool="t", args=args)
            row = entry_row("r", 0, 1, entry, AT, payloads)
            back = entry_of(row)
            assert (back.content, back.args) == (content, args), payloads
        for text in (str(content), ENVELOPE_PREFIX + str(content)):
            assert open_text(payloads.seal(text)) == text


def test_a_lone_surrogate_comes_back_through_every_codec_order() -> None:
    lone = "why\udfff?"
    for payloads in orders("memory://surrogates"):
        assert open_text(payloads.seal(lone)) == lone
        entry = Entry(EntryKind.ACTION, 1, Counters(), tool="t", args={"question": lone})
        assert entry_of(entry_row("r", 0, 1, entry, AT, payloads)).args == {"question": lone}


def test_a_plain_value_that_looks_like_an_envelope_is_kept_as_given() -> None:
    looks = ENVELOPE_PREFIX + '"bytes":3,"codecs":[{"codec":"nope"}],"data":""}'
    assert open_text(PLAIN.seal(looks)) == looks


def test_an_envelope_names_its_codecs_and_sizes_without_opening(tmp_path: Path) -> None:
    payloads = Payloads([ring(), offload(tmp_path)])
    stored = payloads.seal("x" * 1000)
    assert stored is not None and stored.startswith(ENVELOPE_PREFIX)
    words = describe(stored)
    assert "encrypted (key a)" in words and "offloaded (sha256" in words and "1,000 bytes" in words
    assert "x" * 20 not in stored  # nothing plain in the row
    blob = next((tmp_path).glob("??/*")).read_bytes()
    assert b"x" * 20 not in blob  # nor in the blob: encrypted before offloaded
    assert payloads.seal("short") != "short"  # encrypted, too small to offload


def test_arguments_are_an_object_or_an_envelope_string() -> None:
    sealed = Payloads([squeeze()]).seal_args({"q": "y" * 50})
    assert isinstance(sealed, str) and json.loads(sealed)["codecs"] == [{"codec": "zlib"}]
    assert open_args(sealed) == {"q": "y" * 50}
    assert Payloads([squeeze()]).seal_args({"q": 1}) == {"q": 1}  # left as is


def test_a_missing_or_wrong_key_names_the_key() -> None:
    stored = Payloads([ring(KEY_A, KEY_B)]).seal("secret")
    assert stored is not None and '"key":"b"' in stored
    know(ring(KEY_A))
    with pytest.raises(KeyMissing, match="key b, which the key ring does not hold"):
        open_text(stored)
    know(ring(("b", bytes(32))))
    with pytest.raises(KeyMissing, match="does not decrypt with key b"):
        open_text(stored)
    know(ring(KEY_A, KEY_B))
    assert open_text(stored) == "secret"


def test_an_unknown_codec_is_an_error_not_garbage() -> None:
    stored = ENVELOPE_PREFIX + '"bytes":1,"codecs":[{"codec":"rot13"}],"data":""}'
    with pytest.raises(PayloadError, match="codec 'rot13'"):
        open_text(stored)


def test_a_run_on_the_in_memory_store_keeps_payloads_sealed_and_reads_them_plain() -> None:
    store = InMemoryStore(payloads=Payloads([ring()]))
    runner, _, _ = memory_runner()
    runner = type(runner)(store=store)

    def look(q: str) -> str:
        return f"found {q}"

    model = FunctionModel(
        lambda t: (
            final("done: " + tool_results(t)[-1]["content"])
            if tool_results(t)
            else call("look", q="secret")
        )
    )
    result = runner.run(Agent(model, {"look": look}), "a secret task", id="r")
    assert result.output == "done: found secret"
    rows = store.entries["r"]
    assert all("secret" not in json.dumps(row, default=str) for row in rows)
    assert "secret" not in str(store.runs["r"]["task"]) + str(store.runs["r"]["output"])
    assert next(entry.content for entry, _ in store.load_entries("r")) == "a secret task"
    assert store.get_run("r").task == "a secret task"
