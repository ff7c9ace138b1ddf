"""The `arms` command's terminal report, from its typed result alone."""

from __future__ import annotations

from rich.text import Text

from typing import Any

from rich.console import RenderableType

from servecheck.model.bodies.arms import INTERVAL_LEVEL, Arm, ArmsBody, ArmsDesign, ArmsDrift, Interval
from servecheck.model.readings import RunReading
from servecheck.model.result import RunResult
from servecheck.report.lines import register
from servecheck.report.lines.short import DASH, num, pct, table
from servecheck.report.lines.arms_html import section
from servecheck.report.lines.text import num as _num
from servecheck.report.lines.text import signed_pct as _pct
from servecheck.report.lines.text import carried_lines, client_lines, warning_line


def _ratio(x: float | None, interval: Interval | None = None) -> str:
    if x is None:
        return "-"
    return f"{x:.2f}x" + (f" [{interval[0]:.2f}-{interval[1]:.2f}]" if interval else "")


def _drift_words(loss: float | None) -> str:
    if loss is None:
        return "-"
    if abs(loss) < 0.0005:
        return "no loss"
    return f"loss {loss:.1%}" if loss > 0 else f"gain {-loss:.1%}"


def _run_words(body: ArmsBody, drift: ArmsDrift) -> str:
    """With pooled runs, which one the drift line is about (the one that lost most)."""
    return f" of run {_num(drift.run, 'd')}" if body.pooled_from else ""


def _reps_words(body: ArmsBody, design: ArmsDesign) -> str:
    planned, taken = design.reps, body.reps_taken
    if taken is not None and planned is not None and taken > planned:
        return f"{taken} reps ({planned} planned, more added until decided)"
    return f"{_num(planned, 'd')} reps"


def header_lines(body: ArmsBody) -> list[str]:
    d = body.design or ArmsDesign()
    order = "fixed order" if d.fixed_order else "rotated order"
    lines = []
    server = body.server
    if server is not None:
        lines.append(f"arms  {server.url or '?'}  api {server.dialect or '?'}  model {server.model or '?'}")
    lines.append(
        f"{_num(d.requests, 'd')} requests per cell, {_num(d.tokens, 'd')} tokens each, "
        f"{_num(d.prompt_tokens, 'd')}-token prompts; arms {','.join(str(a) for a in d.arms)}; "
        f"{_reps_words(body, d)}, {order}"
    )
    if body.pooled_from:
        lines.append(f"pooled with: {', '.join(body.pooled_from)}")
    return lines


def arm_table(arms: tuple[Arm, ...]) -> list[str]:
    lines = [f"{'arm':>4}  {'aggregate':>13}  {'speedup [interval]':>20}  {'effic.':>6}  {'per-user':>13}  "
             f"{'change':>6}  {'TTFT':>7}  {'TTFT x':>6}"]
    for a in arms:
        lines.append(
            f"{_num(a.concurrency, 'd'):>4}  {_num(a.aggregate_tok_s, '8.1f') + ' tok/s':>13}  "
            f"{_ratio(a.aggregate_speedup, a.aggregate_speedup_interval):>20}  "
            f"{_num(a.efficiency, '6.0%'):>6}  {_num(a.per_user_rate_tok_s, '8.1f') + ' tok/s':>13}  "
            f"{_pct(a.per_user_rate_change):>6}  {_num(a.ttft_s, '6.2f') + 's':>7}  {_ratio(a.ttft_multiple):>6}"
        )
    return lines


def decomposition_table(arms: tuple[Arm, ...], level: float | None) -> list[str]:
    lines = [f"{'arm':>4}  {'aggregate gain':>20}  {'generation stage':>20}  {'decoding at once':>16}  label"]
    for a in arms:
        lines.append(
            f"{_num(a.concurrency, 'd'):>4}  {_ratio(a.aggregate_speedup, a.aggregate_speedup_interval):>20}  "
            f"{_ratio(a.generation_gain, a.generation_gain_interval):>20}  "
            f"{_num(a.mean_decoding, '.2f'):>16}  {a.label or '-'}"
        )
    lines.append(
        "generation stage = tokens after the first / time at least one request was decoding, against serial "
        "(per-user rate x requests decoding at once, not x streams)"
    )
    lines += interval_note(level)
    return lines


def interval_note(level: float | None) -> list[str]:
    """What the bracketed intervals are, and how sure they are with this many reps (the run's reading)."""
    if level is None:
        return []
    text = f"intervals: order statistics of the within-rep ratios, covering the median with {level:.0%} confidence"
    if level < INTERVAL_LEVEL:
        text += f" (fewer reps than the {INTERVAL_LEVEL:.0%} level needs: six or more)"
    return [text]


def check_lines(body: ArmsBody) -> list[str]:
    lines = []
    bias = body.position_bias
    if bias is not None:
        how = "across positions" if bias.method == "positions" else "estimated from drift (fixed order)"
        lines.append(
            f"position bias: widest spread {_num(bias.spread, '.1%')} ({_num(bias.concurrency, 'd')}-way, {how}); "
            f"limit {_num(body.bias_limit, '.0%')}"
        )
    drift = body.drift
    if drift is not None:
        lines.append(
            f"drift: serial arm {_num(drift.first_tok_s, '.1f')} -> {_num(drift.last_tok_s, '.1f')} tok/s "
            f"(first vs last {_num(drift.reps_each, 'd')} rep(s){_run_words(body, drift)}): {_drift_words(drift.loss)}"
        )
    if body.thermal is not None:
        lines.append(f"thermal: {body.thermal.summary or '-'}")
    for cell in body.deviant_cells:
        lines.append(
            f"deviant cell: run {_num(cell.run, 'd')} rep {_num(cell.rep, 'd')} at {_num(cell.concurrency, 'd')}-way "
            f"produced {_num(cell.tokens, 'd')} tokens against the modal {_num(cell.modal_tokens, 'd')} "
            f"({_num(cell.deviation, '+.0%')})"
        )
    return lines


def report_lines(run: RunResult[ArmsBody], reading: RunReading) -> list[str]:
    """The whole terminal report, from the typed result and what the analysis read off it."""
    body = run.body
    lines = header_lines(body) + [""]
    if body.headline_refused:
        lines.append(f"REFUSED: {body.refusal or '-'}")
    elif body.headline:
        lines.append(str(body.headline))
    lines += carried_lines(run.envelope.params)
    if body.arms:
        lines += ["", *arm_table(body.arms), "", *decomposition_table(body.arms, reading.arms.interval_level), ""]
    else:
        lines.append("no serial cell was measured: nothing to compare against")
    lines += check_lines(body)
    lines += client_lines(body.client_checks)
    lines += [warning_line(w) for w in body.warnings]
    lines += [f"note: {n}" for n in body.notes]
    if not run.complete:
        lines.append("INCOMPLETE: interrupted; the cells above are all that was measured")
    bound = [c.streams for c in body.client_checks or () if c.client_bound]
    if run.valid is False and bound:
        lines.append("INVALID: the client is the bottleneck at " + ", ".join(f"N={n}" for n in bound)
                     + " (see the warnings)")
    elif run.valid is False:
        lines.append("INVALID: some requests failed (see the cells)")
    return lines


def report(run: RunResult[Any], reading: RunReading) -> list[RenderableType]:
    return [*report_lines(run, reading)]


def short(run: RunResult[ArmsBody]) -> list[RenderableType]:
    body = run.body
    out: list[RenderableType] = []
    if body.headline:
        out.append(Text(str(body.headline)))
    rows = [
        [num(a.concurrency, 0), num(a.aggregate_speedup, 2, "×"), num(a.generation_gain, 2, "×"),
         pct(a.per_user_rate_change, signed=True), num(a.ttft_multiple, 2, "×"), pct(a.efficiency), a.label or DASH]
        for a in body.arms
    ]
    headers = ["in flight", "aggregate", "generation", "per-user rate", "TTFT", "efficiency", "label"]
    return out + [table(headers, rows)]


register("arms", short=short, lines=report, html=section)
