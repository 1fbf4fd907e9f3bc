"""Whatever a model or a tool produces, the journal gives back exactly (hypothesis).

Text includes what databases refuse as such: NUL (PostgreSQL's text cannot hold it) and
lone surrogates (no UTF-8 encodes them).
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.core.actions import ActionKind
from runner.core.clock import utc_now
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind, Stop
from runner.core.stop_reasons import StopReason
from runner.sql import fencing, leases
from runner.sql import runs as store
from runner.sql.database import open_engine
from runner.store.owner import this_process
from runner.store.rows import entry_row

text = st.text(alphabet=st.characters(codec=None), max_size=40)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)
args = st.dictionaries(text, values, max_size=5)

_ids = itertools.count()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(content=values, arguments=args, observation=text, output=values)
def test_entries_and_output_round_trip(
    db_url: str, content: Any, arguments: dict[str, Any], observation: str, output: Any
) -> None:
    engine = open_engine(db_url)
    run_id = f"rt{next(_ids)}"
    try:
        store.create_run(
            engine, run_id=run_id, agent=None, agent_name=None, release=None, task="t", budgets={}
        )
        claim = leases.claim_run(
            engine, run_id, owner=this_process(), lease_seconds=60, max_resumes=3
        )
        written = [
            Entry(EntryKind.TASK, 0, Counters(), content="t"),
            Entry(
                EntryKind.ACTION,
                1,
                Counters(steps=1),
                action_type="tool",
                tool="t",
                args=arguments,
                idempotency_key=f"{run_id}-1",
            ),
            Entry(EntryKind.OBSERVATION, 1, Counters(steps=1), content=observation, tool="t"),
            Entry(EntryKind.FINAL, 2, Counters(steps=2), content=content, action_type="final"),
        ]
        for seq, entry in enumerate(written):
            stop = Stop(StopReason.FINAL, output=output) if seq == len(written) - 1 else None
            fencing.append_entry(engine, run_id, claim.epoch, seq, entry, stop, 60)
        assert [entry for entry, _ in store.load_entries(engine, run_id)] == written
        assert store.get_run(engine, run_id).output == output
    finally:
        engine.dispose()


def test_an_entry_rows_role_is_its_transcript_messages_role() -> None:
    # store.entry_row reads the role from a table rather than building the message.
    for kind in EntryKind:
        for action_type in (None, *ActionKind):
            entry = Entry(kind, 1, Counters(), action_type=action_type)
            message = entry.message()
            row = entry_row("r", 0, 1, entry, utc_now())
            assert row["role"] == (message["role"] if message else None), (kind, action_type)
