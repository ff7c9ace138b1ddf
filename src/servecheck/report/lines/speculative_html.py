"""The speculative run as a section of the HTML report (`report.html` draws the page around it; the
terminal lines are `report.lines.speculative`, registered beside it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from servecheck.model.bodies.speculative import KIND_LABELS, SpeculativeBody, SpeculativePoint, kind_label
from servecheck.model.result import RunResult
from servecheck.model.readings import RunReading
from servecheck.report.svg import (
    Series,
    esc,
    line_chart,
)

from servecheck.report.html_kit import fmt, fmt_range, reason_line, table, verdict_line


# The chart's lines in the order drawn (open-ended prose the primary line), named as the table names them.
_SPEC_KINDS = ("unpredictable", "predictable")


def section(run: RunResult[SpeculativeBody], _: RunReading) -> str:
    """Tokens per step and the per-stream rate against N, one line per prompt kind, and the table."""
    body = run.body
    parts = [verdict_line("Speculative decoding", body.verdict), reason_line(body.verdict_reason),
             _spec_chart(body.points, lambda p: p.tokens_per_step, "Tokens per step against N", "tokens per step"),
             _spec_chart(body.points, lambda p: p.per_stream_tok_s, "Per-stream decode rate against N", "tok/s"),
             "<h3>By N and prompt kind</h3>", _spec_table(body.points)]
    checks = _checks(body)
    if checks:
        parts.append("<h3>Checks</h3><ul>" + "".join(f"<li>{esc(line)}</li>" for line in checks) + "</ul>")
    return "\n".join(p for p in parts if p)


def _checks(body: SpeculativeBody) -> list[str]:
    """The checks as plain text, escaped once where the page writes them. The run's notes are not
    among them: the page lists every run's notes under its own heading."""
    checks = [f"{kind_label(kind)}: {why}" for kind, why in body.stops_paying_reason.items()]
    checks += [f"{_where(p)}: {p.counters_note}" for p in body.points if p.counters_note]
    checks += [f"{_where(p)} not grouped: {why}" for p in body.points for why in p.problems]
    return checks


def _where(p: SpeculativePoint) -> str:
    return f"N={p.n if p.n is not None else '?'} {kind_label(p.prompt_kind)}"


def _spec_chart(points: Sequence[SpeculativePoint], value: Callable[[SpeculativePoint], float | None], title: str,
                y_label: str) -> str:
    series = []
    for k, kind in enumerate(_SPEC_KINDS):
        pts = tuple(sorted((float(p.n), v) for p in points if p.prompt_kind == kind and p.n is not None
                           and (v := value(p)) is not None))
        if pts:
            series.append(Series(KIND_LABELS[kind], pts, "primary" if k == 0 else "secondary"))
    return line_chart(series, title=title, x_label="N (streams at once)", y_label=y_label) if series else ""


def _spec_table(points: Sequence[SpeculativePoint]) -> str:
    rows = [[fmt(p.n, 0), esc(kind_label(p.prompt_kind)), fmt(p.tokens_per_step, 2),
             fmt_range(p.tokens_per_step_interval, 2), fmt(p.per_stream_tok_s, 1), fmt(p.aggregate_tok_s, 1),
             fmt(p.baseline_per_stream_tok_s, 1), fmt(p.pays), fmt(p.server_tokens_per_step, 2),
             fmt(p.verdict)] for p in points]
    headers = ["N", "prompt kind", "tokens per step", "95% interval", "per-stream tok/s", "aggregate tok/s",
               "baseline tok/s", "pays", "server tokens per step", "verdict"]
    return table(headers, rows, frozenset({0, 2, 3, 4, 5, 6, 8}))
