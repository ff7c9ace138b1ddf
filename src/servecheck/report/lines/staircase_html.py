"""The staircase run as a section of the HTML report (`report.html` draws the page around it; the
terminal lines are `report.lines.staircase`, registered beside it)."""

from __future__ import annotations

from collections.abc import Sequence

from servecheck.model.bodies.common import Request
from servecheck.model.bodies.staircase import Batch as StaircaseBatch
from servecheck.model.bodies.staircase import Point as StaircasePoint
from servecheck.model.bodies.staircase import StaircaseBody
from servecheck.model.result import RunResult
from servecheck.model.readings import RunReading, StaircasePointReading
from servecheck.report.svg import (
    Segment,
    Series,
    TimelineRow,
    esc,
    line_chart,
    timeline_chart,
)

from servecheck.report.html_kit import DASH, excerpt, fmt, fmt_ratio, reason_line, table, verdict_line


def section(run: RunResult[StaircaseBody], reading: RunReading) -> str:
    return staircase_section(run.body, reading.staircase)


def staircase_section(body: StaircaseBody, readings: Sequence[StaircasePointReading],
                      x_max: float | None = None) -> str:
    points = body.points
    parts = [
        verdict_line("Verdict", body.verdict, f"· aggregate across N: <b>{fmt(body.trend)}</b>" + _ratio_note(points)),
        reason_line(body.verdict_reason, body.trend_reason),
        "<h3>Completion times</h3>",
        _single_note(body),
        table(
            ["N", "finish at (s from release)", "aggregate tok/s", "verdict", "decided by", "reps",
             "sum of self-reported rates"],
            [[fmt(p.n, 0), _finishes(p), fmt(p.aggregate_tok_s, 1), fmt(p.verdict), _evidence(p), fmt(p.reps_taken, 0),
              _self_reported_sum(p, read)]
             for p, read in zip(points, _aligned(readings, points))],
            numeric=frozenset({0, 2, 5, 6}),
        ),
        _timeline_charts(points, x_max),
        _throughput_chart(points, readings),
        _requests_details(points),
    ]
    return "\n".join(p for p in parts if p)


def _aligned(readings: Sequence[StaircasePointReading],
             points: Sequence[StaircasePoint]) -> Sequence[StaircasePointReading | None]:
    """One reading per point; none where the caller read nothing (a partial run's reading may lag its points)."""
    return readings if len(readings) == len(points) else [None] * len(points)


_EVIDENCE_NAMES = {"completion_times": "finish times", "server_gauges": "server gauges",
                   "server_timings": "server timings"}


def _evidence(point: StaircasePoint) -> str:
    """What decided a point, as the analysis recorded it; an old document says it was not recorded."""
    if point.n == 1:
        return DASH
    if point.evidence is None:
        return "not recorded"
    names = [_EVIDENCE_NAMES.get(e, e) for e in point.evidence]
    return esc(" + ".join(names)) if names else DASH


def _single_note(body: StaircaseBody) -> str:
    single, times = body.single_s, body.single_times_s
    if single is None:
        return ""
    each = (f", the median of {' / '.join(f'{t:.2f}' for t in times)} s measured before and after"
            if len(times) > 1 else "")
    return (f'<p class="key">Single-request time {esc(f"{single:.2f}")} s (N=1{esc(each)}). '
            'A queue finishes one request per '
            "single-request time; the aggregate is tokens produced / last finish, nothing the server reports.</p>")


def _self_reported_sum(point: StaircasePoint, read: StaircasePointReading | None) -> str:
    """The sum the seed warns about (each request's own rate, added up), beside the true aggregate: the
    reading's median over the reps that have both, and whether it misleads there."""
    if read is None or read.self_reported_sum_tok_s is None or read.true_aggregate_tok_s is None or point.n == 1:
        return DASH
    if read.self_reported_misleading:
        return f'<span class="misleading">{fmt(read.self_reported_sum_tok_s, 1)} (misleading)</span>'
    return f"{fmt(read.self_reported_sum_tok_s, 1)} (agrees)"


def _ratio_note(points: Sequence[StaircasePoint]) -> str:
    aggs = [(p.n, p.aggregate_tok_s) for p in points if p.n is not None and p.aggregate_tok_s is not None]
    base = next((a for n, a in aggs if n == 1), None)
    if not base or len(aggs) < 2:
        return ""
    n_max, a_max = max(aggs)
    return f" (agg({fmt(n_max, 0)}) / agg(1) = {fmt_ratio(a_max / base)})"


def _finishes(point: StaircasePoint) -> str:
    # seed-000 shape: one decimal for runs of seconds, two when everything is under 10 s
    digits = 2 if max(point.finish_s, default=0.0) < 10 else 1
    shown = [f"{v:.{digits}f}" for v in point.finish_s]
    return esc(" / ".join(shown)) if shown else DASH


def _first_batch(point: StaircasePoint) -> StaircaseBatch | None:
    return point.batches[0] if point.batches else None


def _timeline_charts(points: Sequence[StaircasePoint], shared_x_max: float | None = None) -> str:
    lanes = [(p, _lanes(p)) for p in points]
    lanes = [(p, rows) for p, rows in lanes if rows]
    if not lanes:
        return ""
    x_max = shared_x_max or lanes_end(points)
    charts = []
    for point, rows in lanes:
        reps = len(point.batches)
        note = f" (rep 1 of {reps})" if reps > 1 else ""
        charts.append(timeline_chart(rows, x_max, title=f"N={fmt(point.n, 0)}{note}", x_label="seconds from release"))
    key = ('<p class="key">Each request is one lane:<i class="wait"></i>sent, waiting for its first token'
           '<i class="gen"></i>generating<i class="fail"></i>failed. A staircase means the server queued them; '
           "a cluster means it ran them together.</p>")
    return key + "".join(charts)


def lanes_end(points: Sequence[StaircasePoint]) -> float:
    """The last finish over every lane drawn: one time axis for all charts, so steps compare by eye."""
    return max((seg.end for p in points for row in _lanes(p) for seg in row.segments), default=0.0)


def _lanes(point: StaircasePoint) -> list[TimelineRow]:
    batch = _first_batch(point)
    if batch is None:
        return _lanes_from_finishes(point)
    release = batch.release_s or 0.0
    requests = sorted(batch.requests, key=lambda r: r.send_s or 0.0)
    return [row for row in (_lane(r, release) for r in requests) if row is not None]


def _lane(req: Request, release: float) -> TimelineRow | None:
    send, first, end = req.send_s, req.first_token_s, req.end_s
    if send is None or end is None:
        return None
    send, end = send - release, end - release
    failed = not req.ok
    segments: tuple[Segment, ...]
    if failed or first is None:
        segments = (Segment(send, end, "fail" if failed else "gen"),)
    else:
        segments = (Segment(send, first - release, "wait"), Segment(first - release, end, "gen"))
    index = _or_unknown(req.index)
    title = (f"request {index}: sent {send:.2f} s, first token "
             f"{'—' if first is None else f'{first - release:.2f} s'}, finished {end:.2f} s, "
             f"{_or_unknown(req.tokens)} tokens, {_or_unknown(req.status)}")
    return TimelineRow(label=f"#{index}", segments=segments, title=title)


def _or_unknown(value: object) -> str:
    return "?" if value is None else str(value)


def _lanes_from_finishes(point: StaircasePoint) -> list[TimelineRow]:
    return [
        TimelineRow(label=f"{i + 1}", segments=(Segment(0.0, f, "gen"),), title=f"finished {f:.2f} s")
        for i, f in enumerate(point.finish_s)
    ]


def _throughput_chart(points: Sequence[StaircasePoint], readings: Sequence[StaircasePointReading]) -> str:
    agg = tuple((float(p.n), p.aggregate_tok_s) for p in points if p.n is not None and p.aggregate_tok_s is not None)
    if not agg:
        return ""
    series = [Series("aggregate tok/s", agg, "primary")]
    # the median over each point's requests of their stream rates, as the run's reading holds it
    rates = [r.per_user_rate_tok_s if r is not None else None for r in _aligned(readings, points)]
    per_user = tuple((float(p.n), rate) for p, rate in zip(points, rates) if p.n is not None and rate is not None)
    if per_user:
        series.append(Series("per-user rate tok/s", per_user, "secondary"))
    return line_chart(series, title="Throughput against N", x_label="concurrent requests (N)", y_label="tok/s")


def _requests_details(points: Sequence[StaircasePoint]) -> str:
    rows = []
    for p in points:
        batch = _first_batch(p)
        if batch is None:
            continue
        release = batch.release_s or 0.0
        for req in batch.requests:
            end = req.end_s
            rows.append([
                fmt(p.n, 0), fmt(req.index, 0), fmt(req.status), fmt(req.tokens, 0),
                fmt(req.ttft_s, 3), fmt(None if end is None else end - release, 2), excerpt(req.text),
            ])
    if not rows:
        return ""
    headers = ["N", "request", "status", "tokens", "TTFT s", "finish s", "generated text (start)"]
    return ("<details><summary>Requests (first rep of each N)</summary>"
            + table(headers, rows, frozenset({0, 1, 3, 4, 5})) + "</details>")
