"""The options several commands share, and the DATE parameter type."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

import click

from runner.defaults import (
    DIRECT_URL_VARIABLE,
    LONGEST_SECONDS,
    READ_URL_VARIABLE,
    URL_VARIABLE,
)
from runner.service.delays import parse_duration, parse_time

F = TypeVar("F", bound=Callable[..., Any])


def db_option(fn: F) -> F:
    fn = click.option(
        "--direct-db",
        envvar=DIRECT_URL_VARIABLE,
        default=None,
        metavar="URL",
        expose_value=False,
        callback=_direct_db,
        help=(
            "When --db is a pooler (PgBouncer in transaction mode): the PostgreSQL "
            f"server itself, for LISTEN (default: ${DIRECT_URL_VARIABLE})."
        ),
    )(fn)
    return click.option(
        "--db",
        "url",
        envvar=URL_VARIABLE,
        default=None,
        metavar="URL",
        help=f"Database URL (default: ${URL_VARIABLE}, else sqlite:///runner.db).",
    )(fn)


def read_db_option(fn: F) -> F:
    return click.option(
        "--read-db",
        "read_url",
        envvar=READ_URL_VARIABLE,
        default=None,
        metavar="URL",
        help=(
            "A streaming replica of --db to read history from; its lag is shown "
            f"(default: ${READ_URL_VARIABLE})."
        ),
    )(fn)


def _direct_db(_ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    # Every engine this process opens reads it from the environment (runner.sql.database),
    # so the library, the worker and the page need no parameter of their own for it.
    if value:
        os.environ[DIRECT_URL_VARIABLE] = value


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON.")(fn)


# A bound --help shows ([x>=0]); one this large is what a column or a clock holds (2**63-1
# steps, 2**31-1 of priority, 10**9 seconds), said when a value passes it, never in every
# help as `[0<=x<=9223372036854775807]`.
_SHOWN_BELOW = 10**9


class _ReadableRange(click.types._NumberRangeBase):  # type: ignore[type-arg]
    """A range whose help names only the bounds a person needs (a value past a large bound
    is refused naming the whole range)."""

    _converting = False  # while a value is checked: its refusal names every bound

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        self._converting = True
        try:
            return super().convert(value, param, ctx)
        finally:
            self._converting = False

    def _describe_range(self) -> str:
        if self._converting:
            return str(super()._describe_range())
        low = self.min if self.min is not None and abs(self.min) < _SHOWN_BELOW else None
        high = self.max if self.max is not None and abs(self.max) < _SHOWN_BELOW else None
        if low is None and high is None:
            return ""
        if low is None:
            return f"x{'<' if self.max_open else '<='}{high}"
        if high is None:
            return f"x{'>' if self.min_open else '>='}{low}"
        lop, rop = ("<" if self.min_open else "<="), ("<" if self.max_open else "<=")
        return f"{low}{lop}x{rop}{high}"


class Whole(_ReadableRange, click.IntRange):
    """A whole number within bounds; --help shows the ones a person needs."""


class Bounded(_ReadableRange, click.FloatRange):
    """A float flag that is finite and at most `most`: `1e309` (infinity) or `1e300` seconds
    is refused in one line here, not by the database or a deadline's overflow later."""

    def __init__(self, *, most: float, min_open: bool = False) -> None:
        super().__init__(min=0, max=most, min_open=min_open)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if number is not None and not math.isfinite(number):
            self.fail(f"{value} is not a finite number", param, ctx)
        return number


def budget_options(fn: F) -> F:
    whole = Whole(min=0, max=2**63 - 1)  # what a counter column holds
    seconds = Bounded(most=LONGEST_SECONDS)
    amount = Bounded(most=sys.float_info.max)
    for flag, kind, text in reversed(
        [
            ("--max-steps", whole, "Most steps (model calls) the run may take."),
            ("--max-tokens", whole, "Most tokens the run may spend."),
            ("--max-consecutive-errors", whole, "Most failed steps in a row."),
            ("--max-repeats", whole, "Most times one identical tool call may be made."),
            ("--max-seconds", seconds, "Active-time budget of the run (waiting not counted)."),
            ("--max-cost", amount, "Most cost the run may spend."),
            (
                "--approval-timeout",
                Bounded(most=LONGEST_SECONDS, min_open=True),
                "Seconds a call may wait for a person's answer before it is denied.",
            ),
        ]
    ):
        fn = click.option(flag, type=kind, default=None, help=text + " Default: the agent's.")(fn)
    return fn


def given(budgets: dict[str, Any]) -> dict[str, Any]:
    """The budget flags the user set: the others keep the agent's own budgets."""
    return {name: value for name, value in budgets.items() if value is not None}


class RunId(click.ParamType):  # type: ignore[type-arg]
    """A run id or a unique prefix of one: never empty, since every id starts with ""."""

    name = "ID"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not str(value).strip():
            self.fail("a run id (or a prefix of one) cannot be empty", param, ctx)
        return str(value)


RUN_ID = RunId()


class Moment(click.ParamType):  # type: ignore[type-arg]
    """A date, a UTC time, or an age such as 7d (see runner.history.parse_moment)."""

    name = "DATE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, datetime):
            return value
        # Imported here: the history loads SQLAlchemy, which `runner --help` does without.
        from runner.history import parse_moment

        try:
            return parse_moment(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


MOMENT = Moment()


class StartTime(click.ParamType):  # type: ignore[type-arg]
    """`--at`: an ISO 8601 time, UTC unless it says otherwise (see runner.delays)."""

    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, datetime):
            return value
        try:
            return parse_time(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class Duration(click.ParamType):  # type: ignore[type-arg]
    """`--in`: 30s, 10m, 2h or 1d (see runner.delays)."""

    name = "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, timedelta):
            return value
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


START_TIME = StartTime()
DURATION = Duration()


def placement_options(fn: F) -> F:
    """--queue, --priority, --at and --in: where a submitted run waits, and from when."""
    for option in reversed(
        [
            click.option(
                "--queue",
                default=None,
                metavar="NAME",
                help="The queue workers claim the run from (default: default).",
            ),
            click.option(
                "--priority",
                type=Whole(-(2**31), 2**31 - 1),
                default=None,
                help="Higher is claimed first within its queue (default 0).",
            ),
            click.option(
                "--at",
                "start_at",
                type=START_TIME,
                default=None,
                help="Start no earlier than this ISO 8601 time (UTC unless it has an offset).",
            ),
            click.option(
                "--in",
                "start_in",
                type=DURATION,
                default=None,
                help="Start no earlier than this long from now: 30s, 10m, 2h, 1d.",
            ),
        ]
    ):
        fn = option(fn)
    return fn
