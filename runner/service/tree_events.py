"""Following a tree of runs: a run's events and those of every run below it (its sub-agents'
child runs, theirs, ...), each naming its run, as they are committed.

Each run of the tree is read as `runner.service.events` reads one (positions per run, the
model call in flight's deltas too), through one `EventStream` a run that reads without
following; this stream finds the runs below as they start (a child is created by its
parent's write, which wakes the follow) and registers each with the store's watcher. It
waits for a wake of any of them without a statement: it looks at their registrations' wake
counts (in memory) every WAIT_SLICE_SECONDS. A store without a watcher is polled.

A follow ends once every run of the tree has finished and every entry was given; with
`until_waiting`, also once the tree can go no further without a person: no run of it queued
or running, and one waits for an approval or a reply. A run waiting for its children only
waits for runs of the tree, not for a person.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Generic

from runner.core.deltas import Delta
from runner.core.status import RunStatus
from runner.service.events import (
    EVENT_POLL_SECONDS,
    DeltaEvent,
    E,
    Event,
    EventStream,
    waits_for_a_person,
)
from runner.service.runner_base import RunnerBase
from runner.store.follow import Follow
from runner.store.protocol import RunStore
from runner.store.rows import RunRow

# The most runs of one tree a follow reads.
TREE_LIMIT = 10_000
# How often an idle follow of a tree looks at its registrations' wake counts (no statement).
WAIT_SLICE_SECONDS = 0.05
# A follow that heard nothing looks again after this long anyway: a run that joined the tree
# as it ended could finish before its follow mark reached the database (no NOTIFY then), and a
# whole-suite run once saw a tree follow wait on past its tree's end.
SAFETY_LOOK_SECONDS = 5.0


class TreeStream(Generic[E]):
    """The events of run `run_id` and of every run below it, in commit order within each
    run (`Event.run_id` names it); iterate with `for` or `async for` (once). `position` is
    the last position handed out of `run_id`'s own journal."""

    def __init__(
        self,
        store: RunStore,
        run: RunRow,
        *,
        after: int,
        follow: bool,
        until_waiting: bool,
        poll_seconds: float,
        deltas: bool = False,
    ) -> None:
        self.store = store
        self.run_id = run.id
        self.root_id = run.root_id or run.id
        self.follow = follow
        self.until_waiting = until_waiting
        self.poll_seconds = poll_seconds
        self.deltas = deltas
        self._after = after  # for `run_id` alone: the runs below are read from their start
        self._streams: dict[str, EventStream[E]] = {}
        self._follows: list[Follow] = []
        self._polled = False  # a run the watcher could not take: the whole tree is polled
        self._closed = threading.Event()

    @property
    def position(self) -> int:
        own = self._streams.get(self.run_id)
        return self._after if own is None else own.position

    def close(self) -> None:
        """Stop following: the iteration ends at its next look."""
        self._closed.set()
        for follow in self._follows:
            follow.wake()

    def _members(self) -> list[RunRow]:
        """`run_id` and the runs below it, parents before their children."""
        below = {self.run_id}
        found = []
        for row in self.store.tree_runs(self.root_id, TREE_LIMIT):  # oldest first
            if row.id == self.run_id or row.parent_id in below:
                below.add(row.id)
                found.append(row)
        return found

    def _join(self, rows: list[RunRow]) -> None:
        """Start reading the runs not read yet (registered first, then read: a write that
        comes between wakes the follow)."""
        for row in rows:
            if row.id in self._streams:
                continue
            if self.follow and not self._polled:
                follow = self.store.follow(row.id, self.poll_seconds)
                if follow is None:
                    self._polled = True
                else:
                    self._follows.append(follow)
            after = self._after if row.id == self.run_id else -1
            stream: EventStream[E] = EventStream(
                self.store, row.id, after=after, follow=False, until_waiting=False,
                poll_seconds=self.poll_seconds, deltas=self.deltas,
            )  # fmt: skip
            self._streams[row.id] = stream

    def _read(self) -> list[tuple[EventStream[E], Delta | Event]]:
        items: list[tuple[EventStream[E], Delta | Event]] = []
        for stream in list(self._streams.values()):
            got, _ = stream._look()  # a stream that does not follow: a read, no more
            items += [(stream, item) for item in got]
        return items

    def _look(self) -> tuple[list[tuple[EventStream[E], Delta | Event]], bool]:
        rows = self._members()
        self._join(rows)
        items = self._read()
        if items or self._closed.is_set():
            return items, self._closed.is_set()
        if not self.follow:
            return items, True
        # Nothing new: has the tree stopped? The statuses were read before the journals, so
        # an entry committed before a run finished has been read; a run started since is
        # read on the next look.
        if self._stopped(rows):
            self._join(self._members())
            items = self._read()
            return items, not items
        return items, False

    def _stopped(self, rows: list[RunRow]) -> bool:
        if all(row.status is RunStatus.FINISHED for row in rows):
            return True
        if not self.until_waiting:
            return False
        moving = any(row.status in (RunStatus.QUEUED, RunStatus.RUNNING) for row in rows)
        return not moving and any(waits_for_a_person(self.store, row) for row in rows)

    def _given(self, stream: EventStream[E], item: Delta | Event) -> E | None:
        return stream._given(item)

    def _seen(self) -> list[int]:
        return [follow.seen() for follow in self._follows]

    def _woken(self, seen: list[int]) -> bool:
        return self._closed.is_set() or any(
            follow.seen() != count for follow, count in zip(self._follows, seen, strict=False)
        )

    def _wait(self, seen: list[int]) -> None:
        if self._polled or not self._follows:
            self._closed.wait(self.poll_seconds)
            return
        give_up = time.monotonic() + SAFETY_LOOK_SECONDS
        while not self._woken(seen) and time.monotonic() < give_up:
            self._follows[0].wait(seen[0], WAIT_SLICE_SECONDS)

    def _unfollow(self) -> None:
        for follow in self._follows:
            follow.close()
        self._follows.clear()

    def __iter__(self) -> Iterator[E]:
        try:
            while True:
                seen = self._seen()
                items, ended = self._look()
                for stream, item in items:
                    given = self._given(stream, item)
                    if given is not None:
                        yield given
                if ended:
                    return
                if not items and len(seen) == len(self._follows):  # else: a run joined
                    self._wait(seen)
        finally:
            self._unfollow()

    async def __aiter__(self) -> AsyncIterator[E]:
        try:
            while True:
                seen = self._seen()
                items, ended = await asyncio.to_thread(self._look)
                for stream, item in items:
                    given = self._given(stream, item)
                    if given is not None:
                        yield given
                if ended:
                    return
                if items or len(seen) != len(self._follows):  # a run joined: look again
                    continue
                if self._polled or not self._follows:
                    await asyncio.sleep(self.poll_seconds)
                    continue
                give_up = time.monotonic() + SAFETY_LOOK_SECONDS
                # No thread held while the tree is idle.
                while not self._woken(seen) and time.monotonic() < give_up:
                    await asyncio.sleep(WAIT_SLICE_SECONDS)
        finally:
            self._unfollow()


class FollowingTrees(RunnerBase):
    """The `Runner`'s part that follows a run with every run below it."""

    def tree_events(
        self,
        run_id: str,
        *,
        after: int = -1,
        follow: bool = False,
        until_waiting: bool = False,
        poll_seconds: float = EVENT_POLL_SECONDS,
        deltas: bool = False,
    ) -> TreeStream[Event | DeltaEvent]:
        """`events` of the run and of every run below it (its sub-agents' child runs,
        theirs, ...), each `Event` naming its run (`run_id`, and its position in that
        run's journal). `after` is a position of the run's own journal; the runs below are
        read from their first entry, each as it starts. A follow ends once every run of
        the tree has finished (`until_waiting`: also once none is queued or running and
        one waits for a person)."""
        run = self.store.find_run(run_id)
        return TreeStream[Event | DeltaEvent](
            self.store, run, after=after, follow=follow, until_waiting=until_waiting,
            poll_seconds=poll_seconds, deltas=deltas,
        )  # fmt: skip
