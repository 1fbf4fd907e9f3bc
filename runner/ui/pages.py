"""The pages: what each one reads (through `runner.history`, on the read-only engine) and
which template shows it. The one write, cancel, goes through `Runner.cancel`, the call
behind `runner cancel`; approve and deny will be two more forms of the same shape."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from starlette.datastructures import URL
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from runner.core.status import RunStatus
from runner.core.stop_reasons import StopReason
from runner.core.tree import child_run_id
from runner.core.waiting import Wait
from runner.history import (
    Group,
    JournalEntry,
    filter_choices,
    journal_page,
    limit_use,
    run_standing,
    runs_page,
    scores_of_run,
    step_counters,
    stop_reason_stats,
)
from runner.ui.charts import counter_chart, stop_chart
from runner.ui.state import UiState

RUNS_PER_PAGE = 50
STEPS_PER_PAGE = 50

# Messages a redirect after a POST may show: chosen by key, never text from the request.
NOTICES = {
    "cancel-requested": "Cancel requested: the run stops before its next step.",
    "cancelled": "The run is cancelled.",
    "finished": "The run had already finished: nothing to cancel.",
    "answered": "Answered: the run is queued again (a worker takes it, or `runner resume`).",
}


def _state(request: Request) -> UiState:
    state: UiState = request.app.state.ui
    return state


def _choice(value: str | None, allowed: list[str]) -> str | None:
    return value if value in allowed else None


# -- the runs ---------------------------------------------------------------------------------


def runs(request: Request) -> Response:
    state = _state(request)
    q = request.query_params
    statuses = [s.value for s in RunStatus]
    reasons = [r.value for r in StopReason]
    chosen = {
        "status": _choice(q.get("status"), statuses),
        "stop_reason": _choice(q.get("stop_reason"), reasons),
        "agent_name": q.get("agent") or None,
        "release": q.get("release") or None,
    }
    page = runs_page(state.reader, before=q.get("before") or None, limit=RUNS_PER_PAGE, **chosen)
    agent_names, releases = filter_choices(state.reader)
    older = None
    if page.older is not None:
        older = str(request.url.include_query_params(before=page.older))
    newest = str(request.url.remove_query_params("before")) if q.get("before") else None
    # What each waiting run waits for: a read per waiting run shown (a page holds 50 at most).
    waits = {
        run.id: wait
        for run in page.runs
        if run.status == RunStatus.WAITING and (wait := state.waiting_for(run.id)) is not None
    }
    return state.render(
        request,
        "runs.html",
        runs=page.runs,
        waits=waits,
        chosen=chosen,
        statuses=statuses,
        reasons=reasons,
        agent_names=agent_names,
        releases=releases,
        older=older,
        newest=newest,
    )


# -- one run ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepView:
    """One step of the transcript as the page shows it."""

    step: int
    entries: list[JournalEntry]
    tokens: int
    cost: float
    error_streak: int


def run(request: Request) -> Response:
    state = _state(request)
    # Its state and its lease judged at the database's clock, as `runner show` judges them.
    standing = run_standing(state.reader, request.path_params["run_id"])
    row = standing.row
    counters = step_counters(state.reader, row.id)
    last_step = counters[-1].step if counters else 0
    first = _page_start(request.query_params.get("from"), last_step)
    start = 0 if first == 1 else first  # the first page begins with the task (step 0)
    page = journal_page(
        state.reader, row.id, first_step=start, steps=first + STEPS_PER_PAGE - start
    )
    steps: dict[int, list[JournalEntry]] = {}
    for item in page.entries:
        steps.setdefault(item.entry.step, []).append(item)
    shown = [
        StepView(
            n,
            found,
            found[-1].entry.counters.tokens,
            found[-1].entry.counters.cost,
            found[-1].entry.counters.error_streak,
        )
        for n, found in steps.items()
    ]
    totals = counters[-1] if counters else None
    pages_of = _pages(request.url, first, last_step)
    waits = state.waiting_calls(row.id) if row.status is RunStatus.WAITING else []
    meaning = (
        StopReason(row.stop_reason).explained(row.budgets, row.error) if row.stop_reason else ""
    )
    return state.render(
        request,
        "run.html",
        run=row,
        tree=standing.tree,
        steps=shown,
        calls=page.calls,
        chart=counter_chart(counters),
        tokens=totals.tokens if totals else 0,
        cost=totals.cost if totals else 0.0,
        error_streak=totals.error_streak if totals else 0,
        last_step=last_step,
        pages=pages_of,
        meaning=meaning,
        waits=waits,
        lease_live=row.lease_is_live(standing.now),
        delayed_until=(
            row.not_before
            if row.status is RunStatus.QUEUED and row.not_before and row.not_before > standing.now
            else None
        ),
        scores=scores_of_run(state.reader, row.id),
        commands=state.commands(row) + [c for wait in waits for c in _answer_commands(wait)],
        notice=NOTICES.get(request.query_params.get("notice", "")),
        # An unfinished run's last page follows it live (static/follow.js) after the last
        # entry it shows.
        follow_from=(
            (page.entries[-1].seq if page.entries else -1)
            if row.status is not RunStatus.FINISHED and pages_of.next is None
            else None
        ),
    )


def _answer_commands(waiting: Wait | None) -> list[str]:
    """The commands that answer what a waiting run waits for, as the terminal types them."""
    if waiting is None:
        return []
    run, call = waiting.run_id, f"--call {waiting.call}"
    if waiting.asks == "child":  # answered by the child run's end
        return [f"runner show {child_run_id(run, waiting.call)}"]
    if waiting.asks == "reply":
        return [f'runner reply {run} "..." {call}']
    return [f"runner approve {run} {call}", f'runner deny {run} {call} --reason "..."']


def _page_start(given: str | None, last_step: int) -> int:
    """The first step of the page asked for: 1, 51, 101, ... (the last page if past it)."""
    try:
        first = max(1, int(given or 1))
    except ValueError:
        first = 1
    last_page = max(1, last_step - (last_step - 1) % STEPS_PER_PAGE)
    first = 1 + (first - 1) // STEPS_PER_PAGE * STEPS_PER_PAGE
    return min(first, last_page)


@dataclass(frozen=True)
class Pages:
    first: int
    last: int
    total: int
    first_page: str | None
    previous: str | None
    next: str | None
    last_page: str | None


def _pages(url: URL, first: int, last_step: int) -> Pages:
    last = min(last_step, first + STEPS_PER_PAGE - 1)
    final_page = max(1, last_step - (last_step - 1) % STEPS_PER_PAGE)

    def at(step: int) -> str:
        return str(url.include_query_params(**{"from": step}).remove_query_params("notice"))

    return Pages(
        first=first,
        last=last,
        total=last_step,
        first_page=at(1) if first > 1 else None,
        previous=at(first - STEPS_PER_PAGE) if first > 1 else None,
        next=at(first + STEPS_PER_PAGE) if last < last_step else None,
        last_page=at(final_page) if first < final_page else None,
    )


async def cancel(request: Request) -> Response:
    state = _state(request)
    form = await request.form()
    state.check_csrf(request, form.get("csrf"))
    result = await state.cancel(request.path_params["run_id"])
    notice = "cancel-requested"
    if result.status == RunStatus.FINISHED:
        notice = "cancelled" if result.stop_reason == StopReason.CANCELLED else "finished"
    target = request.url_for("run", run_id=result.run_id).include_query_params(notice=notice)
    return RedirectResponse(str(target.path) + "?" + target.query, status_code=303)


async def approve(request: Request) -> Response:
    return await _answer(request, "approve", "note")


async def deny(request: Request) -> Response:
    return await _answer(request, "deny", "reason")


async def reply(request: Request) -> Response:
    return await _answer(request, "reply", "text")


async def _answer(request: Request, how: str, field: str) -> Response:
    """One answer to a waiting run, through the library call `runner approve/deny/reply`
    makes; a lost race or a wrong answer is the error page's one line."""
    state = _state(request)
    form = await request.form()
    state.check_csrf(request, form.get("csrf"))
    given = str(form.get(field) or "")
    call = str(form.get("call") or "") or None
    try:
        answered = await state.answer(request.path_params["run_id"], how, given, call)
    except ValueError as exc:  # an empty reason or reply
        raise HTTPException(400, str(exc)) from None
    target = request.url_for("run", run_id=answered.run_id).include_query_params(notice="answered")
    return RedirectResponse(str(target.path) + "?" + target.query, status_code=303)


# -- provider limits --------------------------------------------------------------------------


def limits(request: Request) -> Response:
    state = _state(request)
    return state.render(request, "limits.html", limits=limit_use(state.reader))


# -- stop reasons per release ---------------------------------------------------------------


def stats(request: Request) -> Response:
    state = _state(request)
    by = request.query_params.get("by", "release")
    if by not in ("release", "agent", "day"):
        by = "release"
    agent = request.query_params.get("agent") or None
    groups = stop_reason_stats(state.reader, by=by, agent_name=agent)  # type: ignore[arg-type]
    agent_names, _ = filter_choices(state.reader)
    return state.render(
        request,
        "stats.html",
        by=by,
        agent=agent,
        agent_names=agent_names,
        groups=groups,
        chart=stop_chart(groups),
        rises=[(g, r) for g in groups for r in g.rises],
        behind=None if by == "day" else _runs_behind,
    )


def _runs_behind(group: Group, stop_reason: str) -> str:
    """The runs page filtered to the runs a figure counts: finished, stopped for
    `stop_reason`, of the group's agent and release. (The runs page has no filter by day:
    a day's figures link nowhere.)"""
    chosen = {"status": "finished", "stop_reason": stop_reason, "agent": group.agent_name,
              "release": group.release}  # fmt: skip
    return "/?" + urlencode({name: value for name, value in chosen.items() if value})
