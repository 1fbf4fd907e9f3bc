"""What a run looks like, printed: its JSON, `show`'s transcript, `list`'s table, a step's
progress line, `tail`'s events, how it stopped, a replay's verdict, and what a waiting run
waits for with the commands that answer it. Written through `runner.cli.output`, the one
way out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from runner.cli.output import (
    CELL_WIDTH,
    ago,
    cost_text,
    cut,
    duration,
    line,
    plural,
    printable,
    state_style,
    styled,
    table,
    text,
)
from runner.core.journal import Entry, EntryKind
from runner.core.result import AgentResult
from runner.core.status import RunStatus
from runner.core.stop_reasons import StopReason
from runner.service.documents import answer_commands

if TYPE_CHECKING:
    from runner.core.waiting import Answered, Wait
    from runner.service.events import Event
    from runner.service.replay import Replay
    from runner.service.values import RunRow, ScoreRow

_WIDTH = 100  # `show` cuts an observation to this; --full and --json have it whole


# -- runs (`show`, `list`, `run --json`) ------------------------------------------------------


def _when(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def render_run(
    result: AgentResult,
    row: RunRow,
    journal: Sequence[Entry] | None = None,
    now: datetime | None = None,
    *,
    full: bool = False,
    stalled: str | None = None,
    family: Sequence[str] = (),
    scores: Sequence[ScoreRow] = (),
) -> str:
    """A readable transcript with the run's header; `full` shows every value whole, and
    control characters are escaped throughout (the task, the model's words and the tools'
    results may hold anything).

    With the run's `journal`, the entries the model never saw (budget changes, refusals)
    are shown too; with `now`, how long ago things happened. `stalled` says why a stalled
    run is (runner.liveness.stall_reason). `family`: the lines on the run's parent and
    children (runner.cli.tree_output.family_lines). `scores`: the run's, a line each."""
    state = row.state or str(row.status)
    status = state + (f": {row.stop_reason}" if row.stop_reason else "")
    if stalled:
        status += f" ({stalled}; a worker or `runner resume {row.id}` takes it over)"
    if row.parked_reason and row.status is RunStatus.QUEUED:
        status += f" (parked: {row.parked_reason}; for a worker of release {row.release})"
    lines = [
        f"run       {row.id}",
        f"agent     {row.agent or '-'}" + _agent_label(row),
        f"status    {styled(status, state_style(state, row.stop_reason))}",
        f"counters  {plural(result.steps, 'step')}, {plural(result.tokens, 'token')}, "
        f"{cost_text(result.cost, result.tokens)}, {plural(row.resumes, 'resume')}",
        f"created   {_when(row.created_at)} UTC"
        + (f" ({ago(row.created_at, now)})" if now is not None else "")
        + (f", finished {_when(row.finished_at)} UTC" if row.finished_at else ""),
    ]
    lines.append(f"queue     {row.queue}, priority {row.priority}" + _delayed(row, now))
    if row.forked_from_id:
        lines.append(f"forked    from run {row.forked_from_id} at step {row.forked_at_step}")
    lines.extend(family)
    if row.lease_owner:
        seen = row.last_seen_at or row.leased_at
        lines.append(
            f"worker    {row.lease_owner} since {_when(row.leased_at)} UTC"
            + (f", last seen {ago(seen, now)}" if now is not None else "")
        )
    for wait in result.waits or ([result.waiting] if result.waiting is not None else []):
        lines.extend(wait_lines(wait))
    if row.undelivered_messages:
        lines.append(_inbox_line(row))
    if row.error:
        lines.append(f"error     {row.error}")
    lines.extend(score_lines(scores))
    lines.append("")
    width = None if full else _WIDTH
    if journal is None:
        for message in result.transcript:
            lines.extend(_message_lines(message, width))
    for entry in journal or ():
        lines.extend(_entry_lines(entry, width))
    lines.extend(_ending(result, row))
    return printable("\n".join(lines).replace("\r\n", "\n"))


def score_lines(scores: Sequence[ScoreRow]) -> list[str]:
    """A line per score of a run: its value (or where its scorer stands), its source, its
    note."""
    lines = []
    for score in scores:
        if score.status == "scored" and score.value is not None:
            shown = f"{score.value:g}"
        else:
            shown = str(score.status)
        note = f": {_short(score.note)}" if score.note else ""
        lines.append(f"score     {score.name} {shown} ({score.source}){note}")
    return lines


def score_json(score: ScoreRow) -> dict[str, Any]:
    """A score as `runner show --json` gives it."""
    return {
        "name": score.name,
        "status": str(score.status),
        "value": score.value,
        "note": score.note,
        "source": str(score.source),
        "attempts": score.attempts,
        "scored_at": score.scored_at.isoformat() if score.scored_at else None,
    }


# -- events (`tail`) ---------------------------------------------------------------------------


def event_lines(event: Event) -> str:
    """One event of `runner tail`: its entry as `show` prints it (cut as `show` cuts it)."""
    return printable("\n".join(_entry_lines(event.entry, _WIDTH)))


def ending_lines(result: AgentResult, row: RunRow) -> str:
    """How `tail` ends, as `show` does: the stop and what it means, or what is in flight
    (the commands that answer a waiting call follow, on stderr)."""
    return printable("\n".join(_ending(result, row, answers="answer below")))


def _delayed(row: RunRow, now: datetime | None) -> str:
    """`, starts 2026-12-01 12:00:00 UTC (in 9m00s)` for a queued run still delayed."""
    if row.status is not RunStatus.QUEUED or row.not_before is None:
        return ""
    if now is not None and row.not_before <= now:
        return ""
    when = f", starts {_when(row.not_before)} UTC"
    return when + (f" (in {duration((row.not_before - now).total_seconds())})" if now else "")


def _queue_cell(row: RunRow, now: datetime) -> str:
    """`batch`, `batch +5` (its priority, when not 0), `, in 9m00s` while it is delayed."""
    cell = row.queue + (f" {row.priority:+d}" if row.priority else "")
    start = row.not_before
    if row.status is RunStatus.QUEUED and start is not None and start > now:
        cell += f", in {duration((start - now).total_seconds())}"
    return cell


def _agent_label(row: RunRow) -> str:
    release = f"release {row.release}" if row.release else None
    labels = [label for label in (row.agent_name, release) if label]
    return f"  ({', '.join(labels)})" if labels else ""


def _ending(result: AgentResult, row: RunRow, *, answers: str = "see above") -> list[str]:
    """How the transcript ends: the stop and what it means, or the call still in flight
    (`answers`: where the commands that answer a waiting call are printed)."""
    if row.stop_reason is None:
        if result.waiting is not None:
            return [
                f"  .. {wait.tool}: waits for {_asked(wait)}"
                if str(wait.asks) == "child"
                else f"  .. {wait.tool}: waits for a person's {wait.asks} ({answers})"
                for wait in result.waits or [result.waiting]
            ]
        return [
            f"  .. {name}: no result yet (running, or a resume will settle it)"
            for name in _unanswered(result.transcript)
        ]
    meaning = StopReason(row.stop_reason).explained(row.budgets, row.error)
    if row.wrapped_up:
        meaning += "; the answer came from the wrap-up call"
    return ["", f"stopped   {row.stop_reason}: {meaning}"]


def _inbox_line(row: RunRow) -> str:
    """The messages sent to a run that it has not read yet (`runner send`)."""
    count = plural(row.undelivered_messages, "message")
    if row.status is RunStatus.FINISHED:
        return f"messages  {count} sent, never read: the run finished first"
    return f"messages  {count} sent, read before the run's next step"


def _entry_lines(entry: Entry, width: int | None) -> list[str]:
    """One journal entry as `show` prints it: its message, or what the model never saw."""
    if entry.kind is EntryKind.MESSAGE:  # a user turn sent while the run went
        return [f"message   {_short(entry.content, width)}  (key {entry.idempotency_key})"]
    if entry.kind in (EntryKind.REVIVED, EntryKind.EXTENDED, EntryKind.LIMIT_WAIT):
        return [f"  == {entry.content}"]
    if entry.kind is EntryKind.COMPACTION:  # what the model is shown from here on
        steps = (entry.args or {}).get("steps", "?")
        return [
            f"  == compacted: the first {steps} steps summarised for the model "
            f"({entry.tokens} tokens): {_short(entry.content, width)}"
        ]
    if entry.kind is EntryKind.REFUSED:
        what = f"{entry.tool}(...)" if entry.tool else str(entry.action_type)
        return [f"  x> {what} refused by a stop rule"]
    message = entry.message()
    if message is None:
        return []
    # A call run again (after a crash, with its key) says which attempt gave its outcome.
    again = entry.kind is EntryKind.OBSERVATION and (entry.attempt or 1) > 1
    return _message_lines(message, width, attempt=entry.attempt if again else None)


def _unanswered(transcript: Sequence[dict[str, Any]]) -> list[str]:
    """The tools of the last step's calls that have no observation yet."""
    for at in range(len(transcript) - 1, -1, -1):
        message = transcript[at]
        if message["role"] == "assistant":
            calls = message.get("calls") or ([message] if "tool" in message else [])
            answers = [m for m in transcript[at + 1 :] if m["role"] == "tool"]
            waiting = []
            for call in calls:
                name = call.get("tool", call.get("name"))
                # An observation names its call by id when the model gave ids, else by tool.
                match = next(
                    (a for a in answers if a.get("id", a["name"]) == call.get("id", name)), None
                )
                if match is None:
                    waiting.append(str(name))
                else:
                    answers.remove(match)
            return waiting
        if message["role"] != "tool":
            return []
    return []


def _message_lines(
    message: dict[str, Any], width: int | None = _WIDTH, *, attempt: int | None = None
) -> list[str]:
    role = message["role"]
    if role == "user":
        return [f"user      {_short(message['content'], width)}"]
    if role == "tool":
        mark = "error" if message["is_error"] else "ok"
        mark += f", attempt {attempt}" if attempt else ""
        return [f"  <- {message['name']} [{mark}]  {_short(message['content'], width)}"]
    said = [f"  said: {_short(message['text'], width)}"] if message.get("text") else []
    if "tool" in message:
        return [*said, _call_line(message["tool"], message["args"], width)]
    if "calls" in message:
        calls = message["calls"]
        return [*said, *(_call_line(call["name"], call["args"], width) for call in calls)]
    if "invalid" in message:
        return [f"  -> (invalid output) {_short(message['invalid'], width)}"]
    # The answer is what the run is for: shown whole, continuation lines indented.
    return ["answer    " + text(message["content"], exact=True).replace("\n", "\n          ")]


def _call_line(tool: Any, args: Any, width: int | None = _WIDTH) -> str:
    shown = json.dumps(args)
    return f"  -> {tool}({shown if width is None else cut(shown, 80)})"


def _short(content: Any, width: int | None = _WIDTH) -> str:
    """A value on one line, cut to `width` (None: whole, continuation lines indented)."""
    if width is None:
        return text(content, exact=True).replace("\n", "\n          ")
    return cut(text(content, exact=True), width)


def runs_table(rows: Sequence[RunRow], now: datetime) -> str:
    if not rows:
        return "no runs"
    header = (
        "ID", "STATUS", "STOP", "STEPS", "TOKENS", "AGENT", "RELEASE", "QUEUE", "CREATED", "TIME",
        "WORKER",
    )  # fmt: skip
    return table(
        header,
        (
            (
                row.id,
                (row.state, state_style(row.state, row.stop_reason)),
                (str(row.stop_reason), state_style("finished", row.stop_reason))
                if row.stop_reason
                else "-",
                str(row.steps),
                str(row.tokens),
                row.agent_name or (row.agent or "-"),
                row.release or "-",
                _queue_cell(row, now),
                ago(row.created_at, now),
                duration(((row.finished_at or now) - row.created_at).total_seconds()),
                f"{row.lease_owner}, seen {ago(row.last_seen_at or row.leased_at, now)}"
                if row.lease_owner
                else "-",
            )
            for row in rows
        ),
        right=(3, 4, 9),
    )


def progress_line(entry: Entry) -> str | None:
    """The line a finished step prints on stderr (None for entries that finish no step)."""
    c = entry.counters
    if entry.kind is EntryKind.WAIT:
        return f"step {entry.step}  tool {entry.tool}  waits for {entry.waits_for}: {entry.content}"
    if entry.kind is EntryKind.OBSERVATION:
        status = "error" if entry.is_error else "ok"
        return f"step {entry.step}  tool {entry.tool}  {status}  tokens {c.tokens}"
    if entry.kind is EntryKind.FINAL:
        return f"step {entry.step}  final  tokens {c.tokens}"
    if entry.kind is EntryKind.REFUSED:
        return f"step {entry.step}  {entry.action_type} refused by a budget  tokens {c.tokens}"
    if entry.kind is EntryKind.COMPACTION:
        return f"step {entry.step}  compacted  tokens {c.tokens}"
    return None


def progress(run_id: str, entry: Entry) -> None:
    """One line per step on stderr: the answer alone goes to stdout."""
    said = progress_line(entry)
    if said is not None:
        line(printable(said), err=True)


def stopped(result: AgentResult, seconds: float | None = None) -> None:
    """How the run stopped, on stderr; its answer, if any, on stdout."""
    took = f", {duration(seconds)}" if seconds is not None else ""
    # Why the model failed is the one thing a person needs next (a missing key, a refused
    # request): its first line ends the stop line.
    reason = (result.error or "").strip()
    why = f": {reason.splitlines()[0]}" if reason else ""
    line(
        printable(
            f"stopped: {result.stop_reason} after {plural(result.steps, 'step')}, "
            f"{plural(result.tokens, 'token')}, {cost_text(result.cost, result.tokens)}{took} "
            f"(run {result.run_id}){why}"
        ),
        err=True,
    )
    if result.output is not None:
        line(result.output if isinstance(result.output, str) else json.dumps(result.output))


def replay_lines(report: Replay, agent: str | None) -> str:
    """What a replay found, for a person: agreement, or the first step that differs."""
    against = f" against {agent}" if agent else ""
    lines = [
        f"replayed run {report.run_id}{against}: {plural(report.steps, 'recorded step')}, "
        "no model called, no tool run"
    ]
    if report.agrees:
        stop = f" and its stop ({report.stop_reason})" if report.stop_reason else ""
        lines.append(styled(f"agrees: the agent takes every recorded step{stop} again", "green"))
    else:
        lines.append(styled(f"differs at step {report.step}:", "bold red"))
        lines.append(f"  recorded  the run {report.recorded}")
        lines.append(f"  now       the agent {report.now}")
    if report.note:
        lines.append(f"note: {report.note}")
    return "\n".join(lines)


def sample_lines(reports: Sequence[Replay], asked: int) -> str:
    """What a deploy gate found: each run that differs, named with its step and what
    differed, then the count."""
    if not reports:
        return "no finished run to replay: nothing checked"
    lines = []
    differing = [report for report in reports if not report.agrees]
    for report in differing:
        lines.append(
            styled(f"run {report.run_id} differs at step {report.step}:", "bold red")
            + f" the run {report.recorded}; the agent {report.now}"
        )
    agreeing = len(reports) - len(differing)
    more = "" if len(reports) == asked else f" (of {asked} asked: no more finished runs)"
    summary = f"replayed {plural(len(reports), 'run')}{more}: {agreeing} agree, "
    summary += f"{len(differing)} differ{'s' if len(differing) == 1 else ''}"
    lines.append(styled(summary, "bold red" if differing else "green"))
    return "\n".join(lines)


def replay_json(report: Replay, agent: str | None) -> dict[str, Any]:
    return {
        "id": report.run_id,
        "agent": agent,
        "agrees": report.agrees,
        "steps": report.steps,
        "stop_reason": report.stop_reason,
        "step": report.step,
        "recorded": report.recorded,
        "now": report.now,
        "note": report.note,
    }


# -- people in the loop (`run` and `resume` at a wait, `list --status waiting`, answers) ------


def _asked(wait: Wait) -> str:
    if str(wait.asks) == "child":
        return f"its sub-agent's run {_child_run(wait)} to end"
    if str(wait.asks) == "reply":
        return f"a reply to: {cut(wait.question, _WIDTH)}"
    return f"approval of {cut(wait.question, _WIDTH)}"


def _child_run(wait: Wait) -> str:
    # runner.core.tree (budgets, trees of runs) loaded for a wait on a sub-agent alone:
    # `runner list` and `show` of any other run have no use for it (issue 28, start-up).
    from runner.core.tree import child_run_id

    return child_run_id(wait.run_id, wait.call)


def wait_lines(wait: Wait) -> list[str]:
    """What a run waits for, since when, and how to answer it: `show`'s header lines."""
    lines = [f"waiting   {_asked(wait)} (call {wait.call}) since {_when(wait.since)} UTC"]
    if wait.expires_at is not None:
        lines.append(f"times out {_when(wait.expires_at)} UTC (approval_timeout): then denied")
    lines.append("answer    " + "  |  ".join(answer_commands(wait)))
    return lines


def waiting(result: AgentResult) -> None:
    """A run that stopped to wait: what for and the commands that answer it, on stderr."""
    wait = result.waiting
    if wait is None:
        line(f"run {result.run_id} is waiting", err=True)
        return
    for each in result.waits or [wait]:  # a step of several calls: each waiting call
        line(f"waiting: run {result.run_id} needs {_asked(each)}", err=True)
        for command in answer_commands(each):
            line(f"  {command}", err=True)


def waits_table(rows: Sequence[RunRow], waits: dict[str, Wait]) -> str:
    """Waiting runs: what each waits for, since when, the command that answers it."""
    if not rows:
        return "no runs"
    header = ("ID", "WAITS FOR", "CALL", "SINCE", "ANSWER WITH")
    cells = []
    for row in rows:
        wait = waits.get(row.id)
        if wait is None:  # answered between the two reads: no longer waiting
            cells.append((row.id, "-", "-", "-", f"(now {row.status})"))
            continue
        what = (
            wait.question
            if str(wait.asks) == "reply"
            else f"child run: {_child_run(wait)}"
            if str(wait.asks) == "child"
            else f"approval: {wait.question}"
        )
        cells.append(
            (row.id, cut(what, CELL_WIDTH), wait.call, _when(wait.since), answer_commands(wait)[0])
        )
    return table(header, cells)


def answered_line(answered: Answered) -> str:
    by = f" by {printable(answered.by)}" if answered.by else ""
    if answered.still_waiting:  # other calls of its step still wait: nothing runs yet
        return (
            f"run {answered.run_id}: call {answered.call} {answered.answer}{by}; the run still "
            f"waits for {plural(len(answered.still_waiting), 'call')} of its step "
            f"({', '.join(answered.still_waiting)})"
        )
    return (
        f"run {answered.run_id}: call {answered.call} {answered.answer}{by}; the run is queued "
        f"again (a worker takes it, or `runner resume {answered.run_id}`)"
    )
