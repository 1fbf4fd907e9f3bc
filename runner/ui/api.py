"""The HTTP API under `/api/`: runs as JSON, submit, cancel, answers, messages into runs, and a
run's events as Server-Sent Events. Every call goes through the `Runner` (runner.service),
the library the CLI uses; the JSON is the CLI's (runner.service.documents); what the API
accepts and how it refuses is runner.ui.api_input; the stream is runner.ui.api_events; the
OpenAPI document runner.ui.api_openapi. Who may call it is runner.ui.security's, as for the
page.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import wraps
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from runner.core.messages import Sent
from runner.core.status import STATES
from runner.core.stop_reasons import StopReason
from runner.errors import (
    AmbiguousRunId,
    DatabaseUnavailable,
    MessageConflict,
    NotWaiting,
    RunConflict,
    RunFinished,
    RunnerError,
    RunNotFound,
    WrongAnswer,
)
from runner.service.documents import answered_json, run_json, score_json, sent_json
from runner.service.runner import Runner
from runner.ui import api_events, api_input
from runner.ui.api_input import ApiError
from runner.ui.api_openapi import openapi
from runner.ui.state import UiState

T = TypeVar("T")
Endpoint = Callable[[Request], Awaitable[Response]]

DEFAULT_LIMIT = 50
MAX_LIMIT = 500


def error_response(status: int, message: str, **detail: Any) -> JSONResponse:
    """How the API says no: `{"error": message, ...}` with a 4xx (or 5xx) status."""
    return JSONResponse({"error": message, **detail}, status_code=status)


def refusal(exc: Exception) -> ApiError | None:
    """The API's answer to an error of the library (None: not one it expects)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, RunNotFound | AmbiguousRunId):
        return ApiError(404, "no such run")
    if isinstance(exc, RunConflict):
        differences = {name: {"stored": old, "asked": new} for name, (old, new) in
                       exc.differences.items()}  # fmt: skip
        return ApiError(409, str(exc), run_id=exc.run_id, differences=differences)
    if isinstance(exc, NotWaiting | WrongAnswer | RunFinished | MessageConflict):
        return ApiError(409, str(exc))
    if isinstance(exc, DatabaseUnavailable):
        return ApiError(503, str(exc))
    if isinstance(exc, RunnerError | ValueError):
        return ApiError(400, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    return None


def endpoint(handler: Endpoint) -> Endpoint:
    """A handler whose refusals (ApiError, the library's errors) are JSON answers."""

    @wraps(handler)
    async def answering(request: Request) -> Response:
        try:
            return await handler(request)
        except Exception as exc:
            refused = refusal(exc)
            if refused is None:
                raise
            return error_response(refused.status, refused.message, **refused.detail)

    return answering


def _state(request: Request) -> UiState:
    state: UiState = request.app.state.ui
    return state


async def _call(request: Request, work: Callable[[Runner], T]) -> T:
    """`work` on the server's runner, in a thread: the library blocks, the server must not."""
    runner = _state(request).runner()
    return await run_in_threadpool(work, runner)


async def _read(request: Request, work: Callable[[Runner], T]) -> tuple[T, dict[str, str]]:
    """`work`, a read, on the replica's runner if there is one: its answer and the headers
    that say how far behind the replica is (`Runner-Replica-Lag`, in seconds)."""
    state = _state(request)
    answer = await run_in_threadpool(work, state.read_runner())
    lag = await run_in_threadpool(state.replica_lag)
    return answer, ({} if lag is None else {"Runner-Replica-Lag": f"{lag:.3f}"})


def _flag(request: Request, name: str) -> bool:
    """A yes-or-no query parameter: `true` or `1` (anything else, or none, is no)."""
    return request.query_params.get(name, "").lower() in ("1", "true")


def _whole_id(runner: Runner, given: str) -> str:
    """The run named exactly `given` (the CLI takes a prefix; the API does not)."""
    run_id = runner.row(given).id
    if run_id != given:
        raise ApiError(404, "no such run")
    return run_id


# -- reading --------------------------------------------------------------------------------


@endpoint
async def list_runs(request: Request) -> Response:
    q = request.query_params
    state = q.get("state") or None
    if state is not None and state not in STATES:
        raise ApiError(400, f"state must be one of: {', '.join(STATES)}")
    reason = q.get("stop_reason") or None
    if reason is not None and reason not in {r.value for r in StopReason}:
        raise ApiError(400, f"stop_reason must be one of: {', '.join(r.value for r in StopReason)}")
    release = api_input.text(dict(q), "release")
    limit = api_input.position(q.get("limit"), "limit")
    if limit is None:
        limit = DEFAULT_LIMIT
    if not 1 <= limit <= MAX_LIMIT:
        raise ApiError(400, f"limit must be between 1 and {MAX_LIMIT}")

    def read(runner: Runner) -> list[dict[str, Any]]:
        rows = runner.list(
            state=state, stop_reason=StopReason(reason) if reason else None,
            release=release, limit=limit,
        )  # fmt: skip
        waits = runner.waits(rows)
        return [run_json(None, row, wait=waits.get(row.id)) for row in rows]

    runs, headers = await _read(request, read)
    return JSONResponse({"runs": runs}, headers=headers)


@endpoint
async def get_run(request: Request) -> Response:
    given = api_input.run_id(request.path_params["run_id"])
    transcript = _flag(request, "transcript")

    def read(runner: Runner) -> dict[str, Any]:
        run_id = _whole_id(runner, given)
        return run_json(runner.get(run_id), runner.row(run_id), transcript=transcript)

    run, headers = await _read(request, read)
    return JSONResponse(run, headers=headers)


# -- writing --------------------------------------------------------------------------------

SUBMIT_FIELDS = {"agent", "task", "budgets", "queue", "priority", "delay"}


@endpoint
async def submit(request: Request) -> Response:
    body = await api_input.json_body(request)
    api_input.only(body, SUBMIT_FIELDS)
    agent = api_input.text(body, "agent", required=True)
    task = api_input.text(body, "task", required=True)
    assert agent is not None and task is not None
    budgets = api_input.budgets(body)
    queue = api_input.text(body, "queue")
    priority = api_input.whole(body, "priority")
    delay = api_input.seconds(body, "delay")
    key = request.headers.get("idempotency-key")
    run_id = api_input.run_id_for_key(key) if key is not None else None

    def put(runner: Runner) -> tuple[bool, dict[str, Any]]:
        existed = False
        if run_id is not None:
            try:
                existed = runner.row(run_id).id == run_id
            except RunNotFound:
                existed = False
        chosen = runner.submit(
            agent, task, id=run_id, queue=queue, priority=priority, delay=delay, **budgets
        )
        return existed, run_json(None, runner.row(chosen))

    existed, document = await _call(request, put)
    location = str(request.url_for("api_run", run_id=document["id"]).path)
    return JSONResponse(document, status_code=200 if existed else 201,
                        headers={"location": location})  # fmt: skip


@endpoint
async def cancel(request: Request) -> Response:
    given = api_input.run_id(request.path_params["run_id"])
    api_input.only(await api_input.json_body(request), set())

    def stop(runner: Runner) -> dict[str, Any]:
        run_id = _whole_id(runner, given)
        return run_json(runner.cancel(run_id), runner.row(run_id))

    return JSONResponse(await _call(request, stop))


# What each answer takes: the field of its text, and whether that text is required.
ANSWERS = {"approve": ("note", False), "deny": ("reason", True), "reply": ("text", True)}


def answer(how: str) -> Endpoint:
    field, required = ANSWERS[how]

    @endpoint
    async def give(request: Request) -> Response:
        given = api_input.run_id(request.path_params["run_id"])
        body = await api_input.json_body(request)
        api_input.only(body, {field, "call", "by"})
        said = api_input.text(body, field, required=required)
        if required and not (said or "").strip():
            raise ApiError(400, f"{field!r} must not be empty")
        call = api_input.text(body, "call")
        by = api_input.text(body, "by")

        def record(runner: Runner) -> dict[str, Any]:
            run_id = _whole_id(runner, given)
            if how == "approve":
                answered = runner.approve(run_id, call=call, note=said, by=by)
            elif how == "deny":
                answered = runner.deny(run_id, reason=said or "", call=call, by=by)
            else:
                answered = runner.reply(run_id, said or "", call=call, by=by)
            return answered_json(answered)

        return JSONResponse(await _call(request, record))

    give.__name__ = how
    return give


SEND_FIELDS = {"message", "revive", "budgets"}


@endpoint
async def send_message(request: Request) -> Response:
    """A message into the run (`runner send`): the `Idempotency-Key` header is its key (the
    same key again is the same message: 200, not 201); a finished run takes it only with
    `"revive": true`."""
    given = api_input.run_id(request.path_params["run_id"])
    body = await api_input.json_body(request)
    api_input.only(body, SEND_FIELDS)
    message = body.get("message")
    if not isinstance(message, str | dict):
        raise ApiError(400, "'message' is required: text, or an object for a typed agent")
    revive = body.get("revive", False)
    if not isinstance(revive, bool):
        raise ApiError(400, "'revive' must be true or false")
    budgets = api_input.budgets(body)
    key = request.headers.get("idempotency-key")

    def put(runner: Runner) -> Sent:
        return runner.send(_whole_id(runner, given), message, key=key, revive=revive, **budgets)

    sent = await _call(request, put)
    # Sent before under this key: that message, as it stands (200); else the new one (201).
    return JSONResponse(sent_json(sent), status_code=200 if sent.duplicate else 201)


SCORE_FIELDS = {"name", "value", "note"}


@endpoint
async def add_score(request: Request) -> Response:
    """A score of the run (`runner score`): `{"name": ..., "value": number, "note": ...}`;
    one of the same name replaces the run's earlier one."""
    given = api_input.run_id(request.path_params["run_id"])
    body = await api_input.json_body(request)
    api_input.only(body, SCORE_FIELDS)
    name = api_input.text(body, "name", required=True) or ""
    value = body.get("value")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ApiError(400, "'value' is required: a number")
    note = api_input.text(body, "note")

    def keep(runner: Runner) -> dict[str, Any]:
        return score_json(runner.score(_whole_id(runner, given), name, value, note))

    return JSONResponse(await _call(request, keep), status_code=201)


@endpoint
async def list_scores(request: Request) -> Response:
    """The run's scores by name: kept, failed, and its scorers' not yet run."""
    given = api_input.run_id(request.path_params["run_id"])

    def read(runner: Runner) -> dict[str, Any]:
        return {"scores": [score_json(row) for row in runner.scores(_whole_id(runner, given))]}

    return JSONResponse(await _call(request, read))


@endpoint
async def events(request: Request) -> Response:
    given = api_input.run_id(request.path_params["run_id"])
    # A reconnecting EventSource sends the last id it saw; it outranks `?after=` (the URL
    # it reconnects to is the one it first opened).
    after = api_input.position(request.headers.get("last-event-id"), "Last-Event-ID")
    if after is None:
        after = api_input.position(request.query_params.get("after"), "after")
    start = -1 if after is None else after
    deltas = _flag(request, "deltas")
    tree = _flag(request, "tree")

    def follow(runner: Runner) -> api_events.Stream:
        run_id = _whole_id(runner, given)
        if tree:  # the runs below too, each entry naming its run
            return runner.tree_events(run_id, after=start, follow=True, deltas=deltas)
        if deltas:
            return runner.events(run_id, after=start, follow=True, deltas=True)
        return runner.events(run_id, after=start, follow=True)

    stream = await _call(request, follow)
    return api_events.response(stream, _state(request).runner())


async def openapi_document(request: Request) -> Response:
    return JSONResponse(openapi())


routes = [
    Route("/openapi.json", openapi_document, name="api_openapi"),
    Route("/runs", list_runs, name="api_runs"),
    Route("/runs", submit, methods=["POST"], name="api_submit"),
    Route("/runs/{run_id}", get_run, name="api_run"),
    Route("/runs/{run_id}/events", events, name="api_events"),
    Route("/runs/{run_id}/cancel", cancel, methods=["POST"], name="api_cancel"),
    Route("/runs/{run_id}/messages", send_message, methods=["POST"], name="api_messages"),
    Route("/runs/{run_id}/scores", list_scores, name="api_scores"),
    Route("/runs/{run_id}/scores", add_score, methods=["POST"], name="api_add_score"),
    *(Route(f"/runs/{{run_id}}/{how}", answer(how), methods=["POST"], name=f"api_{how}")
      for how in ANSWERS),
]  # fmt: skip
