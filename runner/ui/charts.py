"""The page's charts, drawn on the server: geometry here, SVG markup in the templates.

Computing positions in Python and writing the markup in a template keeps every label that
comes from the database (an agent's name, a release) inside the template's autoescape.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from runner.history import Group, StepCounters

# Stop reasons in the order a legend lists them: answers first, then budgets, then failures.
ORDER = (
    "final",
    "max_steps",
    "token_budget",
    "cost_budget",
    "time_budget",
    "repeated_call",
    "tool_errors",
    "model_error",
    "cancelled",
    "crash_loop",
)


@dataclass(frozen=True)
class Segment:
    reason: str
    x: float
    width: float
    count: int
    percent: float
    flagged: bool


@dataclass(frozen=True)
class Bar:
    label: str
    y: float
    runs: int
    segments: list[Segment]
    flagged: list[str]


@dataclass(frozen=True)
class StopChart:
    width: int
    height: int
    label_width: int
    bar_width: int
    bar_height: int
    bars: list[Bar]
    legend: list[str] = field(default_factory=list)


def stop_chart(groups: Sequence[Group], *, bar_width: int = 560) -> StopChart:
    """One bar per group, 100% wide, a segment per stop reason; rises flagged."""
    label_width, bar_height, gap = 220, 22, 10
    seen = {s.stop_reason for g in groups for s in g.shares}
    legend = [r for r in ORDER if r in seen] + sorted(seen - set(ORDER))
    bars = []
    for i, group in enumerate(groups):
        shares = {s.stop_reason: s for s in group.shares}
        flagged = {r.stop_reason for r in group.rises}
        x = 0.0
        segments = []
        for reason in legend:
            share = shares.get(reason)
            if share is None:
                continue
            width = bar_width * share.percent / 100.0
            segments.append(
                Segment(reason, x, width, share.count, share.percent, reason in flagged)
            )
            x += width
        bars.append(Bar(group.label, i * (bar_height + gap), group.runs, segments, sorted(flagged)))
    height = max(1, len(bars)) * (bar_height + gap)
    # Room right of the bars for "N runs ▲ reason, reason".
    return StopChart(
        label_width + bar_width + 260, height, label_width, bar_width, bar_height, bars, legend
    )


@dataclass(frozen=True)
class CounterChart:
    width: int
    height: int
    points: str  # the polyline of tokens over steps
    errors: list[float]  # x of each step that ended with a failed-step streak
    steps: int
    tokens: int


def counter_chart(
    counters: Sequence[StepCounters], *, width: int = 480, height: int = 60, most: int = 400
) -> CounterChart | None:
    """Tokens spent over the steps (at most `most` points), and the steps that failed."""
    if not counters:
        return None
    last = counters[-1]
    stride = max(1, len(counters) // most)
    chosen = list(counters[::stride])
    if chosen[-1] is not last:
        chosen.append(last)
    top = max(1, last.tokens)
    span = max(1, last.step - counters[0].step)

    def x(step: int) -> float:
        return round((step - counters[0].step) * width / span, 1)

    points = " ".join(f"{x(c.step)},{round(height - c.tokens * height / top, 1)}" for c in chosen)
    errors = [x(c.step) for c in counters if c.error_streak > 0][:most]
    return CounterChart(width, height, points, errors, last.step, last.tokens)
