"""The `staircase` command's terminal report, from its typed result alone.

A document saved before its run finished may lack what a line needs (the opening document has no
verdict yet); such a line raises `NotRecorded` (a KeyError), and `show` then gives the short
rendering instead of a report with holes in it."""

from __future__ import annotations

from rich.text import Text

from collections.abc import Sequence
from typing import TypeVar

from rich.console import RenderableType

from servecheck.model.bodies.common import Finding, RequestRef
from servecheck.model.bodies.staircase import Point, StaircaseBody
from servecheck.model.readings import RunReading, StaircasePointReading
from servecheck.model.result import RunResult
from servecheck.report.lines import register
from servecheck.report.lines.short import DASH, num, table
from servecheck.report.lines.staircase_html import section
from servecheck.report.lines.text import carried_lines, client_lines

T = TypeVar("T")

_EVIDENCE_WORDS = {"completion_times": "finish times", "generation_windows": "generation windows",
                   "server_gauges": "server gauges", "server_timings": "server timings"}


class NotRecorded(KeyError):
    """The document lacks a field the report cannot do without."""


def _need(value: T | None, name: str) -> T:
    if value is None:
        raise NotRecorded(name)
    return value


def fmt_finishes(finish_s: Sequence[float]) -> str:
    """Seed-000 shape: '5.5 / 11.1 / 16.8 / 22.5 s' (two decimals when everything is under 10 s)."""
    if not finish_s:
        return "no request finished"
    digits = 2 if max(finish_s) < 10 else 1
    return " / ".join(f"{t:.{digits}f}" for t in finish_s) + " s"


def fmt_aggregate(point: Point) -> str:
    agg = point.aggregate_tok_s
    if agg is None:
        return "aggregate -"
    text = f"aggregate {agg:.1f} tok/s"
    rng = point.aggregate_range_tok_s
    if rng and len(point.batches) > 1:
        text += f" ({rng[0]:.1f}-{rng[1]:.1f})"
    if point.aggregate_client_bound and point.aggregate_client_error_frac is not None:
        text += f" CLIENT-BOUND +-{point.aggregate_client_error_frac:.1%}"
    return text


def point_line(point: Point, finish_width: int = 0) -> str:
    n = f"N={_need(point.n, 'n')}"
    finish = fmt_finishes(point.finish_s).ljust(finish_width)
    taken = point.reps_taken
    reps = f"  ({taken} reps)" if taken is not None and taken > 1 else ""
    return f"{n:<5} finish at {finish}  {fmt_aggregate(point)}  {_need(point.verdict, 'verdict')}{reps}"


def evidence_words(point: Point) -> str | None:
    """'decided by finish times + server gauges' for a definite point; None when nothing decided."""
    if not point.evidence or point.n == 1:
        return None
    return "decided by " + " + ".join(_EVIDENCE_WORDS.get(e, e) for e in point.evidence)


def deciding_line(point: Point) -> str | None:
    """The numbers behind a verdict: steps against the single time, spread, last / single, groups."""
    if point.n == 1 or not point.batches:
        return None
    v = _need(point.batches[-1].verdict, "verdict")
    if not v.step_ratios:
        return f"      {_need(point.reason, 'reason')}"
    steps = ", ".join(f"{r:.2f}" for r in v.step_ratios)
    groups = "+".join(str(s) for s in v.group_sizes)
    first = "" if v.first_over_single is None else f"first {v.first_over_single:.2f} · "
    line = (
        f"      steps {steps} x single · spread {_need(v.spread_ratio, 'spread_ratio'):.2f} x single · "
        f"{first}last {_need(v.last_over_single, 'last_over_single'):.2f} x single · group sizes {groups}"
    )
    if (by := evidence_words(point)) is not None:
        line += f" · {by}"
    if point.verdict == "inconclusive" or "completion_times" not in (point.evidence or ("completion_times",)):
        line += f" · {_need(point.reason, 'reason')}"
    return line


def header_lines(run: RunResult[StaircaseBody]) -> list[str]:
    server, params = run.body.server, run.envelope.params
    url = server.url if server is not None and server.url is not None else params.get("url", "?")
    dialect = server.dialect if server is not None and server.dialect is not None else "?"
    model = (server.model if server is not None else None) or "?"
    lines = [
        f"staircase  {url}  api {dialect}  model {model}",
        f"{params.get('tokens')} tokens per request, {params.get('prompt_tokens')}-token prompts, "
        f"{params.get('reps')} rep(s) per N",
    ]
    single, times = run.body.single_s, run.body.single_times_s
    if single is not None:
        each = f", median of {' / '.join(f'{t:.2f}' for t in times)} s" if len(times) > 1 else ""
        lines.append(f"single-request time {single:.2f} s (N=1{each})")
    return lines


def _read(body: StaircaseBody, reading: RunReading) -> list[tuple[Point, StaircasePointReading]]:
    """Each point beside what the analysis read off its reps (`analysis.readings.read_point`)."""
    return list(zip(body.points, reading.staircase, strict=True))


def queue_lines(body: StaircaseBody, reading: RunReading) -> list[str]:
    lines = []
    for point, read in _read(body, reading):
        queue = read.queue_s
        if _need(point.n, "n") > 1 and queue:
            lines.append(f"N={point.n:<3} queue time (client latency - server prefill - decode): {fmt_finishes(queue)}")
    return lines


def witness_lines(body: StaircaseBody, reading: RunReading) -> list[str]:
    """Per N, what the server's gauges showed (peaks, medians over reps) and Little's law."""
    lines = []
    for point, read in _read(body, reading):
        if point.n == 1 or not point.batches:
            continue
        gauges = [b.gauges for b in point.batches if b.gauges is not None and b.gauges.peak_running is not None]
        little = read.effective_concurrency
        parts = []
        if gauges:
            g = gauges[-1]
            waiting = "" if g.peak_waiting is None else f", waiting up to {g.peak_waiting}"
            parts.append(f"server gauges ({_need(g.source, 'source')}): running up to {g.peak_running}{waiting}")
        if little is not None:
            parts.append(f"effective concurrency {little:.2f} (sum of latencies / wall)")
        if parts:
            lines.append(f"N={_need(point.n, 'n'):<3} " + " · ".join(parts))
    return lines


def trap_lines(body: StaircaseBody, reading: RunReading) -> list[str]:
    """The self-reported sum beside the true aggregate, both medians over the same reps."""
    lines = []
    for point, read in _read(body, reading):
        claimed, true = read.self_reported_sum_tok_s, read.true_aggregate_tok_s
        if _need(point.n, "n") > 1 and claimed is not None and true is not None:
            word = "MISLEADING" if read.self_reported_misleading else "agrees with the aggregate"
            lines.append(
                f"N={point.n:<3} sum of self-reported rates {claimed:.1f} tok/s ({word})  "
                f"vs true aggregate {true:.1f} tok/s"
            )
    return lines


def trend_line(body: StaircaseBody) -> str:
    ratios = "  ".join(f"N={n} {r:.2f}x" for n, r in _need(body.trend_ratios, "trend_ratios").items())
    rule = "" if body.trend_rising_ratio is None else f"; rising from {body.trend_rising_ratio:.2f}x"
    return (f"trend    {_need(body.trend, 'trend')}  agg(N)/agg(1): {ratios or '-'}  "
            f"({_need(body.trend_reason, 'trend_reason')}{rule})")


def finding_lines(body: StaircaseBody) -> list[str]:
    lines = []
    for kind, findings in (("INVALID", body.invalid), ("warning", body.warnings)):
        for f in findings:
            lines.append(f"{kind}: {_need(f.message, 'message')}" + (f" ({f.hint})" if f.hint else ""))
            lines.extend(f"  - {_ref_label(r)}" for r in _refs(f))
    return lines


def _refs(finding: Finding) -> tuple[RequestRef, ...]:
    return _need(finding.requests, "requests")


def _ref_label(r: RequestRef) -> str:
    return f"N={r.n} rep {_need(r.rep, 'rep') + 1} request #{r.index} (nonce {r.nonce}): {r.detail}"


def report_lines(run: RunResult[StaircaseBody], reading: RunReading) -> list[str]:
    """The whole terminal report, from the typed result and what the analysis read off it."""
    body = run.body
    lines = header_lines(run) + [""]
    width = max((len(fmt_finishes(p.finish_s)) for p in body.points), default=0)
    for point in body.points:
        lines.append(point_line(point, width))
        if (extra := deciding_line(point)) is not None:
            lines.append(extra)
    lines += ["", f"verdict  {_need(body.verdict, 'verdict')}  ({_need(body.verdict_reason, 'verdict_reason')})",
              *carried_lines(run.envelope.params), trend_line(body)]
    lines += witness_lines(body, reading)
    lines += queue_lines(body, reading) + trap_lines(body, reading) + client_lines(body.client_checks)
    lines += finding_lines(body) + [f"note: {note}" for note in body.notes]
    if not run.complete:
        lines.append("INCOMPLETE: interrupted; the points above are all that was measured")
    lines.append(f"run {'valid' if _need(run.valid, 'valid') else 'INVALID'}")
    return lines


def report(run: RunResult[StaircaseBody], reading: RunReading) -> list[RenderableType]:
    return [*report_lines(run, reading)]


def short(run: RunResult[StaircaseBody]) -> list[RenderableType]:
    rows = []
    for p in run.body.points:
        # as the staircase report prints them: two decimals while everything is under 10 s
        digits = 2 if max(p.finish_s, default=0.0) < 10 else 1
        finishes = " / ".join(num(t, digits) for t in p.finish_s) or DASH
        rows.append([f"N={num(p.n, 0)}", f"finish at {finishes} s", f"aggregate {num(p.aggregate_tok_s)} tok/s",
                     p.verdict or DASH])
    out: list[RenderableType] = [Text(f"aggregate across N: {run.body.trend or DASH}")]
    return out + [table(["", "", "", ""], rows)]


register("staircase", short=short, lines=report, html=section)
