"""Messages into a run while it goes: `Runner.send`.

A message is checked against what the run's agent accepts (`Agent(accepts=...)`: free text
by default), then put in the run's inbox once per idempotency key (runner.sql.messages);
the worker executing the run journals it as a user turn before its next model call. A
finished run takes a message only with `revive=True`: the message goes in its inbox, then the
run is revived (runner.service.revival) and queued to read it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from runner.core.agent import load_agent
from runner.core.journal import Entry
from runner.core.messages import Sent, check_body, check_key, new_key
from runner.core.status import RunStatus
from runner.errors import AgentLoadError, MessageRefused, MissingExtra
from runner.service.revival import revival
from runner.service.runner_base import RunnerBase
from runner.store.rows import RunRow


class Messaging(RunnerBase):
    """The `Runner`'s part that sends messages into runs."""

    def send(
        self,
        run_id: str,
        message: Any,
        *,
        key: str | None = None,
        revive: bool = False,
        **budgets: Any,
    ) -> Sent:
        """Send `message` to the run: the model sees `{"role": "user", "content": message}`
        before its next step, whether the run is running, queued or waiting (a waiting run
        waits for its answer still, and reads the message after).

        `key` (default: a new one, in the result) makes the send exactly once: the same key
        again is the same message, delivered once (a different message under a used key is
        refused). A finished run refuses a message (RunFinished) unless `revive`: then it
        goes on from its journal with the message, under `budgets` changed as
        `Runner.revive` changes them (a run that answered may be revived so; a cancelled
        one may not). A typed message (an agent with `accepts=`) may be given as a dict or a
        model: it is validated, and the model is shown its JSON. The run's agent is imported
        to know what it accepts: MessageRefused if this process cannot import it.
        """
        if budgets and not revive:
            raise ValueError("budgets are for a finished run the message revives: revive=True")
        run = self.store.find_run(run_id)
        body = accepted(run, message)
        key = new_key() if key is None else check_key(key)
        if revive and run.status is RunStatus.FINISHED:
            revival(run, self._tail(run), budgets, message=True)  # refused before it is sent
        sent = self.store.send_message(run.id, key, body, finished_ok=revive)
        if revive and sent.status is RunStatus.FINISHED and sent.delivered_seq is None:
            # A retry of a send whose revival never happened revives it now.
            self.store.change_budgets(
                run.id, lambda row, tail, _at: revival(row, tail, budgets, message=True)
            )
            sent = replace(sent, status=RunStatus.QUEUED, revived=True)
        return sent

    def inbox(self, run_id: str) -> list[Sent]:
        """The messages sent to the run that it has not read yet, in the order sent."""
        return self.store.inbox(self.store.find_run(run_id).id)

    def _tail(self, run: RunRow) -> list[tuple[int, Entry]]:
        """The run's last two entries with their seq, newest first (as a revival reads)."""
        journal = self.store.load_entries(run.id)
        return [(seq, journal[seq][0]) for seq in range(len(journal) - 1, -1, -1)][:2]


def accepted(run: RunRow, message: Any) -> str:
    """The message as the model is shown it, checked against what the run's agent accepts:
    text as it is; a typed payload validated, as JSON. MessageRefused if it does not fit."""
    accepts = _accepts(run)
    if accepts is None or accepts is str:
        if not isinstance(message, str):
            raise MessageRefused(
                f"run {run.id}'s agent accepts text messages, not {type(message).__name__}"
            )
        return check_body(message)
    return _typed(run, accepts, message)


def _accepts(run: RunRow) -> Any:
    """What the run's agent declared it accepts (None: it declared nothing, or the run has
    no agent a process can load)."""
    if run.agent is None:
        return None
    try:
        agent = load_agent(run.agent)
    except AgentLoadError as exc:
        raise MessageRefused(
            f"run {run.id}'s agent ({run.agent}) cannot be loaded to check the message "
            f"against what it accepts: {exc}"
        ) from None
    return agent.accepts


def _typed(run: RunRow, accepts: Any, message: Any) -> str:
    try:
        from pydantic import TypeAdapter, ValidationError
    except ModuleNotFoundError:
        raise MissingExtra(
            "a typed message (Agent(accepts=...)) is validated by pydantic: "
            "pip install 'durable-runner[typed]'"
        ) from None
    try:
        adapter: Any = TypeAdapter(accepts)
    except Exception as exc:  # pydantic's own errors: the type is not one it validates
        raise MessageRefused(
            f"run {run.id}'s agent accepts {accepts!r}, which pydantic cannot validate: "
            f"{str(exc).splitlines()[0]}"
        ) from None
    try:
        if isinstance(message, str):
            value = adapter.validate_json(message)
        else:
            value = adapter.validate_python(_plain(message))
    except ValidationError as exc:
        name = getattr(accepts, "__name__", str(accepts))
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or 'message'}: {error['msg']}"
            for error in exc.errors()
        )
        raise MessageRefused(f"run {run.id} accepts {name} messages: {problems}") from None
    return json.dumps(adapter.dump_python(value, mode="json"), ensure_ascii=False)


def _plain(message: Any) -> Any:
    """A model instance as its fields; a mapping or any other value as it is."""
    dump = getattr(message, "model_dump", None)
    if callable(dump):
        return dump()
    return dict(message) if isinstance(message, Mapping) else message
