"""The roofline run as a section of the HTML report (`report.html` draws the page around it; the
terminal lines are `report.lines.roofline`, registered beside it)."""

from __future__ import annotations


from servecheck.model.bodies.roofline import Ceiling, Headroom, RooflineBody, Target
from servecheck.model.result import RunResult
from servecheck.model.readings import RunReading
from servecheck.report.svg import (
    Marker,
    RangeBar,
    esc,
    range_chart,
)

from servecheck.report.html_kit import fmt_gb, fmt, fmt_range, fmt_yes_no, table, verdict_line


def section(run: RunResult[RooflineBody], _: RunReading) -> str:
    b = run.body
    rows = [
        ("bytes per token (GB = 10^9 B)", fmt_gb(b.bytes_per_token)),
        ("achieved bandwidth", fmt(b.achieved_gb_s, 1, " GB/s")),
        ("measured bandwidth", fmt_range(b.bandwidth_gb_s, 0, suffix=" GB/s")),
        ("utilization", fmt_range(b.utilization, 0, 100, "%")),
        ("kill gate", f"{fmt(b.gate)} (threshold {fmt_range(b.gate_threshold, 0, 100, '%')})"),
    ]
    headroom, ceiling, target = b.headroom or Headroom(), b.ceiling or Ceiling(), b.target or Target()
    if ceiling != Ceiling() or headroom != Headroom():
        rows.append(("ceiling", fmt(ceiling.name or headroom.ceiling)))
        rows.append(("headroom a perfect engine could win", fmt_range(headroom.factor, 2, suffix="×")))
        rows.append(("speed of light (100% of measured)", fmt_range(headroom.speed_of_light_tok_s, 0, suffix=" tok/s")))
    if target != Target():
        rows.append(("target", f"{fmt(target.tok_s, 1)} tok/s needs {fmt(target.required_gb_s, 0)} GB/s = "
                               f"{fmt_range(target.required_utilization, 0, 100, '%')}; within reach: "
                               f"{fmt_yes_no(target.within_reach)}"))
    table_html = table(["", ""], [(esc(k), v) for k, v in rows])
    return "\n".join([verdict_line("Gate", b.gate), _roofline_chart(b), table_html])


def _roofline_chart(b: RooflineBody) -> str:
    lo, hi = b.bandwidth_gb_s or (None, None)
    bars = []
    if lo is not None and hi is not None:
        bars.append(RangeBar(f"measured bandwidth {lo:.0f}–{hi:.0f} GB/s", lo, hi, "measured",
                             "measured bandwidth at the model's working set"))
    if b.achieved_gb_s is not None:
        achieved = b.achieved_gb_s
        bars.append(RangeBar(f"achieved {achieved:.0f} GB/s", achieved, achieved, "achieved",
                             "tok/s × bytes per token"))
    if not bars:
        return ""
    gate = b.gate_threshold
    markers = []
    if gate is not None and lo is not None and hi is not None:
        markers.append(Marker(f"gate {gate * 100:.0f}% of measured: {gate * lo:.0f}–{gate * hi:.0f} GB/s", gate * lo,
                              gate * hi))
    c_lo, c_hi = (b.ceiling and b.ceiling.utilization) or (None, None)
    if c_lo is not None and c_hi is not None and lo is not None and hi is not None:
        markers.append(Marker(f"typical ceiling {c_lo * 100:.0f}–{c_hi * 100:.0f}% of measured: "
                              f"{c_lo * lo:.0f}–{c_hi * hi:.0f} GB/s",
                              c_lo * lo, c_hi * hi, "ceiling"))
    return range_chart(bars, markers, title="Roofline: achieved against measured bandwidth",
                       x_label="GB/s (10^9 bytes per second)")
