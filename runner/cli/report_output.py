"""What the history and the queues look like, printed: `runner sql`'s results (table, CSV,
JSON), `runner stats`'s stop-reason distribution, what `runner prune` removed, `runner queue
list`, `runner schedule list` and `runner limit list`. Written through `runner.cli.output`,
the one way out.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from runner.cli.output import CELL_WIDTH, cut, plural, table, text
from runner.core.utf8 import utf8_safe

if TYPE_CHECKING:
    from runner.history import Group, Pruned
    from runner.service.values import Fired, LimitInfo, QueueInfo, ScheduleRow


# -- query results (`runner sql`) -------------------------------------------------------------


def query_table(columns: list[str], rows: Iterable[tuple[Any, ...]]) -> str:
    if not columns:
        return "(no result rows)"
    values = list(rows)
    # A column of numbers (and NULLs) is right-aligned under its left-aligned header.
    # PostgreSQL gives NUMERIC for some arithmetic (a SUM of bigints): numbers too.
    right = [
        i
        for i in range(len(columns))
        if values
        and all(isinstance(row[i], int | float | Decimal) or row[i] is None for row in values)
    ]
    cells = [["" if v is None else cut(text(v), CELL_WIDTH) for v in row] for row in values]
    shown = table(columns, cells, right=right)
    return f"{shown}\n({len(values)} row{'' if len(values) == 1 else 's'})"


def query_csv(columns: list[str], rows: Iterable[tuple[Any, ...]]) -> None:
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow([utf8_safe(name) for name in columns])
    for row in rows:
        writer.writerow(["" if v is None else utf8_safe(text(v, exact=True)) for v in row])


def query_json(columns: list[str], rows: Iterable[tuple[Any, ...]]) -> None:
    from runner.history import plain

    keys = _unique(columns)
    out = sys.stdout
    out.write("[")
    for n, row in enumerate(rows):
        item = {key: plain(value) for key, value in zip(keys, row, strict=True)}
        # A lone surrogate escaped is JSON's own escape of it: the value round-trips.
        out.write(("," if n else "") + "\n" + utf8_safe(json.dumps(item, ensure_ascii=False)))
    out.write("\n]\n")


def _unique(columns: Sequence[str]) -> list[str]:
    seen: dict[str, int] = {}
    keys = []
    for name in columns:
        seen[name] = seen.get(name, 0) + 1
        keys.append(name if seen[name] == 1 else f"{name}_{seen[name]}")
    return keys


# -- the stop-reason distribution (`runner stats`) --------------------------------------------


def stats_json(
    by: str, since: datetime | None, min_rise: float, groups: list[Group]
) -> dict[str, Any]:
    from runner.history import plain

    return {
        "by": by,
        "since": plain(since),
        "min_rise": min_rise,
        "groups": [
            {
                "group": g.label,
                "agent_name": g.agent_name,
                "release": g.release,
                "day": g.day,
                "schedule": g.schedule,
                "runs": g.runs,
                "first_run_at": plain(g.first_run_at),
                "stop_reasons": [
                    {"stop_reason": s.stop_reason, "count": s.count, "percent": round(s.percent, 2)}
                    for s in g.shares
                ],
                "previous": g.previous,
                "flags": [
                    {
                        "stop_reason": r.stop_reason,
                        "percent": round(r.percent, 2),
                        "previous_percent": round(r.previous_percent, 2),
                        "rise_points": round(r.points, 2),
                        "p_value": float(f"{r.p_value:.3g}"),
                    }
                    for r in g.rises
                ],
                **(_scores_json(g) if by == "release" else {}),
            }
            for g in groups
        ],
    }


def _scores_json(g: Group) -> dict[str, Any]:
    def rounded(value: float | None) -> float | None:
        return None if value is None else round(value, 4)

    return {
        "scores": [
            {
                "name": m.name,
                "runs": m.runs,
                "mean": rounded(m.mean),
                "low": rounded(m.low),
                "high": rounded(m.high),
            }
            for m in g.scores
        ],
        "score_drops": [
            {
                "name": d.name,
                "mean": rounded(d.mean),
                "previous_mean": rounded(d.previous_mean),
                "p_value": float(f"{d.p_value:.3g}"),
            }
            for d in g.drops
        ],
    }


def stats_table(by: str, groups: list[Group], min_rise: float) -> str:
    if not groups:
        return "no finished runs"
    total: dict[str, int] = {}
    for g in groups:
        for s in g.shares:
            total[s.stop_reason] = total.get(s.stop_reason, 0) + s.count
    reasons = sorted(total, key=lambda r: (r != "final", -total[r], r))
    counts = {
        reason: max(len(str(s.count)) for g in groups for s in g.shares if s.stop_reason == reason)
        for reason in reasons
    }
    rows = []
    for g in groups:
        shares = {s.stop_reason: s for s in g.shares}
        flagged = {r.stop_reason for r in g.rises}
        row = [g.label, str(g.runs)]
        for reason in reasons:
            share = shares.get(reason)
            width = counts[reason]
            cell = f"{share.count:>{width}} {share.percent:5.1f}%" if share else "-".rjust(width)
            row.append(cell + (" ^" if reason in flagged else ""))
        rows.append(row)
    lines = [table([by.upper(), "RUNS", *reasons], rows, right=[1], right_headers=[1])]
    rises = [(g, r) for g in groups for r in g.rises]
    if rises:
        lines.append("")
        lines.append(
            f"^ share rose by {min_rise:g} points or more since the previous {by}, "
            "beyond chance (p < 0.05):"
        )
        for g, r in rises:
            lines.append(
                f"  {g.label}: {r.stop_reason} {r.previous_percent:.1f}% -> {r.percent:.1f}% "
                f"(+{r.points:.1f} points since {g.previous})"
            )
    if any(g.scores for g in groups):
        lines.append("")
        lines.append(scores_table(groups))
    return "\n".join(lines)


def scores_table(groups: list[Group]) -> str:
    """Each release's scores: runs scored, mean and 95% interval, drops flagged with v."""
    rows = []
    for g in groups:
        dropped = {d.name for d in g.drops}
        for m in g.scores:
            interval = "-" if m.low is None or m.high is None else f"{m.low:.3f} .. {m.high:.3f}"
            flag = " v" if m.name in dropped else ""
            rows.append([g.label, m.name, str(m.runs), f"{m.mean:.3f}{flag}", interval])
    lines = [table(["RELEASE", "SCORE", "RUNS", "MEAN", "95% INTERVAL"], rows, right=[2])]
    found = [(g, d) for g in groups for d in g.drops]
    if found:
        lines.append("")
        lines.append(
            "v mean fell since the previous release, beyond chance "
            "(one-sided Welch's t-test, p < 0.05):"
        )
        for g, d in found:
            lines.append(
                f"  {g.label}: {d.name} {d.previous_mean:.3f} -> {d.mean:.3f} "
                f"(p = {d.p_value:.2g}, since {g.previous})"
            )
    return "\n".join(lines)


# -- prune (`runner prune`) -----------------------------------------------------------------


def pruned_json(pruned: Pruned, finished_before: datetime, dry_run: bool) -> dict[str, Any]:
    from runner.history import plain

    return {
        "dry_run": dry_run,
        "finished_before": plain(finished_before),
        "runs": pruned.runs,
        "entries": pruned.entries,
        "stop_reasons": dict(pruned.reasons.most_common()),
        "blobs": pruned.blobs,
        "blob_bytes": pruned.blob_bytes,
    }


def pruned_line(pruned: Pruned, finished_before: datetime, dry_run: bool) -> str:
    verb = "would remove" if dry_run else "removed"
    when = finished_before.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    detail = ", ".join(f"{reason} {n}" for reason, n in pruned.reasons.most_common())
    return (
        f"{verb} {plural(pruned.runs, 'run')} finished before {when}"
        + (f" ({detail})" if detail else "")
        + f" and {pruned.entries} journal {'entry' if pruned.entries == 1 else 'entries'}"
        + (
            f", and {plural(pruned.blobs, 'blob')} ({pruned.blob_bytes:,} bytes)"
            if pruned.blobs
            else ""
        )
    )


# -- queues (`runner queue list`) -----------------------------------------------------------


def queues_table(found: Sequence[QueueInfo]) -> str:
    """Each queue's limit and its runs: queued (ready), delayed, running and waiting."""
    if not found:
        return "no queues"
    return table(
        ("QUEUE", "LIMIT", "QUEUED", "DELAYED", "RUNNING", "WAITING", "KEEPS", "OLDER RELEASES"),
        (
            (
                info.name,
                "-" if info.limit is None else str(info.limit),
                str(info.queued),
                str(info.delayed),
                str(info.running),
                str(info.waiting),
                retention_text(info.keep_seconds, info.keep_runs, short=True),
                info.older_releases,
            )
            for info in found
        ),
        right=(1, 2, 3, 4, 5),
        right_headers=(1, 2, 3, 4, 5),
    )


def retention_text(seconds: float | None, count: int | None, *, short: bool = False) -> str:
    """What a queue keeps: `finished runs for 30d, the newest 1000`, or `-` / `every run`."""
    rules = []
    if seconds is not None:
        rules.append(f"{_span(seconds)}" if short else f"finished runs kept {_span(seconds)}")
    if count is not None:
        newest = f"the newest {count} finished run{'' if count == 1 else 's'} kept"
        rules.append(f"newest {count}" if short else newest)
    if not rules:
        return "-" if short else "every finished run kept"
    return ", ".join(rules)


def _span(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def queue_json(info: QueueInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "limit": info.limit,
        "queued": info.queued,
        "delayed": info.delayed,
        "running": info.running,
        "waiting": info.waiting,
        "keep_seconds": info.keep_seconds,
        "keep_runs": info.keep_runs,
        "older_releases": info.older_releases,
    }


# -- schedules (`runner schedule list`, `fire`) ------------------------------------------------


def tick_time(at: datetime | None, zone: str) -> str:
    """A schedule's time as its user reads it, everywhere the same: in the schedule's own
    zone (the one its cron is read in), to the minute, the zone named:
    `2026-12-07 07:00 Europe/Paris`."""
    if at is None:
        return "-"
    try:
        local = at.astimezone(ZoneInfo(zone))
    except (ZoneInfoNotFoundError, ValueError):  # stored before a zone went away: UTC
        local, zone = at.astimezone(UTC), "UTC"
    return f"{local:%Y-%m-%d %H:%M} {zone}"


def schedules_table(found: Sequence[ScheduleRow]) -> str:
    """Each schedule: when, where its runs go, its rules, its next tick and its last."""
    if not found:
        return "no schedules"
    return table(
        ("SCHEDULE", "CRON", "ZONE", "QUEUE", "CATCH-UP", "OVERLAP", "NEXT TICK", "LAST"),
        (
            (
                row.name,
                row.cron,
                row.timezone,
                row.queue,
                row.catch_up,
                row.overlap,
                "paused" if row.paused else tick_time(row.next_tick_at, row.timezone),
                _last(row),
            )
            for row in found
        ),
    )


def _last(row: ScheduleRow) -> str:
    if row.last_tick_at is None:
        return "-"
    did = f"skipped ({row.last_skip})" if row.last_skip else (row.last_run_id or "-")
    return f"{tick_time(row.last_tick_at, row.timezone)} {did}"


def schedule_json(row: ScheduleRow) -> dict[str, Any]:
    from runner.history import plain

    return {name: plain(getattr(row, name)) for name in row.__dataclass_fields__}


def fired_line(tick: Fired, zone: str) -> str:
    when = tick_time(tick.tick, zone)
    if tick.run_id is not None:
        return f"schedule {tick.schedule}: tick {when} started run {tick.run_id}"
    return f"schedule {tick.schedule}: tick {when} skipped ({tick.skipped})"


def fired_json(tick: Fired) -> dict[str, Any]:
    return {
        "schedule": tick.schedule,
        "tick": tick.tick.astimezone(UTC).isoformat(),
        "run_id": tick.run_id,
        "skipped": tick.skipped,
    }


# -- limits (`runner limit list`) ------------------------------------------------------------


def _of(used: int, most: int | None) -> str:
    return f"{used:,}" if most is None else f"{used:,}/{most:,}"


def limits_table(found: Sequence[LimitInfo]) -> str:
    """Each limit's use over the last minute against its settings, and what is left."""
    if not found:
        return "no limits"
    return table(
        ("LIMIT", "TOKENS/MIN", "LEFT", "REQUESTS/MIN", "LEFT", "IN FLIGHT", "WAITING", "BACKOFF"),
        (
            (
                info.name,
                _of(info.tokens, info.tokens_per_minute),
                "-" if info.tokens_left is None else f"{info.tokens_left:,}",
                _of(info.requests, info.requests_per_minute),
                "-" if info.requests_left is None else f"{info.requests_left:,}",
                _of(info.in_flight, info.concurrency),
                str(info.waiting),
                "-"
                if info.backoff_until is None
                else info.backoff_until.astimezone(UTC).strftime("%H:%M:%S UTC"),
            )
            for info in found
        ),
        right=(1, 2, 3, 4, 5, 6),
        right_headers=(1, 2, 3, 4, 5, 6),
    )


def limit_json(info: LimitInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "tokens_per_minute": info.tokens_per_minute,
        "requests_per_minute": info.requests_per_minute,
        "concurrency": info.concurrency,
        "tokens": info.tokens,
        "tokens_left": info.tokens_left,
        "requests": info.requests,
        "requests_left": info.requests_left,
        "in_flight": info.in_flight,
        "waiting": info.waiting,
        "backoff_until": None
        if info.backoff_until is None
        else info.backoff_until.astimezone(UTC).isoformat(),
    }
