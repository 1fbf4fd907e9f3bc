"""Following a run: its journal as a durable, resumable stream of events.

Every journal entry is an event, and its position is the entry's sequence (`seq`, from 0):
positions only grow, and an entry never changes once committed, so a reader that asks for
everything after the last position it saw gets no duplicate and no gap, from any process
and after any crash of the worker or of the reader. Following polls: while nothing new has
come, every EVENT_POLL_SECONDS, one range read of the journal's primary key and one read of
the run's row by its key (to know when to stop), on SQLite and PostgreSQL alike. Journal
writes send no NOTIFY: PostgreSQL serialises the commits of notifying transactions, and 8
writers committing journal-sized transactions managed 4 to 5 times fewer a second with a
NOTIFY in each (measured on this project's 2-core machine).

One stream serves both `for` and `async for`: the async iterator runs the same reads in a
worker thread and waits with asyncio, so an event loop is never blocked.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

from runner.core.journal import Entry
from runner.core.status import RunStatus
from runner.service.runner_base import RunnerBase
from runner.store.protocol import RunStore

# How long a follower waits before looking again when the last look found nothing new.
EVENT_POLL_SECONDS = 0.25
# Entries read per query: a long journal is read in pages, never all at once.
EVENT_PAGE = 500


@dataclass(frozen=True, slots=True)
class Event:
    """One committed journal entry of run `run_id`, at `position` (its seq, from 0)."""

    run_id: str
    position: int
    entry: Entry


class EventStream:
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
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.position = after
        self.follow = follow
        self.until_waiting = until_waiting
        self.poll_seconds = poll_seconds
        # Set to end a follow early (from another thread); it also cuts a poll's wait short.
        self._closed = threading.Event()

    def close(self) -> None:
        """Stop following: the iteration ends at its next look (or at once, if waiting)."""
        self._closed.set()

    def _look(self) -> tuple[list[Event], bool]:
        """The next page of events, and whether the stream ends after them."""
        page = self.store.entries_after(self.run_id, self.position, EVENT_PAGE)
        events = [Event(self.run_id, position, entry) for position, entry in page]
        if events or self._closed.is_set():
            return events, self._closed.is_set()
        if not self.follow:
            return [], True
        # Nothing new: has the run stopped? The status is read before the journal again,
        # so an entry committed before the run finished (or began to wait) is still read.
        status = self.store.get_run(self.run_id).status
        if status is RunStatus.FINISHED or (self.until_waiting and status is RunStatus.WAITING):
            page = self.store.entries_after(self.run_id, self.position, EVENT_PAGE)
            events = [Event(self.run_id, position, entry) for position, entry in page]
            return events, not events
        return [], False

    def __iter__(self) -> Iterator[Event]:
        while True:
            events, ended = self._look()
            for event in events:
                self.position = event.position
                yield event
            if ended:
                return
            if not events:
                self._closed.wait(self.poll_seconds)

    async def __aiter__(self) -> AsyncIterator[Event]:
        while True:
            events, ended = await asyncio.to_thread(self._look)
            for event in events:
                self.position = event.position
                yield event
            if ended:
                return
            if not events:
                await asyncio.sleep(self.poll_seconds)


class Following(RunnerBase):
    """The `Runner`'s part that follows runs as they are written."""

    def events(
        self,
        run_id: str,
        *,
        after: int = -1,
        follow: bool = False,
        until_waiting: bool = False,
        poll_seconds: float = EVENT_POLL_SECONDS,
    ) -> EventStream:
        """The run's journal entries after position `after` (-1: from the first), as
        `Event`s, for `for` or `async for`. With `follow`, the stream goes on with each
        entry as it is committed, from whatever process writes it, and ends once the run
        has finished and every entry was given (`until_waiting`: also once it waits for a
        person). Resume after a reconnect with `after=` the last position seen: no entry
        is given twice or skipped. RunNotFound at once if there is no such run (`run_id`
        may be a prefix of its id)."""
        run = self.store.find_run(run_id)
        return EventStream(
            self.store, run.id, after=after, follow=follow, until_waiting=until_waiting,
            poll_seconds=poll_seconds,
        )  # fmt: skip
