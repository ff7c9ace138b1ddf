"""The context run as a section of the HTML report (`report.html` draws the page around it; the
terminal lines are `report.lines.context`, registered beside it)."""

from __future__ import annotations

from collections.abc import Sequence

from servecheck.model.bodies.context import ContextBody, ContextDrift, ContextPoint, ContextRooflineRow
from servecheck.model.result import RunResult
from servecheck.model.readings import RunReading
from servecheck.report.svg import (
    Series,
    esc,
    line_chart,
)

from servecheck.report.html_kit import fmt_gb, fmt, fmt_range, fmt_ratio, reason_line, table, verdict_line


def section(run: RunResult[ContextBody], _: RunReading) -> str:
    """Decode rate against depth (measured, and predicted at constant utilization with a model), the table by depth."""
    body = run.body
    roof = {r.depth: r for r in body.roofline or ()}
    parts = [verdict_line("Context effect", body.effect), reason_line(body.effect_reason),
             _context_chart(body.points, tuple(roof.values())), "<h3>By depth</h3>", _context_table(body.points, roof)]
    drift = body.drift or ContextDrift()
    first, last, change = drift.first_tok_s, drift.last_tok_s, drift.change
    if first is not None and last is not None and change is not None:
        parts.append(f"<h3>Checks</h3><ul><li>"
                     f"{esc(f'drift: shallowest depth {first:.1f} → {last:.1f} tok/s (first vs last): {change:+.1%}')}"
                     "</li></ul>")
    skipped = [f"depth {fmt(s.depth, 0)} skipped: {fmt(s.reason)}" for s in body.skipped]
    if skipped:
        parts.append("<ul>" + "".join(f"<li>{line}</li>" for line in skipped) + "</ul>")
    return "\n".join(p for p in parts if p)


def _context_chart(points: Sequence[ContextPoint], roof: Sequence[ContextRooflineRow]) -> str:
    measured = tuple((float(p.depth), p.decode_tok_s) for p in points
                     if p.depth is not None and p.decode_tok_s is not None)
    if not measured:
        return ""
    series = [Series("measured decode tok/s", measured, "primary")]
    predicted = tuple((float(r.depth), r.predicted_tok_s) for r in roof
                      if r.depth is not None and r.predicted_tok_s is not None)
    if predicted:
        series.append(Series("predicted at constant utilization", predicted, "secondary"))
    return line_chart(series, title="Decode rate against context depth", x_label="context depth (prompt tokens)",
                      y_label="tok/s")


def _context_table(points: Sequence[ContextPoint], roof: dict[int | None, ContextRooflineRow]) -> str:
    rows = []
    for p in points:
        r = roof.get(p.depth) or ContextRooflineRow()
        rows.append([fmt(p.depth, 0), fmt(p.context_tokens, 0), fmt(p.ttft_s, 3), fmt(p.prefill_tok_s, 1),
                     fmt(p.decode_tok_s, 1), fmt_ratio(p.ratio), fmt(r.predicted_tok_s, 1),
                     fmt_ratio(r.measured_over_predicted), fmt_gb(r.bytes_per_token),
                     fmt(r.achieved_gb_s, 2), fmt_range(r.utilization, 0, 100, "%"),
                     "valid" if p.valid is not False else "INVALID"])
    headers = ["depth", "context tokens", "TTFT s", "prefill tok/s", "decode tok/s", "ratio", "predicted tok/s",
               "measured/predicted", "bytes per token", "achieved GB/s", "utilization", ""]
    return table(headers, rows, frozenset(range(11)))
