"""The `capacity` command's terminal report, from its typed result alone."""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType

from servecheck.model.bodies.capacity import CapacityBody, CapacityDesign, CapacityPoint, Interval
from servecheck.model.readings import RunReading
from servecheck.model.result import RunResult
from servecheck.report.lines import register
from servecheck.report.lines.capacity_html import section
from servecheck.report.lines.text import num as _num
from servecheck.report.lines.text import signed_pct as _pct
from servecheck.report.lines.text import carried_lines, client_lines, warning_line


def _interval(iv: Interval | None, fmt: str) -> str:
    return "" if not iv else f" [{format(iv[0], fmt)}-{format(iv[1], fmt)}]"


def _percent_of(q: float | None) -> str:
    """A quantile as the percentile it names (0.5 -> 50)."""
    return _num(None if q is None else 100 * q, "g")


def header_lines(body: CapacityBody) -> list[str]:
    d = body.design or CapacityDesign()
    ttft = f", first token within {d.max_ttft_s:g} s" if d.max_ttft_s is not None else ""
    lines = []
    server = body.server
    if server is not None:
        lines.append(f"capacity  {server.url or '?'}  api {server.dialect or '?'}  model {server.model or '?'}")
    lines.append(
        f"floor {_num(d.min_user_rate_tok_s, 'g')} tok/s per user{ttft}, judged at percentile "
        f"{_num(d.percentile, 'g')} (per-user rate at its {_percent_of(d.rate_quantile)}th, TTFT at its "
        f"{_percent_of(d.ttft_quantile)}th); {_num(d.tokens, 'd')} tokens per request, "
        f"{_num(d.prompt_tokens, 'd')}-token prompts, N up to {_num(d.max_n, 'd')}"
    )
    return lines


def _gain(p: CapacityPoint) -> str:
    """What the users added since the N probed before bought: tok/s each and the aggregate's change."""
    if p.prev_n is None:
        return "-"
    return f"{_num(p.marginal_gain_tok_s_per_user, '+.1f')}/user ({_pct(p.marginal_aggregate_gain)})"


def point_table(points: tuple[CapacityPoint, ...]) -> list[str]:
    lines = [f"{'N':>4}  {'per-user tok/s [interval]':>26}  {'TTFT s [interval]':>24}  {'aggregate':>10}  "
             f"{'status':>9}  {'marginal gain':>22}  level"]
    for p in points:
        rate = _num(p.per_user_tok_s, ".1f") + _interval(p.per_user_interval, ".1f")
        ttft = _num(p.ttft_s, ".3f") + _interval(p.ttft_interval, ".3f")
        lines.append(f"{_num(p.n, 'd'):>4}  {rate:>26}  {ttft:>24}  {_num(p.aggregate_tok_s, '.1f'):>10}  "
                     f"{p.status or '-':>9}  {_gain(p):>22}  {_num(p.interval_level, '.0%')}")
    return lines


def check_lines(body: CapacityBody) -> list[str]:
    lines = []
    if body.least_marginal is not None and body.least_marginal.text:
        lines.append(str(body.least_marginal.text))
    drift = body.drift
    if drift is not None:
        lines.append(f"drift: serial baseline {_num(drift.start_tok_s, '.1f')} -> {_num(drift.end_tok_s, '.1f')} tok/s "
                     f"per user (start vs end): {_num(drift.change, '+.1%')}, limit "
                     f"{_num(drift.limit, '.0%')} either way")
    for p in body.points:
        if p.status != "pass":
            lines.append(f"N={_num(p.n, 'd')} {p.status or '-'}: {p.reason or '-'}")
    return lines


def report_lines(run: RunResult[CapacityBody]) -> list[str]:
    """The whole terminal report, from the typed result alone."""
    body = run.body
    lines = header_lines(body) + [""]
    if body.points:
        lines += [*point_table(body.points), ""]
    prefix = "" if body.determined else "UNDETERMINED: "
    lines.append(f"{prefix}{body.answer or '-'}")
    lines.append(f"limit: {body.limit or '-'}")
    lines += carried_lines(run.envelope.params)
    lines += check_lines(body)
    lines += client_lines(body.client_checks)
    lines += [warning_line(w) for w in body.warnings]
    lines += [f"note: {n}" for n in body.notes]
    if not run.complete:
        lines.append("INCOMPLETE: interrupted; the probes above are all that was measured")
    bound = [c.streams for c in body.client_checks or () if c.client_bound]
    if run.valid is False and bound:
        lines.append("INVALID: the client is the bottleneck at " + ", ".join(f"N={n}" for n in bound)
                     + " (see the warnings)")
    elif run.valid is False:
        lines.append("INVALID: measured requests were off the asked output length (see the warnings)")
    return lines


def report(run: RunResult[Any], reading: RunReading) -> list[RenderableType]:
    return [*report_lines(run)]


register("capacity", lines=report, html=section)
