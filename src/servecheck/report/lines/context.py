"""The `context` command's terminal report, from its typed result alone."""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType

from servecheck.model.figures import format_figure
from servecheck.model.bodies.common import Finding, Server, Warning
from servecheck.model.bodies.context import ContextBody, ContextPoint, ContextRooflineRow, ModelBytesSummary
from servecheck.model.readings import RunReading
from servecheck.model.result import RunResult
from servecheck.report.lines import register
from servecheck.report.lines.context_html import section
from servecheck.report.lines.audit import fmt_bytes
from servecheck.report.lines.text import carried_lines, client_lines

DASH = "—"  # a field the document does not record
CACHE_PROMPT = {False: "cache_prompt false", None: "cache_prompt not sent (the engine does not take it)"}


def depth_label(depth: int) -> str:
    """Seed 000 section 6's words: 'short context' for depth 0, '43k tokens' beyond a thousand."""
    if depth == 0:
        return "short context"
    if depth < 1000:
        return f"{depth} tokens"
    return f"{depth / 1000:.1f}".rstrip("0").rstrip(".") + "k tokens"


def _f(value: float | None, digits: int = 1, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


def _pct(span: tuple[float, float] | None) -> str:
    if not span:
        return "-"
    lo, hi = span
    return f"{lo:.0%}" if round(lo, 2) == round(hi, 2) else f"{lo:.0%}-{hi:.0%}"


def _given(value: object) -> str:
    return DASH if value is None else str(value)


def _bytes(value: float | None) -> str:
    return DASH if value is None else fmt_bytes(value)


def header_lines(body: ContextBody) -> list[str]:
    server = body.server or Server()
    order = " ".join(str(d) for d in body.order)
    cache = CACHE_PROMPT.get(body.cache_prompt, "")
    return [
        f"context  {server.url or '?'}  api {server.dialect or '?'}  model {server.model or '?'}",
        f"{_given(body.tokens)} tokens per stream, one stream at a time, {_given(body.reps)} rep(s), {cache}; "
        f"order {order}",
    ]


def _roofline_cells(r: ContextRooflineRow | None) -> str:
    if r is None:
        return f" {'-':>10} {'-':>9} {'-':>13} {'-':>7} {'-':>9}"
    gb_s = "-" if r.achieved_gb_s is None else format_figure(r.achieved_gb_s)
    bytes_ = "-" if r.bytes_per_token is None else fmt_bytes(r.bytes_per_token)
    return (f" {_f(r.predicted_tok_s):>10} {_f(r.measured_over_predicted, 2):>9} {bytes_:>13} {gb_s:>7} "
            f"{_pct(r.utilization):>9}")


def _point_line(p: ContextPoint) -> str:
    depth = "-" if p.depth is None else depth_label(p.depth)
    return (f"{depth:<15} {_f(p.context_tokens, 0):>8} {_f(p.ttft_s, 3):>8} "
            f"{_f(p.prefill_tok_s):>14} {_f(p.decode_tok_s):>13} {_f(p.ratio, 2):>6}")


def table_lines(body: ContextBody) -> list[str]:
    """The seed's shape, one row per depth: 'short context  98.0 tok/s ... 43k tokens  34.0 tok/s'."""
    with_model = body.roofline is not None
    rows = {r.depth: r for r in body.roofline or ()}
    head = f"{'depth':<15} {'context':>8} {'TTFT s':>8} {'prefill tok/s':>14} {'decode tok/s':>13} {'ratio':>6}"
    if with_model:
        head += f" {'predicted':>10} {'meas/pred':>9} {'bytes/token':>13} {'GB/s':>7} {'util':>9}"
    lines = [head]
    for p in body.points:
        line = _point_line(p)
        if with_model:
            line += _roofline_cells(rows.get(p.depth))
        if p.valid is False:
            line += "  INVALID"
        lines.append(line)
    return lines


def _kv_heads(heads: int | tuple[int, ...] | None) -> str:
    """One count, or the distinct counts as the JSON lists them."""
    return str(list(heads)) if isinstance(heads, tuple) else _given(heads)


def _layout(m: ModelBytesSummary) -> str:
    sliding = f", {m.sliding_layers} sliding" if m.sliding_layers else ""
    element = DASH if m.kv_element_bytes is None else f"{m.kv_element_bytes:g}"
    return (f"{_given(m.kv_layers)} layers{sliding} x {_kv_heads(m.kv_heads)} KV heads x "
            f"({_given(m.key_length)}+{_given(m.value_length)}) x {element} B {_given(m.kv_type)}")


def model_lines(body: ContextBody) -> list[str]:
    m = body.model_bytes
    if m is None:
        return []
    state = f" + recurrent state {fmt_bytes(m.state_bytes_per_token)}" if m.state_bytes_per_token else ""
    lines = [
        f"bytes per token = weights {_bytes(m.weights_bytes_per_token)}{state} + KV "
        f"{_bytes(m.kv_bytes_per_context_token)} per token of context ({_layout(m)}), at the stream's mean "
        "context (depth + tokens/2)",
    ]
    bw = body.bandwidth_gb_s
    if bw:
        lines.append(f"measured bandwidth {format_figure(bw[0])}-{format_figure(bw[1])} GB/s "
                     f"({_given(body.bandwidth_source)})")
    lines.append("predicted = the shallowest depth's rate x its bytes / these bytes (constant utilization); "
                 "ratios corrected for drift")
    return lines


def _finding_line(kind: str, f: Warning) -> str:
    if not isinstance(f, Finding):
        return f"{kind}: {f}"
    return f"{kind}: {_given(f.message)}" + (f" ({f.hint})" if f.hint else "")


def finding_lines(body: ContextBody) -> list[str]:
    return [_finding_line("INVALID", f) for f in body.invalid] + [_finding_line("warning", f) for f in body.warnings]


def report_lines(run: RunResult[ContextBody]) -> list[str]:
    """The whole terminal report, from the typed result alone."""
    body = run.body
    lines = header_lines(body) + [""] + table_lines(body) + [""]
    lines += model_lines(body)
    lines.append(f"context effect  {_given(body.effect)}  ({_given(body.effect_reason)})")
    lines += carried_lines(run.envelope.params) + client_lines(body.client_checks)
    lines += finding_lines(body) + [f"note: {n}" for n in body.notes]
    if not run.complete:
        lines.append("INCOMPLETE: interrupted; the depths above are all that was measured")
    lines.append(f"run {'valid' if run.valid else 'INVALID'}")
    return lines


def report(run: RunResult[Any], reading: RunReading) -> list[RenderableType]:
    return list(report_lines(run))


register("context", lines=report, html=section)
