"""The journal's writes: one fenced statement per entry, one transaction per write.

The write path is the floor: a journal write is one INSERT that succeeds only while the
run's lease epoch is this worker's (the statement itself is each backend's: on PostgreSQL a
data-modifying CTE that also renews the lease and takes the run's row lock), committed in
one transaction, with the run's stop in the same transaction when the entry ends the run,
or its move to `waiting` when the entry is a call waiting for a person. The calls of a step
of several are one fenced INSERT of all their rows.

The statements run on the driver's own cursor (`runner.driver`), their rows built and
converted before the transaction begins. On PostgreSQL a write of one statement (an entry
or a step's calls, with no wait) is its own transaction, in autocommit; a run's last write
is one such statement too, the run ended in its CTE (`fenced_insert_finishing`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import (
    Connection,
    Engine,
    Update,
    bindparam,
    null,
    select,
    update,
)
from sqlalchemy.engine import Dialect

from runner.core.clock import SYSTEM, Clock, utc_now
from runner.core.counters import Counters
from runner.core.journal import Entry, Stop
from runner.core.status import RunStatus
from runner.core.stop_reasons import StopReason
from runner.core.tree import Ancestor, Spend
from runner.errors import LeaseLost
from runner.sql import children, driver, json_batches, tree_budget
from runner.sql import parking as parking_sql
from runner.sql.backend import backend_for
from runner.sql.driver import Parameters, Prepared, prepared
from runner.sql.fenced_inserts import (
    FINISHED,
    NOTHING_HEARD,
    Heard,
    fence_values,
    fenced_insert,
    fenced_insert_finishing,
    fenced_insert_reserving,
    fenced_insert_settling,
    insert_values,
    positional_insert,
    quiet_insert,
)
from runner.sql.limits import waiter_grace_from
from runner.sql.payloads import payloads_of
from runner.sql.schema import entries, runs
from runner.store.payloads import PLAIN, Payloads
from runner.store.rows import (
    ENTRY_COLUMNS,
    amount,
    counter,
    entry_row,
    entry_values,
    plain_text,
    sealed,
)


class Ride(Protocol):
    """A run's limit writes riding in a journal write (runner.sql.limit_rides.Ride)."""

    in_insert: bool  # it goes in the fenced insert's statement (set by Append.of)

    def one_settle(self) -> tuple[str, str, int, bool] | None: ...

    def one_reserve(self, at: datetime) -> dict[str, Any] | None: ...

    def returned(self, found: Sequence[Any]) -> None: ...

    def run(self, write: driver.Statements) -> None: ...


# The most entries one statement writes: a model asking for hundreds of calls at once must
# not reach the drivers' limits on bound values (SQLite's is 32,766), and few statements
# are ever rendered.
ROWS_PER_STATEMENT = 64

# A parked run's row also holds its counters as of the park: what the runs below it check
# its budgets against (its own spend; `below_*` is theirs).
_PARKED = ("status", "waiting_since", "wait_expires_at", "updated_at", "steps", "tokens", "cost")


def _riding(
    dialect: Dialect,
    rows: int,
    ride: Ride,
    values: dict[str, Any],
    statement: Prepared,
    at: datetime,
    run_id: str,
    epoch: int,
) -> Prepared:
    """The fenced insert of `rows` entries with `ride` in its statement, where the backend
    takes it there (`values` given its binds; the ride told so, `in_insert`), else
    `statement` (the ride's own statements follow it in the write's transaction)."""
    backend = backend_for(dialect.name)
    ride.in_insert = False  # decided anew at every try of the write
    settle = ride.one_settle() if backend.settles_in_insert else None
    if settle is not None:
        name, reservation, used, checked = settle
        ride.in_insert = True
        values.update(ride_reservation=reservation, ride_used=used, ride_at=at)
        values.update(ride_limit=name, ride_run=run_id, ride_epoch=epoch)
        if checked:
            values.update(ride_graced=waiter_grace_from(at))
        return fenced_insert_settling(dialect, rows, checked)
    reserve = ride.one_reserve(at) if backend.reserves_in_insert else None
    if reserve is not None:
        ride.in_insert = True
        values.update(reserve)
        return fenced_insert_reserving(dialect, rows)
    return statement


def _fenced_update(columns: tuple[str, ...]) -> Update:
    """UPDATE the run's `columns` (bound as `set_<column>`) while its epoch is this
    worker's, letting its lease go."""
    values: dict[Any, Any] = {
        runs.c[name]: bindparam(f"set_{name}", type_=runs.c[name].type) for name in columns
    }
    values.update({runs.c.lease_owner: null(), runs.c.lease_expires_at: null()})
    return (
        update(runs)
        .where(runs.c.id == bindparam("fence_run"), runs.c.lease_epoch == bindparam("fence_epoch"))
        .values(values)
    )


@dataclass(frozen=True)
class Parking:
    """A run leaving its worker to wait for a person: the lease goes, the epoch stays."""

    timeout: float | None  # approval_timeout: seconds until an unanswered wait is denied
    # The child runs its sub-agents' calls start, inserted in the same transaction (rows of
    # `children.child_row`); a step with one has no approval_timeout (a child's end is
    # delivered, never timed out).
    children: tuple[dict[str, Any], ...] = ()
    # The first child's task and its first model call's hold, written with the park.
    first: FirstCall | None = None


@dataclass
class FirstCall:
    """A child created claimed with its parent's park (the relay's), whose task entry and
    first model call's hold on the tree's budgets (runner.sql.tree_budget.hold_ahead) go
    in the park's commit rather than in one of the child's own: a commit fewer a sub-agent,
    and both still written before its model is asked. `held`, once written: whether the
    hold was made (else the child reserves as any call does)."""

    task: Entry
    epoch: int  # the child's, as created claimed
    hold: tree_budget.HoldAhead
    held: bool = False


@dataclass
class TreeCharge:
    """What a write of a child run charges to the runs above it (`above`, nearest first),
    and, once written, what each of them has spent against its budgets (`ancestors`)."""

    above: tuple[str, ...]
    spent: Spend
    ancestors: list[Ancestor] = field(default_factory=list)


def append_entry(
    bind: Engine | Connection,
    run_id: str,
    epoch: int,
    seq: int,
    entry: Entry,
    stop: Stop | None,
    lease_seconds: float,
    clock: Clock = SYSTEM,
    parking: Parking | None = None,
) -> Heard:
    """One transaction: the entry (fenced by the epoch), and the run's end if `stop`, or its
    move to `waiting` if `parking` (unless a cancel was requested: then the run finishes,
    `cancelled`, in the same transaction, since nobody would be left to honour it).

    Returns what the write heard of the run (its cancel flag, its undelivered messages).
    LeaseLost if fenced out.
    """
    return append_entries(
        bind, run_id, epoch, seq, (entry,), stop, lease_seconds, clock, parking=parking
    )


def append_entries(
    bind: Engine | Connection,
    run_id: str,
    epoch: int,
    seq: int,
    entries: Sequence[Entry],
    stop: Stop | None,
    lease_seconds: float,
    clock: Clock = SYSTEM,
    parking: Parking | None = None,
    charge: TreeCharge | None = None,
) -> Heard:
    """One transaction: the entries from `seq` on, in ONE fenced statement (all or none
    are written), and the run's end if `stop` (or its move to `waiting`, see append_entry).
    With `charge`, what the entries spent is charged to the runs above (children.py).

    Returns what the write heard of the run (see append_entry). LeaseLost if fenced out.
    """
    append = Append.of(
        bind.dialect,
        run_id,
        epoch,
        seq,
        entries,
        stop,
        lease_seconds,
        clock,
        parking,
        charge,
        payloads_of(bind),
    )
    # No connection of its own: one from the pool, for this write alone.
    connection = bind if isinstance(bind, Connection) else bind.connect()
    try:
        with driver.Write(connection, one_statement=append.one_statement) as write:
            return append.run(write)
    finally:
        if connection is not bind:
            connection.close()


@dataclass(slots=True, eq=False)
class Append:
    """One journal write, its statements and their parameters built and converted before any
    transaction begins: the write lock (SQLite's whole file, PostgreSQL's run row) is held
    for the statements alone. `run` may be tried again in a new transaction (a group commit
    whose transaction another run's write failed: runner.sql.group_commit).

    Not changed once made (but for `statements`), though not frozen: a frozen dataclass of
    this many fields sets each through `object.__setattr__`, 2 us a write, twice a step."""

    run_id: str
    inserts: tuple[tuple[str, Parameters], ...]
    finish: tuple[str, Parameters] | None  # the run's end, if the write ends it
    cancelled: tuple[str, Parameters] | None  # a parked run's end, if a cancel was asked
    park: tuple[str, Parameters] | None  # the run's move to `waiting`
    children: tuple[tuple[str, Parameters], ...]  # the child runs created with the park
    charge: TreeCharge | None  # a child's spend charged up its tree
    charge_statement: tuple[str, Parameters] | None
    # A write of entries alone, or a run's last write (no park, no charge, no ride), on a
    # backend that can write several runs' entries in one statement: the rows' values
    # (ENTRY_COLUMNS order), for `write_together`; and the fence they are written under.
    together: tuple[tuple[Any, ...], ...] | None = None
    fence: dict[str, Any] = field(default_factory=dict)
    # A run's last write (`together`): the run's end, its `FINISHED` values (`set_<column>`),
    # which the shared statement sets on its row as `inserts` would.
    end: dict[str, Any] | None = None
    # The run's limit writes riding in this one (runner.sql.limit_rides.Ride), if any.
    ride: Ride | None = None
    # A write that may share a statement (`together`): its own statement, made only if it
    # is written alone after all (`statements`), which most such writes never are. Each
    # row's values were converted twice, once here in case and once in the shared batch.
    later: _Later | None = field(default=None, repr=False, compare=False)
    # A park's first child's task entry (its fenced insert) and hold (`FirstCall`).
    first: FirstCall | None = None
    first_task: tuple[str, Parameters] | None = None
    dialect: Dialect | None = None
    at: datetime | None = None
    # The first insert's quiet twin (`Backend.fenced_insert_quiet`: the same values, nothing
    # read back), tried first where the backend has one.
    quiet: tuple[str, int, int] | None = None  # its SQL, the rows it writes, its values

    def statements(self) -> tuple[tuple[str, Parameters], ...]:
        """The write's own statements (`inserts`, made now if they were left for later)."""
        if self.later is not None:
            self.inserts, self.later = self.later(), None
        return self.inserts

    @classmethod
    def of(
        cls,
        dialect: Dialect,
        run_id: str,
        epoch: int,
        seq: int,
        entries: Sequence[Entry],
        stop: Stop | None,
        lease_seconds: float,
        clock: Clock = SYSTEM,
        parking: Parking | None = None,
        charge: TreeCharge | None = None,
        payloads: Payloads = PLAIN,
        written_at: datetime | None = None,
        ride: Ride | None = None,
        now: datetime | None = None,
    ) -> Append:
        """`written_at`: the entries' `created_at` (default now), the same in every try of
        one write, so that a retry lands in the month partition of its first try and is
        refused as a duplicate there if that try did commit (revision 0022). `now`: the
        clock's time, if the caller has just read it (a first try's `written_at`)."""
        at = utc_now(clock) if now is None else now
        stamp = at if written_at is None else written_at
        backend = backend_for(dialect.name)
        fence = fence_values(backend, run_id, epoch, at, lease_seconds)
        counters = entries[-1].counters
        charging = charge is not None and bool(charge.spent and charge.above)
        # A run's last write, where its end can go in the insert's statement: one statement
        # (PostgreSQL: one round trip in autocommit, not BEGIN, INSERT, UPDATE and COMMIT); a
        # child's, a statement fewer in the transaction that charges its tree.
        finishing = (
            stop is not None
            and parking is None
            and ride is None
            and len(entries) <= ROWS_PER_STATEMENT
            and backend.finishes_in_insert
        )
        one = len(entries) == 1 and not finishing
        positional = positional_insert(dialect) if one else None
        shares = backend.writes_runs_together
        inserts: list[tuple[str, Parameters]] = []
        together: tuple[tuple[Any, ...], ...] | None = None
        end: dict[str, Any] | None = None
        later: _Later | None = None
        quiet: tuple[str, int, int] | None = None
        if positional is not None:  # the common case on SQLite: one entry, no dict on the way
            row = entry_values(run_id, seq, epoch, entries[0], stamp, payloads)
            inserts = [(positional.sql, positional.parameters(row, fence))]
            quiet = None if positional.quiet is None else (*positional.quiet, 1)
        elif finishing:
            assert stop is not None
            statement = fenced_insert_finishing(dialect, len(entries))
            rows = tuple(
                entry_values(run_id, seq + i, epoch, entry, stamp, payloads)
                for i, entry in enumerate(entries)
            )
            end = _finish_values(stop, counters, at, payloads)
            fenced = {"fence_run": run_id, "fence_epoch": epoch}
            later = _insert_later(statement, rows, fenced, end)
            if shares and not charging:
                together = rows  # its end goes in the shared statement too (write_together)
            else:
                inserts, later = list(later()), None
        elif len(entries) <= ROWS_PER_STATEMENT:  # one statement
            statement = fenced_insert(dialect, len(entries))
            rows = tuple(
                entry_values(run_id, seq + i, epoch, entry, stamp, payloads)
                for i, entry in enumerate(entries)
            )
            alone = stop is not None or parking is not None or ride is not None
            if not alone and not charging and shares:
                together = rows  # may share a statement with other runs' (write_together)
                later = _insert_later(statement, rows, fence)
            values = insert_values(rows, fence) if later is None else {}
            plain = statement
            if ride is not None:
                statement = _riding(
                    dialect, len(entries), ride, values, statement, at, run_id, epoch
                )
            if later is None:
                inserts = [(statement.sql, statement.parameters(values))]
                twin = quiet_insert(dialect, len(entries)) if statement is plain else None
                quiet = None if twin is None else (*twin, len(entries))
        else:
            inserts = []
            for start in range(0, len(entries), ROWS_PER_STATEMENT):
                chunk = entries[start : start + ROWS_PER_STATEMENT]
                statement = fenced_insert(dialect, len(chunk))
                rows = tuple(
                    entry_values(run_id, seq + start + i, epoch, entry, stamp, payloads)
                    for i, entry in enumerate(chunk)
                )
                values = insert_values(rows, fence)
                inserts.append((statement.sql, statement.parameters(values)))
        finish = cancelled = park = first_task = None
        made: list[tuple[str, Parameters]] = []
        if stop is not None and not finishing:
            finish = _finish_parameters(dialect, stop, counters, fence, at, payloads)
        elif parking is not None:
            stopped = Stop(StopReason.CANCELLED)
            cancelled = _finish_parameters(dialect, stopped, counters, fence, at, payloads)
            park = _park_parameters(dialect, parking, fence, at, counters)
            made = []
            first = parking.first
            if first is not None and parking_sql.one_statement(dialect, parking.children):
                # The park, the child and its task in one statement (runner.sql.parking).
                task = entry_row(first.hold.run_id, 0, first.epoch, first.task, stamp, payloads)
                values = _park_values(parking, fence, at, counters)
                park = parking_sql.park_with_child(
                    dialect, _parked_update, values, parking.children[0], task
                )
                first = None  # its task is in the park: only its hold follows
            else:
                for new in parking.children:
                    child = children.insert_child(dialect, children.is_claimed(new))
                    made.append((child.sql, child.parameters(children.child_values(new))))
            if first is not None:
                child_id = first.hold.run_id
                row = entry_values(child_id, 0, first.epoch, first.task, stamp, payloads)
                child_fence = fence_values(backend, child_id, first.epoch, at, lease_seconds)
                statement = fenced_insert(dialect, 1)
                first_task = (
                    statement.sql,
                    statement.parameters(insert_values((row,), child_fence)),
                )
        charged = None
        if not charging:
            charge = None
        if charge is not None:
            statement = children.charge_statement(dialect, len(charge.above))
            values = children.charge_values(charge.above, charge.spent)
            charged = (statement.sql, statement.parameters(values))
        return cls(
            run_id,
            tuple(inserts),
            finish,
            cancelled,
            park,
            tuple(made),
            charge,
            charged,
            together,
            fence,
            end,
            ride,
            later,
            None if parking is None else parking.first,
            first_task,
            dialect,
            at,
            quiet,
        )

    @property
    def one_statement(self) -> bool:
        return (
            (self.later is not None or len(self.inserts) == 1)
            and self.finish is None
            and self.park is None
            and self.charge is None
            and (self.ride is None or self.ride.in_insert)
        )

    def run(self, write: driver.Statements) -> Heard:
        """The write's statements in `write`'s transaction; what it heard of the run."""
        run_id = self.run_id
        heard = NOTHING_HEARD
        if self.first is not None:
            self.first.held = False  # until this try makes it (a try again may not)
        quiet = self.quiet
        for sql, parameters in self.statements():
            if quiet is not None:
                # Every row written and nothing heard, or none written: then the loud one,
                # in the same transaction, writes them and says what was heard (or fences).
                (quiet_sql, width, rows), quiet = quiet, None
                assert isinstance(parameters, tuple)  # positional: `quiet_insert`
                if write.count(quiet_sql, parameters[:width]) == rows:
                    continue
            written = write.rows(sql, parameters)
            # The fence holds for every row or for none: the first returned row says which.
            if not written:
                raise LeaseLost(f"run {run_id} was taken over by another worker: not writing")
            heard = Heard(bool(written[0][1]), written[0][2])
            if self.ride is not None and self.ride.in_insert:
                self.ride.returned(written[0][3:])
        if self.ride is not None and not self.ride.in_insert:
            self.ride.run(write)
        if self.charge is not None and self.charge_statement is not None:
            returned = write.rows(*self.charge_statement)
            self.charge.ancestors = children.charged(returned, self.charge.above)
        if self.finish is not None:
            _finish(write, run_id, self.finish)
        elif self.cancelled is not None and heard.cancel:
            _finish(write, run_id, self.cancelled)
        elif self.park is not None:
            if write.count(*self.park) != 1:
                raise LeaseLost(f"run {run_id} was taken over by another worker: not parking it")
            for sql, parameters in self.children:
                write.execute(sql, parameters)
            self._first_call(write)
        return heard

    def _first_call(self, write: driver.Statements) -> None:
        """The first child's task and its first call's hold, after the child's row."""
        first, task = self.first, self.first_task
        if first is None:
            return
        assert self.dialect is not None and self.at is not None
        # Its row was inserted above, claimed under this epoch (its task too, where the park
        # made both: runner.sql.parking).
        if task is not None and not write.rows(*task):
            raise LeaseLost(f"run {first.hold.run_id} was not created claimed: not writing")
        first.held = tree_budget.hold_ahead(write, self.dialect, first.hold, self.at)


_Later = Callable[[], tuple[tuple[str, Parameters], ...]]


def _insert_later(
    statement: Prepared,
    rows: tuple[tuple[Any, ...], ...],
    fence: dict[str, Any],
    more: dict[str, Any] | None = None,
) -> _Later:
    """The one fenced insert of `rows` (with `more` values: a run's end), made when called."""

    def made() -> tuple[tuple[str, Parameters], ...]:
        values = insert_values(rows, fence)
        if more is not None:
            values.update(more)
        return ((statement.sql, statement.parameters(values)),)

    return made


def write_together(write: driver.Write, appends: Sequence[Append]) -> list[Heard | None]:
    """The entries of several runs' writes (each `together`) in ONE statement, each run
    fenced by its own epoch, and the runs whose last write it is ended in it: what each
    write heard of its run, or None for a run fenced out (none of its rows went in, and it
    did not end).

    One statement is one transaction (autocommit, `driver.Write(one_statement=True)`): it
    commits every fenced run's rows or none. A statement error (one run's duplicate entry,
    a value refused) fails them all: the caller then writes each alone.
    """
    dialect = write.connection.dialect
    backend = backend_for(dialect.name)
    convert = json_batches.converter(dialect, write.dbapi_connection)
    end_convert = None
    batch: list[dict[str, Any]] = []
    ends: list[dict[str, Any]] = []
    for append in appends:
        assert append.together is not None
        fence = append.fence
        for row in append.together:
            values = convert(dict(zip(ENTRY_COLUMNS, row, strict=True)))
            values["fence_expiry"] = fence["fence_expiry"]
            values["fence_renew_after"] = fence["fence_renew_after"]
            batch.append(values)
        if append.end is not None:  # the run's last write: it ends in the statement too
            if end_convert is None:
                end_convert = json_batches.converter(
                    dialect, write.dbapi_connection, runs, FINISHED
                )
            ended = end_convert({name: append.end[f"set_{name}"] for name in FINISHED})
            ended["run_id"] = append.run_id
            ends.append(ended)
    sql = backend.fenced_insert_runs(FINISHED if ends else ())
    assert sql is not None
    parameters = {"batch": json_batches.text(batch)}
    if ends:
        parameters["ends"] = json_batches.text(ends)
    returned = write.rows(sql, parameters)
    heard = {row[0]: Heard(bool(row[2]), row[3]) for row in returned}
    return [heard.get(append.run_id) for append in appends]


def entry_written(connection: Connection, run_id: str, seq: int, epoch: int) -> Heard | None:
    """After a write whose answer was lost: what it would have heard if entry `seq` is
    there, written under `epoch`, else None."""
    with connection.begin():
        row = connection.execute(
            select(entries.c.lease_epoch, runs.c.cancel_requested, runs.c.undelivered_messages)
            .join(runs, runs.c.id == entries.c.run_id)
            .where(entries.c.run_id == run_id, entries.c.seq == seq)
        ).first()
    if row is None or row.lease_epoch != epoch:
        return None
    return Heard(bool(row.cancel_requested), row.undelivered_messages)


def finish_run(
    bind: Engine | Connection,
    run_id: str,
    epoch: int,
    stop: Stop,
    counters: Counters,
    clock: Clock = SYSTEM,
) -> None:
    at = utc_now(clock)
    fence = {"fence_run": run_id, "fence_epoch": epoch}
    finish = _finish_parameters(bind.dialect, stop, counters, fence, at, payloads_of(bind))
    with _connected(bind) as connection, driver.Write(connection, one_statement=True) as write:
        _finish(write, run_id, finish)


@contextmanager
def _connected(bind: Engine | Connection) -> Iterator[Connection]:
    """`bind` itself if it is a connection (a journal passes its own), else one from its pool."""
    if isinstance(bind, Connection):
        yield bind
    else:
        with bind.connect() as connection:
            yield connection


def _parked_update() -> Update:
    return _fenced_update(_PARKED)


def _park_parameters(
    dialect: Dialect, parking: Parking, fence: dict[str, Any], at: datetime, counters: Counters
) -> tuple[str, Parameters]:
    statement = prepared(dialect, "park", _parked_update)
    return statement.sql, statement.parameters(_park_values(parking, fence, at, counters))


def _park_values(
    parking: Parking, fence: dict[str, Any], at: datetime, counters: Counters
) -> dict[str, Any]:
    """The park's values (`_fenced_update(_PARKED)`'s binds)."""
    timeout = None if parking.children else parking.timeout
    expires = None if timeout is None else at + timedelta(seconds=timeout)
    return {
        **fence,
        "set_status": str(RunStatus.WAITING),
        "set_waiting_since": at,
        "set_wait_expires_at": expires,
        "set_updated_at": at,
        "set_steps": counter(counters.steps),
        "set_tokens": counter(counters.tokens),
        "set_cost": amount(counters.cost),
    }


def _finish_parameters(
    dialect: Dialect,
    stop: Stop,
    counters: Counters,
    fence: dict[str, Any],
    at: datetime,
    payloads: Payloads,
) -> tuple[str, Parameters]:
    statement = prepared(dialect, "finish", lambda: _fenced_update(FINISHED))
    values = {**fence, **_finish_values(stop, counters, at, payloads)}
    return statement.sql, statement.parameters(values)


def _finish_values(
    stop: Stop, counters: Counters, at: datetime, payloads: Payloads
) -> dict[str, Any]:
    """The run's end: its `FINISHED` columns' values, bound as `set_<column>`."""
    output, fmt = sealed(stop.output, payloads)
    return {
        "set_status": str(RunStatus.FINISHED),
        "set_stop_reason": str(stop.reason),
        "set_output": output,
        "set_output_format": fmt,
        "set_error": plain_text(stop.error),
        "set_wrapped_up": stop.wrapped_up,
        "set_steps": counter(counters.steps),
        "set_tokens": counter(counters.tokens),
        "set_cost": amount(counters.cost),
        "set_updated_at": at,
        "set_finished_at": at,
    }


def _finish(write: driver.Statements, run_id: str, finish: tuple[str, Parameters]) -> None:
    if write.count(*finish) != 1:
        raise LeaseLost(f"run {run_id} was taken over by another worker: not finishing it")
