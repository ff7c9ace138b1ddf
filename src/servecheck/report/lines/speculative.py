"""The `speculative` command's terminal report, from its typed result alone: the seed's shape
("prose: 1.1 tokens per step, 89 tok/s; verbatim repetition: 7.9 tokens per step, 876 tok/s; at N=4 it
costs 18% against the baseline"), then one row per N and prompt kind."""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType

from servecheck.model.bodies.common import Server
from servecheck.model.bodies.speculative import SpeculativeBody, SpeculativePoint, kind_label
from servecheck.model.readings import RunReading
from servecheck.model.result import RunResult
from servecheck.report.lines import register
from servecheck.report.lines.speculative_html import section
from servecheck.report.lines.text import carried_lines, client_lines, invalid_lines

HEADLINE_ORDER = ("unpredictable", "predictable")  # the seed names prose first
BASELINE_ORDER = ("predictable", "unpredictable")  # the kind speculation is for decides the baseline clause


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _span(span: tuple[float, float] | None) -> str:
    return "-" if not span else f"{span[0]:.2f}-{span[1]:.2f}"


def header_lines(body: SpeculativeBody) -> list[str]:
    server = body.server or Server()
    lines = [f"speculative  {server.url or '?'}  api {server.dialect or '?'}  model {server.model or '?'}"]
    if body.baseline is not None:
        lines.append(f"baseline     {body.baseline.url or '?'}  model {body.baseline.model or '?'}")
    ns = ",".join(str(n) for n in body.ns) or "?"
    reps = f"{body.reps if body.reps is not None else '?'} rep(s) per N and prompt kind"
    if body.max_reps is not None and body.reps is not None and body.max_reps > body.reps:
        again = sum(1 for p in body.points if p.extra_reps)
        reps += f", up to {body.max_reps} while pays / costs is undecided ({again} point(s) measured again)"
    lines.append(f"N {ns}; {body.tokens if body.tokens is not None else '?'} tokens per stream (fixed length); {reps}")
    return lines


def _at(body: SpeculativeBody, n: int | None, kind: str) -> SpeculativePoint | None:
    return next((p for p in body.points if p.n == n and p.prompt_kind == kind), None)


def _kind_clause(p: SpeculativePoint) -> str:
    label = kind_label(p.prompt_kind)
    if p.tokens_per_step is None:
        return f"{label}: no tokens per step ({p.reason or 'not grouped'}), {_f(p.per_stream_tok_s, 0)} tok/s"
    return f"{label}: {p.tokens_per_step:.1f} tokens per step, {_f(p.per_stream_tok_s, 0)} tok/s"


def _baseline_clause(body: SpeculativeBody) -> str | None:
    """The N where it stops paying (the run's answer); where it never paid, the first N that costs; where it
    pays throughout, the largest N."""
    for kind in BASELINE_ORDER:
        judged = sorted((p for p in body.points if p.prompt_kind == kind and p.pays is not None),
                        key=lambda p: p.n or 0)
        if not judged:
            continue
        stop = body.stops_paying_n.get(kind)
        costs = [p for p in judged if p.pays == "costs"]
        if stop is not None:
            point = _at(body, stop, kind)
        elif all(p.pays == "pays" for p in judged):
            point = judged[-1]
        else:
            point = costs[0] if costs else judged[0]
        if point is None:
            continue
        return f"at N={point.n} it {_pays_words(point)} against the baseline"
    return None


def _pays_words(p: SpeculativePoint) -> str:
    ratio = p.pays_ratio
    if ratio is None:
        return "is inconclusive"
    if p.pays == "costs":
        return f"costs {1 - ratio:.0%}"
    if p.pays == "pays":
        return f"gains {ratio - 1:.0%}"
    return f"is inconclusive ({ratio - 1:+.0%})"


def headline(body: SpeculativeBody) -> str:
    n0 = min(body.ns) if body.ns else None
    clauses = [_kind_clause(p) for kind in HEADLINE_ORDER if (p := _at(body, n0, kind)) is not None]
    if (tail := _baseline_clause(body)) is not None:
        clauses.append(tail)
    return "; ".join(clauses) if clauses else "no point measured"


def table_lines(body: SpeculativeBody) -> list[str]:
    head = (f"{'N':>3} {'prompt':<20} {'tokens/step':>11} {'95% interval':>12} {'per-stream':>10} {'aggregate':>10} "
            f"{'baseline':>9} {'pays':>12} {'server t/step':>13}")
    lines = [head + "   (rates in tok/s)"]
    for p in body.points:
        label = kind_label(p.prompt_kind)
        lines.append(f"{p.n if p.n is not None else '?':>3} {label:<20} {_f(p.tokens_per_step, 2):>11} "
                     f"{_span(p.tokens_per_step_interval):>12} {_f(p.per_stream_tok_s):>10} "
                     f"{_f(p.aggregate_tok_s):>10} {_f(p.baseline_per_stream_tok_s):>9} {p.pays or '-':>12} "
                     f"{_f(p.server_tokens_per_step, 2):>13}")
    return lines


def detail_lines(body: SpeculativeBody) -> list[str]:
    lines: list[str] = []
    for p in body.points:
        where = f"N={p.n} {kind_label(p.prompt_kind)}"
        lines.append(f"{where}: {p.verdict or '?'} ({p.reason or '-'}); {p.grouped}/{p.streams} streams grouped, "
                     f"{p.steps} steps")
        lines += [f"  grouping: {m}" for m in p.grouping[:1]]
        lines += [f"  not grouped: {why}" for why in p.problems]
        if p.counters_note:
            lines.append(f"  server counters: {p.counters_note}")
        if p.pays_reason:
            lines.append(f"  against the baseline: {p.pays_reason}")
    for kind, why in body.stops_paying_reason.items():
        lines.append(f"{kind_label(kind)}: {why}")
    return lines


def report_lines(run: RunResult[SpeculativeBody]) -> list[str]:
    body = run.body
    lines = header_lines(body) + ["", headline(body), ""] + table_lines(body) + [""] + detail_lines(body)
    lines.append(f"verdict  {body.verdict or '-'}  ({body.verdict_reason or '-'})")
    lines += carried_lines(run.envelope.params)
    if body.expect:
        lines.append(f"expected {body.expect}")
    lines += client_lines(body.client_checks) + invalid_lines(body.invalid)
    lines += [f"note: {n}" for n in body.notes]
    if not run.complete:
        lines.append("INCOMPLETE: interrupted; the points above are all that was measured")
    return lines


def report(run: RunResult[Any], reading: RunReading) -> list[RenderableType]:
    return list(report_lines(run))


register("speculative", lines=report, html=section)
