"""The speculative run as a section of the HTML report (`report.html` draws the page around it; the
terminal lines are `report.lines.speculative`, registered beside it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from servecheck.model.bodies.speculative import SpeculativeBody, SpeculativePoint
from servecheck.model.result import RunResult
from servecheck.model.readings import RunReading
from servecheck.report.svg import (
    Series,
    esc,
    line_chart,
)

from servecheck.report.html_kit import fmt, fmt_range, reason_line, table, verdict_line


_SPEC_KINDS = (("unpredictable", "prose"), ("predictable", "verbatim repetition"))


def section(run: RunResult[SpeculativeBody], _: RunReading) -> str:
    """Tokens per step and the per-stream rate against N, one line per prompt kind, and the table."""
    body = run.body
    parts = [verdict_line("Speculative decoding", body.verdict), reason_line(body.verdict_reason),
             _spec_chart(body.points, lambda p: p.tokens_per_step, "Tokens per step against N", "tokens per step"),
             _spec_chart(body.points, lambda p: p.per_stream_tok_s, "Per-stream decode rate against N", "tok/s"),
             "<h3>By N and prompt kind</h3>", _spec_table(body.points)]
    stops = [f"{kind}: {why}" for kind, why in body.stops_paying_reason.items()]
    notes = [f"N={fmt(p.n, 0)} {fmt(p.prompt_kind)}: {fmt(p.counters_note)}" for p in body.points if p.counters_note]
    notes += [f"N={fmt(p.n, 0)} {fmt(p.prompt_kind)} not grouped: {why}" for p in body.points for why in p.problems]
    items = stops + notes + list(body.notes)
    if items:
        parts.append("<h3>Checks</h3><ul>" + "".join(f"<li>{esc(line)}</li>" for line in items) + "</ul>")
    return "\n".join(p for p in parts if p)


def _spec_chart(points: Sequence[SpeculativePoint], value: Callable[[SpeculativePoint], float | None], title: str,
                y_label: str) -> str:
    series = []
    for k, (kind, label) in enumerate(_SPEC_KINDS):
        pts = tuple(sorted((float(p.n), v) for p in points if p.prompt_kind == kind and p.n is not None
                           and (v := value(p)) is not None))
        if pts:
            series.append(Series(label, pts, "primary" if k == 0 else "secondary"))
    return line_chart(series, title=title, x_label="N (streams at once)", y_label=y_label) if series else ""


def _spec_table(points: Sequence[SpeculativePoint]) -> str:
    rows = [[fmt(p.n, 0), fmt(p.prompt_kind), fmt(p.tokens_per_step, 2), fmt_range(p.tokens_per_step_interval, 2),
             fmt(p.per_stream_tok_s, 1), fmt(p.aggregate_tok_s, 1), fmt(p.baseline_per_stream_tok_s, 1), fmt(p.pays),
             fmt(p.server_tokens_per_step, 2), fmt(p.verdict)] for p in points]
    headers = ["N", "prompt kind", "tokens per step", "95% interval", "per-stream tok/s", "aggregate tok/s",
               "baseline tok/s", "pays", "server tokens per step", "verdict"]
    return table(headers, rows, frozenset({0, 2, 3, 4, 5, 6, 8}))
