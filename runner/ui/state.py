"""What the page's server holds: the read-only engine, the templates, the writer, the guard."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import jinja2
from sqlalchemy import Engine
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from runner.core.result import AgentResult
from runner.core.status import RunStatus
from runner.core.utf8 import utf8_safe
from runner.core.waiting import Answered, Wait
from runner.history import lag_words, replica_lag
from runner.service.database import redact_url
from runner.service.runner import Runner
from runner.service.values import RunRow
from runner.ui.filters import FILTERS
from runner.ui.security import SESSION_COOKIE, Csrf

# The commands a run's page shows as text, for a terminal: (name, arguments, when shown).
# Each is a command of the CLI with these options (tests/ui/test_pages.py holds it so).
COMMANDS = (
    ("show", "{id}", "always"),
    ("resume", "{id}", "unfinished"),
    ("cancel", "{id}", "unfinished"),
    ("fork", "{id}", "always"),
    ("replay", "{id}", "always"),
    ("export", "--run {id}", "always"),
)


def _utf8_safe(value: Any) -> Any:
    """Every value a template writes, with lone surrogates escaped (runner.core.utf8): the
    journal keeps them, a page cannot carry them. Markup stays Markup (escaped already)."""
    if isinstance(value, str):
        shown = utf8_safe(value)
        return value if shown is value else type(value)(shown)
    return value


class UiState:
    def __init__(self, url: str, reader: Engine, replica: str | None = None) -> None:
        self.url = url
        self.shown_url = redact_url(url)  # the only form of the URL any page shows
        self.reader = reader  # on the replica, if there is one
        self.replica = replica
        self.csrf = Csrf()
        self._writer: Runner | None = None
        self._replica_runner: Runner | None = None
        self._writer_lock = threading.Lock()
        environment = jinja2.Environment(
            loader=jinja2.PackageLoader("runner.ui", "templates"),
            autoescape=True,  # every value from the database is escaped, in every template
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            finalize=_utf8_safe,
        )
        environment.filters.update(FILTERS)
        self.templates = Jinja2Templates(env=environment)

    def render(
        self, request: Request, template: str, status_code: int = 200, **context: Any
    ) -> Response:
        session = request.scope.get("state", {}).get("session", "")
        lag = self.replica_lag()
        context.update(
            replica=lag_words(lag) if lag is not None else "",
            database=self.shown_url,
            csrf=self.csrf.token(session) if session else "",
            path=request.url.path,
        )
        return self.templates.TemplateResponse(request, template, context, status_code=status_code)

    def check_csrf(self, request: Request, given: object) -> None:
        if not self.csrf.valid(request.cookies.get(SESSION_COOKIE), given):
            raise HTTPException(403, "refused: the form's CSRF token is missing or wrong")

    def commands(self, row: RunRow) -> list[str]:
        finished = row.status is RunStatus.FINISHED
        return [
            f"runner {name} {arguments.format(id=row.id)}"
            for name, arguments, when_shown in COMMANDS
            if when_shown == "always" or not finished
        ]

    async def cancel(self, run_id: str) -> AgentResult:
        return await run_in_threadpool(lambda: self._runner().cancel(run_id))

    def waiting_for(self, run_id: str) -> Wait | None:
        """What a waiting run waits for (a read, through the same library as the CLI)."""
        return self._runner().waiting_for(run_id)

    def waiting_calls(self, run_id: str) -> Sequence[Wait]:
        """Every call a waiting run waits for (a step of several calls may wait for several)."""
        return self._runner().waiting_calls(run_id)

    async def answer(self, run_id: str, how: str, text: str, call: str | None) -> Answered:
        """Approve, deny or reply: the same library calls as `runner approve/deny/reply`."""
        runner = self._runner()

        def give() -> Answered:
            if how == "approve":
                return runner.approve(run_id, call=call, note=text or None)
            if how == "deny":
                return runner.deny(run_id, reason=text, call=call)
            return runner.reply(run_id, text, call=call)

        return await run_in_threadpool(give)

    def runner(self) -> Runner:
        """The server's `Runner` (the API's writes go through it, and its reads without a
        replica)."""
        return self._runner()

    def read_runner(self) -> Runner:
        """The `Runner` the API's reads of runs go through: on the replica if there is one."""
        if self.replica is None:
            return self._runner()
        with self._writer_lock:
            if self._replica_runner is None:
                self._replica_runner = Runner(self.replica)
            return self._replica_runner

    def replica_lag(self) -> float | None:
        """Seconds the replica the reads go to is behind its primary; None without one."""
        return replica_lag(self.reader) if self.replica is not None else None

    def _runner(self) -> Runner:
        # Writes take the library's own path, on an ordinary (writable) engine, opened only
        # when a first write is asked for.
        with self._writer_lock:
            if self._writer is None:
                self._writer = Runner(self.url)
            return self._writer

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._replica_runner is not None:
            self._replica_runner.close()
        self.reader.dispose()
