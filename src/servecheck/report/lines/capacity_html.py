"""The capacity run as a section of the HTML report (`report.html` draws the page around it; the
terminal lines are `report.lines.capacity`, registered beside it)."""

from __future__ import annotations


from servecheck.model.bodies.capacity import CapacityBody, CapacityPoint
from servecheck.model.result import RunResult
from servecheck.model.readings import RunReading
from servecheck.report.svg import (
    Series,
    esc,
    line_chart,
)

from servecheck.report.html_kit import DASH, fmt, fmt_pct, fmt_signed_pct, reason_line, table


def section(run: RunResult[CapacityBody], _: RunReading) -> str:
    """The answer, the probe table, and per-user rate and aggregate against N with the floor drawn."""
    body = run.body
    floor = body.design.min_user_rate_tok_s if body.design is not None else None
    least = body.least_marginal.text if body.least_marginal is not None else None
    parts = [f'<p class="verdict">{esc(body.answer)}</p>' if body.answer else "",
             reason_line(f"limit: {body.limit or DASH}", least),
             "<h3>Probes</h3>", _capacity_table(body.points), _capacity_charts(body.points, floor)]
    drift = body.drift
    if drift is not None and drift.start_tok_s is not None and drift.end_tok_s is not None and drift.change is not None:
        text = (f"drift: serial baseline {drift.start_tok_s:.1f} → {drift.end_tok_s:.1f} tok/s per user "
                f"(start vs end): {drift.change:+.1%}")
        parts.append(f"<h3>Checks</h3><ul><li>{esc(text)}</li></ul>")
    return "\n".join(p for p in parts if p)


def _capacity_table(points: tuple[CapacityPoint, ...]) -> str:
    rows = []
    for p in points:
        rows.append([
            fmt(p.n, 0), fmt(p.per_user_tok_s, 1) + _ci(p.per_user_interval, 1),
            fmt(p.ttft_s, 3) + _ci(p.ttft_interval, 3), fmt(p.aggregate_tok_s, 1),
            fmt(p.marginal_gain_tok_s_per_user, 1), fmt_signed_pct(p.marginal_per_user_change),
            fmt_pct(p.interval_level), f'<span class="label-{esc(p.status or "")}">{fmt(p.status)}</span>',
            fmt(p.reason),
        ])
    headers = ["N", "per-user tok/s", "TTFT s", "aggregate tok/s", "marginal tok/s per added user",
               "marginal per-user change", "interval level", "status", "reason"]
    return table(headers, rows, frozenset(range(7)))


def _ci(interval: tuple[float, float] | None, digits: int) -> str:
    """` [lo, hi]` after a point estimate, when the point has an interval."""
    if interval is None:
        return ""
    return f' <span class="ci">[{fmt(interval[0], digits)}, {fmt(interval[1], digits)}]</span>'


def _capacity_charts(points: tuple[CapacityPoint, ...], floor: float | None) -> str:
    per_user = tuple((float(p.n), p.per_user_tok_s) for p in points if p.n is not None and p.per_user_tok_s is not None)
    aggregate = tuple((float(p.n), p.aggregate_tok_s) for p in points
                      if p.n is not None and p.aggregate_tok_s is not None)
    if not per_user and not aggregate:
        return ""
    series = [Series("per-user rate tok/s", per_user, "secondary")] if per_user else []
    if floor is not None and per_user:
        xs = [x for x, _ in per_user]
        series.append(Series(f"floor {floor:g} tok/s", ((min(xs), floor), (max(xs), floor)), "s4"))
    charts = [line_chart(series, title="Per-user rate against N (floor in red)", x_label="users in flight (N)",
                         y_label="tok/s")] if series else []
    if aggregate:
        charts.append(line_chart([Series("aggregate tok/s", aggregate, "primary")], title="Aggregate against N",
                                 x_label="users in flight (N)", y_label="tok/s"))
    return "\n".join(charts)
