"""The `roofline` command's terminal report, from its typed result alone."""

from __future__ import annotations

from rich.console import RenderableType

from servecheck.model.figures import format_figure
from servecheck.model.bodies.roofline import BatchRow, Headroom, Range, RooflineBody, Target
from servecheck.model.readings import RunReading
from servecheck.model.result import RunResult
from servecheck.report.lines import register
from servecheck.report.lines.short import DASH, num, span, table
from servecheck.report.lines.roofline_html import section
from servecheck.report.lines.audit import fmt_bytes
from servecheck.report.lines.text import carried_lines

UNITS_LINE = ("GB = 10^9 bytes, GB/s = 10^9 bytes per second, GiB = 2^30 bytes; "
              "utilization is a fraction of measured bandwidth")
GATE_MEANING = {
    "close": "the engine already sits near the ceiling: do not write your own",
    "open": "below the gate: a better engine has real room",
    "straddle": "the range crosses the gate: measure bandwidth more tightly before deciding",
}
BATCH_HEAD = "batch  bytes/step     experts/layer  ceiling tok/s (aggregate)   measured  measured/ceiling"
BATCH_RULE = "dense weights read once per step, routed experts E(1-(1-k/E)^b) of E, KV cache and state b times"
# the fields the head lines print: a document without one of them (an interrupted run) gets the short rendering
HEAD_FIELDS = ("bytes_per_token", "kind", "tok_s", "achieved_gb_s", "bandwidth_gb_s", "bandwidth_source", "utilization",
               "gate", "gate_threshold", "headroom")


class NotRecorded(ValueError):
    """The document lacks a field the report prints (`show` then prints the short rendering)."""


def report_lines(run: RunResult[RooflineBody]) -> list[RenderableType]:
    b = run.body
    missing = [name for name in HEAD_FIELDS if getattr(b, name) is None]
    if missing:
        raise NotRecorded(f"roofline report: {', '.join(missing)} not recorded")
    # None of HEAD_FIELDS is None past the check above; mypy cannot follow getattr, so say it again.
    assert b.bytes_per_token is not None and b.achieved_gb_s is not None and b.bandwidth_gb_s is not None
    assert b.utilization is not None and b.gate is not None and b.headroom is not None
    lines: list[RenderableType] = [
        f"bytes per token      {fmt_bytes(b.bytes_per_token)} ({b.kind})",
        f"decode rate          {b.tok_s:.2f} tok/s ({b.tok_s_source or 'given'})",
        f"achieved bandwidth   {format_figure(b.achieved_gb_s)} GB/s  = {b.tok_s:.2f} tok/s x "
        f"{fmt_bytes(b.bytes_per_token)}",
        f"measured bandwidth   {_gbs(b.bandwidth_gb_s)} GB/s ({b.bandwidth_source})",
        f"utilization          {_pct(b.utilization)} of measured bandwidth",
        f"gate {b.gate_threshold:.2f}            {b.gate.upper()}: {GATE_MEANING[b.gate]}",
        *carried_lines(run.envelope.params),
        _headroom_line(b.headroom),
    ]
    lines += _target_lines(b.target)
    lines += _batch_lines(b.batch)
    lines += [f"note: {n}" for n in b.notes or ()]
    if run.envelope.simulated:
        lines.insert(0, "SIMULATED SERVER: the decode rate comes from servecheck's simulator, not from a real engine")
    lines.append(UNITS_LINE)
    return lines


def _headroom_line(h: Headroom) -> str:
    if h.ceiling is None or h.factor is None or h.speed_of_light_factor is None or h.speed_of_light_tok_s is None:
        raise NotRecorded("roofline report: headroom not recorded")
    return (f"headroom             {_x(h.factor)} to the {h.ceiling}; {_x(h.speed_of_light_factor)} to the speed of "
            f"light ({_gbs(h.speed_of_light_tok_s)} tok/s)")


def _target_lines(t: Target | None) -> list[str]:
    if t is None or t == Target():
        return []
    if t.tok_s is None or t.required_gb_s is None or t.required_utilization is None or t.ceiling is None:
        raise NotRecorded("roofline report: target not recorded")
    verdict = "within reach" if t.within_reach else ("partly within reach" if t.partly_within_reach else "out of reach")
    return [f"target {t.tok_s:g} tok/s     needs {format_figure(t.required_gb_s)} GB/s = "
            f"{_pct(t.required_utilization)} utilization: {verdict} (typical ceiling {_pct(t.ceiling)})"]


def _batch_lines(rows: tuple[BatchRow, ...] | None) -> list[str]:
    if not rows:
        return []
    return ["", BATCH_HEAD, *map(_batch_line, rows), BATCH_RULE]


def _batch_line(r: BatchRow) -> str:
    if r.batch is None or r.step_bytes is None or r.ceiling_tok_s is None:
        raise NotRecorded("roofline report: a batch row is not recorded")
    experts = "-" if r.distinct_experts is None else f"{r.distinct_experts:.1f}"
    measured = "-" if r.measured_tok_s is None else f"{r.measured_tok_s:.1f}"
    ratio = "-" if r.measured_over_ceiling is None else _pct(r.measured_over_ceiling)
    return (f"{r.batch:>5}  {fmt_bytes(r.step_bytes):>12}  {experts:>13}  {_gbs(r.ceiling_tok_s):>25}  "
            f"{measured:>8}  {ratio:>16}")


def _pct(span: Range) -> str:
    lo, hi = span
    return f"{lo:.0%}" if round(lo, 2) == round(hi, 2) else f"{lo:.0%}-{hi:.0%}"


def _gbs(span: Range) -> str:
    lo, hi = (format_figure(v) for v in span)
    return lo if lo == hi else f"{lo}-{hi}"


def _x(span: Range) -> str:
    lo, hi = span
    return f"{lo:.2f}x" if round(lo, 2) == round(hi, 2) else f"{lo:.2f}-{hi:.2f}x"


def report(run: RunResult[RooflineBody], reading: RunReading) -> list[RenderableType]:
    return report_lines(run)


def short(run: RunResult[RooflineBody]) -> list[RenderableType]:
    b = run.body
    rows = [
        ["bytes per token", num(None if b.bytes_per_token is None else b.bytes_per_token / 1e9, 3, " GB")],
        ["achieved", num(b.achieved_gb_s, 1, " GB/s")],
        ["measured bandwidth", span(b.bandwidth_gb_s, 1.0, " GB/s", 0)],
        ["utilization", span(b.utilization, 100.0, "%", 0)],
        ["gate", f"{b.gate or DASH} (threshold {span(b.gate_threshold, 100.0, '%', 0)})"],
    ]
    return [table(["", ""], rows)]


register("roofline", short=short, lines=report, html=section)
