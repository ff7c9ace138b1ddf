"""The `interference` command's terminal report, from its typed result alone: the seed's sentence ("an
8,192-token prompt froze both other streams for 2.4 s (blocking); ..."), one row per prompt size, what
decided the verdict, and the witness beside it."""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType

from servecheck.model.bodies.common import Server
from servecheck.model.bodies.interference import InterferenceBody, InterferencePoint
from servecheck.model.readings import RunReading
from servecheck.model.result import RunResult
from servecheck.report.lines import register
from servecheck.report.lines.interference_html import section
from servecheck.report.lines.text import carried_lines, client_lines, invalid_lines


def _f(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def header_lines(body: InterferenceBody) -> list[str]:
    server = body.server or Server()
    sizes = ",".join(str(s) for s in body.prompt_sizes) or "?"
    return [f"interference  {server.url or '?'}  api {server.dialect or '?'}  model {server.model or '?'}",
            f"{body.streams if body.streams is not None else '?'} victim stream(s) of {body.tokens or '?'} tokens; "
            f"intruders of {sizes} prompt tokens; {body.reps if body.reps is not None else '?'} rep(s), sizes rotated"]


def _row(p: InterferencePoint) -> str:
    mark = "" if p.valid else "  INVALID"
    tps = "-" if p.prefill_tok_s is None else f"{p.prefill_tok_s:,.0f}"
    return (f"{p.prompt_tokens if p.prompt_tokens is not None else '?':>8} {_f(p.baseline_interval_s):>9} "
            f"{_f(p.victim_max_gap_s):>9} {_f(p.victim_p99_gap_s):>9} {_f(p.step_gap_s):>9} "
            f"{_f(p.stretched, 0):>9} {_f(p.victim_lost_s):>9} {_f(p.intruder_ttft_s):>9} {tps:>10} "
            f"{_f(p.chunk_tokens, 0):>7}{mark}")


def table_lines(body: InterferenceBody) -> list[str]:
    head = (f"{'S tokens':>8} {'baseline':>9} {'max gap':>9} {'p99 gap':>9} {'step':>9} {'stretched':>9} {'lost':>9} "
            f"{'TTFT':>9} {'prefill/s':>10} {'chunk':>7}")
    return [head + "   (seconds; gaps are the victims' during the intruder's prefill)"] + [_row(p) for p in body.points]


def detail_lines(body: InterferenceBody) -> list[str]:
    lines = [f"S={p.prompt_tokens}: {why}" for p in body.points for why in p.problems]
    lines += [f"S={s.prompt_tokens} skipped: {s.reason}" for s in body.skipped]
    if body.chunk_tokens is not None and body.chunk_interval:
        lo, hi = body.chunk_interval
        lines.append(f"chunk  about {body.chunk_tokens:,.0f} tokens a step ({lo:,.0f}-{hi:,.0f})")
    if body.witness is not None and body.witness.note:
        lines.append(f"witness  {body.witness.note}")
    return lines


def report_lines(run: RunResult[InterferenceBody]) -> list[str]:
    body = run.body
    lines = header_lines(body) + ["", str(body.sentence or "no point measured"), ""] + table_lines(body) + [""]
    lines += detail_lines(body)
    lines.append(f"verdict  {body.verdict or '-'}  (decided by {body.decided_by or '-'}: {body.verdict_reason or '-'})")
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


register("interference", lines=report, html=section)
