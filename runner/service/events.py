"""Following a run: its journal as a durable, resumable stream of events.

Every journal entry is an event, and its position is the entry's sequence (`seq`, from 0):
positions only grow, and an entry never changes once committed, so a reader that asks for
everything after the last position it saw gets no duplicate and no gap, from any process
and after any crash of the worker or of the reader. A follower does not poll: it registers
with its store's one watcher of this process (runner.sql.follows: a LISTEN on PostgreSQL,
whose triggers NOTIFY the writes of followed runs only; on SQLite one probe of `PRAGMA
data_version` every `poll_seconds` for the whole process) and sleeps until woken, then reads
until a look finds nothing: the journal's range after its position and, when nothing new
came, the run's row (to know when to stop). An idle follower sends no statement. A store
without a watcher (the in-memory one of runner.testing) is polled every `poll_seconds`.

One stream serves both `for` and `async for`: the async iterator runs the same reads in a
worker thread and waits with asyncio, so an event loop is never blocked.

With `deltas=True` the stream also gives the pieces of the model call in flight as
`DeltaEvent`s: ephemeral, not journal entries and without a position of their own (each says
the position it came `after`). They are read from the `deltas` table after a cursor of their
own, before the journal in each look (a delta write wakes the followers of its run, as a
journal write does; on SQLite the watcher looks every DELTA_POLL_SECONDS for them): a
reader who connects while a call streams gets the call's pieces so far, then each new one.
A delta of a call whose action the stream has given already is dropped (it came late), and
a delta with ordinal 0 begins its step's response afresh (a retry, or a resumed run calling
again).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import ClassVar, Generic, Literal, TypeVar, overload

from runner.core.deltas import Delta
from runner.core.journal import Entry, EntryKind
from runner.core.status import RunStatus
from runner.core.waiting import Asks
from runner.service.runner_base import RunnerBase
from runner.store.follow import Follow
from runner.store.protocol import RunStore
from runner.store.rows import RunRow

# How often SQLite's watcher looks for a follower (or a follower polls a store without one).
EVENT_POLL_SECONDS = 0.25
# The same for a follower of deltas (the writer batches every 50 ms).
DELTA_POLL_SECONDS = 0.05
# How long after a delta a follower of deltas still reads the journal at each look.
STREAM_AFTERGLOW_SECONDS = 1.0
# Entries read per query: a long journal is read in pages, never all at once.
EVENT_PAGE = 500
# Deltas read per query.
DELTA_PAGE = 1000

# The entries that end a model call: its late deltas are dropped once one was given.
_CALL_ENDS = (EntryKind.ACTION, EntryKind.FINAL, EntryKind.REFUSED)


@dataclass(frozen=True, slots=True)
class Event:
    """One committed journal entry of run `run_id`, at `position` (its seq, from 0)."""

    run_id: str
    position: int
    entry: Entry

    kind: ClassVar[str] = "entry"
    ephemeral: ClassVar[bool] = False  # durable: resume after its position


@dataclass(frozen=True, slots=True)
class DeltaEvent:
    """A piece of the response of run `run_id`'s model call in flight (see `Delta`: its
    step, ordinal within the call, part, tool call and text). Ephemeral: not in the journal,
    no position of its own; `after` is the position of the last durable event before it,
    and resuming after that position gives the deltas still stored, not these again."""

    run_id: str
    after: int
    delta: Delta

    kind: ClassVar[str] = "delta"
    ephemeral: ClassVar[bool] = True


E = TypeVar("E", Event, Event | DeltaEvent)


class EventStream(Generic[E]):
    """The events of one run after a position, in order; iterate it with `for` or
    `async for` (once). `position` is the last position handed out (resume after it)."""

    def __init__(
        self,
        store: RunStore,
        run_id: str,
        *,
        after: int,
        follow: bool,
        until_waiting: bool,
        poll_seconds: float,
        deltas: bool = False,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.position = after
        self.follow = follow
        self.until_waiting = until_waiting
        self.poll_seconds = min(poll_seconds, DELTA_POLL_SECONDS) if deltas else poll_seconds
        self.status_seconds = poll_seconds  # how often an idle follow reads the run's row
        self.deltas = deltas
        self.delta_cursor = 0  # the id of the last delta read
        self._settled = 0  # the last step whose model call's end the stream has given
        if deltas and after >= 0:
            # A reader resuming after a position has seen the entries up to it: the deltas
            # of a call those ended are late ones (deleted any moment), never in flight.
            for _, entry in store.entries_after(run_id, after - 1, 1):
                wrap_up = entry.kind is EntryKind.WRAP_UP  # its call is of this step again
                self._settled = entry.step - 1 if wrap_up else entry.step
        self._status_read = 0.0
        self._journal_read = 0.0
        self._last_piece = -STREAM_AFTERGLOW_SECONDS
        # Set to end a follow early (from another thread); it also cuts a poll's wait short.
        self._closed = threading.Event()
        self._watched: Follow | None = None  # the registration that wakes a follow

    def close(self) -> None:
        """Stop following: the iteration ends at its next look (or at once, if waiting),
        and the watcher forgets the follower at once."""
        self._closed.set()
        watched = self._watched
        if watched is not None:
            watched.wake()
            watched.close()

    def _look(self) -> tuple[list[Delta | Event], bool]:
        """The next deltas and page of events, and whether the stream ends after them."""
        # Deltas first: a call's pieces are written before its action, so those read now
        # come before any action the journal read below gives.
        now = time.monotonic()
        pieces: list[Delta | Event] = []
        if self.deltas:
            for cursor, delta in self.store.deltas_after(
                self.run_id, self.delta_cursor, DELTA_PAGE
            ):
                self.delta_cursor = cursor
                pieces.append(delta)
            if pieces:
                self._last_piece = now
        # With deltas, an idle follow reads the journal as often as one without (each
        # status_seconds), and at every look while a call streams or just after (its action
        # comes next): an idle follower costs one probe of `deltas` a look, no more.
        if (
            self.deltas
            and self.follow
            and not self._closed.is_set()
            and now - self._last_piece >= STREAM_AFTERGLOW_SECONDS
            and now - self._journal_read < self.status_seconds
        ):
            return pieces, False
        self._journal_read = now
        events = self._entries()
        if events or self._closed.is_set():
            return _merged(pieces, events), self._closed.is_set()
        if not self.follow:
            return pieces, True
        if pieces or now - self._status_read < self.status_seconds:
            return pieces, False
        # Nothing new: has the run stopped? The status is read before the journal again,
        # so an entry committed before the run finished (or began to wait) is still read.
        self._status_read = now
        row = self.store.get_run(self.run_id)
        status = row.status
        if status is RunStatus.FINISHED or (
            self.until_waiting and waits_for_a_person(self.store, row)
        ):
            events = self._entries()
            return _merged(pieces, events), not events
        return pieces, False

    def _entries(self) -> list[Delta | Event]:
        page = self.store.entries_after(self.run_id, self.position, EVENT_PAGE)
        return [Event(self.run_id, position, entry) for position, entry in page]

    def _given(self, item: Delta | Event) -> E | None:
        """What the stream gives for a piece it read (None: a late delta, dropped)."""
        if isinstance(item, Event):
            self.position = item.position
            entry = item.entry
            if entry.kind in _CALL_ENDS:
                self._settled = max(self._settled, entry.step)
            elif entry.kind is EntryKind.WRAP_UP:
                self._settled = entry.step - 1  # the wrap-up's call is of this step again
            return item
        if item.step <= self._settled:
            return None
        return DeltaEvent(self.run_id, self.position, item)  # type: ignore[return-value]

    def _watch(self) -> Follow | None:
        """Register with the store's one watcher of this process (None: poll alone)."""
        if not self.follow or self._closed.is_set():
            return None
        watched = self.store.follow(self.run_id, self.poll_seconds)
        if watched is not None:
            # Woken only when the run may have moved: every look reads it all.
            self.status_seconds = 0.0
            self._watched = watched
            if self._closed.is_set():
                # Closed while registering (an async iteration cancelled meanwhile): set
                # `_watched` first, then look, so that this or `close` forgets it.
                watched.close()
        return watched

    def __iter__(self) -> Iterator[E]:
        watched = self._watch()
        try:
            while True:
                seen = watched.seen() if watched is not None else 0
                items, ended = self._look()
                for item in items:
                    given = self._given(item)
                    if given is not None:
                        yield given
                if ended:
                    return
                if items:
                    continue  # look again until a look finds nothing (and reads the status)
                if watched is not None:
                    watched.wait(seen)
                else:
                    self._closed.wait(self.poll_seconds)
        finally:
            if watched is not None:
                watched.close()

    async def __aiter__(self) -> AsyncIterator[E]:
        try:
            watched = await asyncio.to_thread(self._watch)
        except asyncio.CancelledError:
            # The thread registers all the same (an SSE client gone while its stream
            # began): closing makes it forget that registration, or never keep it.
            self.close()
            raise
        try:
            while True:
                seen = watched.seen() if watched is not None else 0
                items, ended = await asyncio.to_thread(self._look)
                for item in items:
                    given = self._given(item)
                    if given is not None:
                        yield given
                if ended:
                    return
                if items:
                    continue
                if watched is not None:
                    await watched.wait_async(seen)
                else:
                    await asyncio.sleep(self.poll_seconds)
        finally:
            if watched is not None:
                watched.close()


def waits_for_a_person(store: RunStore, row: RunRow) -> bool:
    """Whether a run waits for a person (an approval, a reply): not a parent waiting for
    its children alone, which workers run and whose ends answer it."""
    if row.status is not RunStatus.WAITING:
        return False
    waits = store.waits([row]).get(row.id, [])
    return not waits or any(wait.asks is not Asks.CHILD for wait in waits)


def _merged(pieces: list[Delta | Event], events: list[Delta | Event]) -> list[Delta | Event]:
    """The events in order, each call's deltas just before the entry that ends the call
    (the rest after them all): a reader catching up sees a call's pieces before its action."""
    if not pieces:
        return events
    merged: list[Delta | Event] = []
    for event in events:
        if isinstance(event, Event) and event.entry.kind in _CALL_ENDS:
            step = event.entry.step
            merged += [p for p in pieces if isinstance(p, Delta) and p.step <= step]
            pieces = [p for p in pieces if isinstance(p, Delta) and p.step > step]
        merged.append(event)
    return merged + pieces


class Following(RunnerBase):
    """The `Runner`'s part that follows runs as they are written."""

    @overload
    def events(
        self,
        run_id: str,
        *,
        after: int = -1,
        follow: bool = False,
        until_waiting: bool = False,
        poll_seconds: float = EVENT_POLL_SECONDS,
        deltas: Literal[False] = False,
    ) -> EventStream[Event]: ...

    @overload
    def events(
        self,
        run_id: str,
        *,
        after: int = -1,
        follow: bool = False,
        until_waiting: bool = False,
        poll_seconds: float = EVENT_POLL_SECONDS,
        deltas: Literal[True],
    ) -> EventStream[Event | DeltaEvent]: ...

    def events(
        self,
        run_id: str,
        *,
        after: int = -1,
        follow: bool = False,
        until_waiting: bool = False,
        poll_seconds: float = EVENT_POLL_SECONDS,
        deltas: bool = False,
    ) -> EventStream[Event] | EventStream[Event | DeltaEvent]:
        """The run's journal entries after position `after` (-1: from the first), as
        `Event`s, for `for` or `async for`. With `follow`, the stream goes on with each
        entry as it is committed, from whatever process writes it, and ends once the run
        has finished and every entry was given (`until_waiting`: also once it waits for a
        person). Resume after a reconnect with `after=` the last position seen: no entry
        is given twice or skipped. RunNotFound at once if there is no such run (`run_id`
        may be a prefix of its id). A follow waits on this process's one watcher of
        followed runs (runner.sql.follows); `poll_seconds` is how often SQLite's looks
        (the most eager follower's), or how often a follow polls a store without one.

        With `deltas`, the stream also gives `DeltaEvent`s (`event.ephemeral`, kind
        "delta"): the pieces of the model call in flight, the ones stored so far first,
        then each as its write wakes the follow (on SQLite, looked for every
        DELTA_POLL_SECONDS at least). They are never positions: resume with the last
        `Event.position` (or `DeltaEvent.after`)."""
        run = self.store.find_run(run_id)
        return EventStream(
            self.store, run.id, after=after, follow=follow, until_waiting=until_waiting,
            poll_seconds=poll_seconds, deltas=deltas,
        )  # fmt: skip
