"""The in-memory store's provider limits: the rows of `limits`, `limit_reservations` and
`limit_waiters` kept in dictionaries, reserved from by the SQL store's rule
(runner.store.rules.Room: the same fit, the same line, the same wake-up time)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta

from runner.core.limits import COUNTED_SECONDS, Estimate, Reservation, counted_from, estimated
from runner.core.status import RunStatus
from runner.errors import LeaseLost, LimitNotFound, RunParked
from runner.store.rows import COUNTER_MAX, LimitInfo
from runner.store.rules import (
    WAITER_GRACE_SECONDS,
    Charge,
    Charged,
    Room,
    Waiter,
    check_limit_name,
    limit_values,
    woken,
)
from runner.testing.memory_rows import MemoryRows, Row


class MemoryLimits(MemoryRows):
    """The in-memory store's part that keeps provider limits."""

    def set_limit(
        self,
        name: str,
        *,
        tokens_per_minute: int | None,
        requests_per_minute: int | None,
        concurrency: int | None = None,
    ) -> None:
        check_limit_name(name)
        values = limit_values(tokens_per_minute, requests_per_minute, concurrency)
        with self._lock:
            row = self.provider_limits.setdefault(name, {"name": name, "backoff_until": None})
            row.update(values, updated_at=self._now())

    def remove_limit(self, name: str) -> None:
        check_limit_name(name)
        with self._lock:
            if self.provider_limits.pop(name, None) is None:
                raise LimitNotFound(f"no limit named {name}")
            for key in [k for k, r in self.reservations.items() if r["limit_name"] == name]:
                del self.reservations[key]
            for pair in [pair for pair in self.limit_waiters if pair[0] == name]:
                del self.limit_waiters[pair]

    def list_limits(self, now: datetime) -> list[LimitInfo]:
        with self._lock:
            found = []
            for name in sorted(self.provider_limits):
                row = self.provider_limits[name]
                charged = Charged.of(self._charges(name, now))
                backoff = row["backoff_until"]
                found.append(
                    LimitInfo(
                        name=name,
                        tokens_per_minute=row["tokens_per_minute"],
                        requests_per_minute=row["requests_per_minute"],
                        concurrency=row["concurrency"],
                        tokens=charged.tokens,
                        requests=charged.requests,
                        in_flight=charged.in_flight,
                        waiting=sum(
                            1
                            for (limit, run_id) in self.limit_waiters
                            if limit == name and self._waiter_live(run_id, now)
                        ),
                        backoff_until=backoff if backoff is not None and backoff > now else None,
                    )
                )
            return found

    def run_limits(self, run_id: str, epoch: int) -> MemoryRunLimits:
        return MemoryRunLimits(self, run_id, epoch)

    def first_parked(self, queues: Sequence[str] | None, by: datetime) -> datetime | None:
        with self._lock:
            wakes = [
                run["not_before"]
                for run in (self.runs.get(run_id) for _, run_id in self.limit_waiters)
                if run is not None
                and run["status"] == RunStatus.QUEUED
                and run["not_before"] is not None
                and run["not_before"] <= by
                and (queues is None or run["queue"] in queues)
            ]
        return min(wakes, default=None)

    # -- the rules, as runner.sql.limits reads them -------------------------------------------

    def _charges(self, name: str, at: datetime) -> list[Charge]:
        """The minute's charges, oldest first, then the calls in flight since before it
        (runner.sql.limits.charges: they hold a slot of the concurrency while their lease
        lives, whatever their age)."""
        since = at - timedelta(seconds=COUNTED_SECONDS)
        found, flying = [], []
        for row in self.reservations.values():
            if row["limit_name"] != name:
                continue
            start = counted_from(row["reserved_at"], row["settled"], row.get("settled_at"))
            live = self._lease_live(row["run_id"], row["lease_epoch"], at)
            if start > since:
                found.append(Charge(row["tokens"], start, not row["settled"] and live))
            elif not row["settled"] and live:  # in flight since before the minute
                flying.append(Charge(row["tokens"], start, True, counted=False))
        return sorted(found, key=lambda charge: charge.reserved_at) + flying

    def _lease_live(self, run_id: str, epoch: int, at: datetime) -> bool:
        run = self.runs.get(run_id)
        return (
            run is not None
            and run["lease_epoch"] == epoch
            and run["status"] == RunStatus.RUNNING
            and run["lease_expires_at"] is not None
            and run["lease_expires_at"] >= at
        )

    def _wake_line(self, name: str, limit: Row, at: datetime) -> None:
        """Queue now the runs of `name`'s line whose calls fit (runner.sql.limit_line)."""
        line = []
        for (limit_name, run_id), waiter in sorted(
            self.limit_waiters.items(), key=lambda item: (item[1]["since"], item[0][1])
        ):
            if limit_name != name or not self._waiter_live(run_id, at):
                continue
            run = self.runs[run_id]
            parked = run["status"] == RunStatus.QUEUED and (
                run["not_before"] is not None and run["not_before"] > at
            )
            line.append(Waiter(run_id, waiter["tokens"], parked))
        found = woken(limit, at, self._charges(name, at), line)
        for run_id in found:
            self.runs[run_id]["not_before"] = at
        if found:
            self._wake()

    def _waiter_live(self, run_id: str, at: datetime) -> bool:
        run = self.runs.get(run_id)
        if run is None:
            return False
        if run["status"] == RunStatus.RUNNING:
            return True
        wake = run["not_before"]
        grace = timedelta(seconds=WAITER_GRACE_SECONDS)
        return run["status"] == RunStatus.QUEUED and (wake is None or wake >= at - grace)


class MemoryRunLimits:
    """One run's reservations in the in-memory store (runner.core.limits.Limits)."""

    def __init__(self, store: MemoryLimits, run_id: str, epoch: int) -> None:
        self.store, self.run_id, self.epoch = store, run_id, epoch

    def reserve(self, limit: str, estimate: Estimate) -> Reservation:
        store = self.store
        with store._lock:
            row = store.provider_limits.get(limit)
            if row is None:
                return Reservation(limit, None, estimate if isinstance(estimate, int) else 0)
            tokens = min(max(estimated(estimate), 0), COUNTER_MAX)
            at = store._now()
            for pair in [p for p in store.limit_waiters if p[0] == limit]:
                if not store._waiter_live(pair[1], at):
                    del store.limit_waiters[pair]  # finished while parked, or never came back
            charged = store._charges(limit, at)
            mine = store.limit_waiters.get((limit, self.run_id))
            ahead = [
                waiter["tokens"]
                for (name, run_id), waiter in store.limit_waiters.items()
                if name == limit
                and run_id != self.run_id
                and store._waiter_live(run_id, at)
                and (mine is None or (waiter["since"], run_id) < (mine["since"], self.run_id))
            ]
            room = Room(row, at, charged, ahead, tokens)
            if room.fits():
                reservation_id = uuid.uuid4().hex
                store.reservations[reservation_id] = {
                    "limit_name": limit,
                    "run_id": self.run_id,
                    "lease_epoch": self.epoch,
                    "tokens": tokens,
                    "settled": False,
                    "reserved_at": at,
                }
                waited = 0.0
                if mine is not None:
                    del store.limit_waiters[(limit, self.run_id)]
                    waited = max((at - mine["since"]).total_seconds(), 0.0)
                return Reservation(limit, reservation_id, tokens, waited)
            until = room.wake_at()
            run: Row | None = store.runs.get(self.run_id)
            if (
                run is None
                or run["lease_epoch"] != self.epoch
                or run["status"] != RunStatus.RUNNING
            ):
                raise LeaseLost(f"run {self.run_id} was taken over by another worker")
            if mine is None:
                store.limit_waiters[(limit, self.run_id)] = {"tokens": tokens, "since": at}
            else:
                mine["tokens"] = tokens
            run.update(
                status=RunStatus.QUEUED,
                lease_owner=None,
                lease_expires_at=None,
                not_before=at if run["cancel_requested"] else until,  # as the SQL store
                updated_at=at,
            )
        raise RunParked(
            f"run {self.run_id} waits for limit {limit} until {until:%H:%M:%S.%f} UTC",
            run_id=self.run_id,
            limit=limit,
            until=until.timestamp(),
        )

    def settle(self, reservation: Reservation, tokens: int) -> None:
        if reservation.id is None:
            return
        store = self.store
        with store._lock:
            at = store._now()
            row = store.reservations.get(reservation.id)
            limit = store.provider_limits.get(reservation.limit)
            if row is None and limit is not None:
                # Gone (the SQL store's sweep; here, its limit removed and set again): the call
                # is written anew, settled, as the SQL store writes it (runner.sql.limits).
                row = store.reservations[reservation.id] = {
                    "limit_name": reservation.limit,
                    "run_id": self.run_id,
                    "lease_epoch": self.epoch,
                    "reserved_at": at,
                }
            if row is not None:
                row.update(tokens=min(max(tokens, 0), COUNTER_MAX), settled=True, settled_at=at)
            if limit is not None and limit["concurrency"] is not None:
                store._wake_line(reservation.limit, limit, at)

    def back_off(self, limit: str, seconds: float) -> None:
        with self.store._lock:
            row = self.store.provider_limits.get(limit)
            if row is None:
                return
            until = self.store._now() + timedelta(seconds=max(seconds, 0.0))
            if row["backoff_until"] is None or row["backoff_until"] < until:
                row["backoff_until"] = until
