"""The `bandwidth` command's terminal report, from its typed result alone: the method, one line per
working-set size (best and median pass, and the page sizes where they differ), what was skipped."""

from __future__ import annotations

from collections.abc import Sequence

from servecheck.model.bodies.bandwidth import BandwidthBody, ProbePoint
from servecheck.model.figures import GIB
from servecheck.report.lines import register
from servecheck.report.lines.bandwidth_html import section

UNITS_LINE = "GB/s = 10^9 bytes per second; sizes in GiB = 2^30 bytes, MiB = 2^20 bytes"


def fmt_size(nbytes: int) -> str:
    """Binary units, as the sizes are given: 8 MiB stays 8 MiB rather than 0.01 GiB."""
    if nbytes >= GIB:
        return f"{nbytes / GIB:.2f} GiB"
    return f"{nbytes / (1 << 20):.1f} MiB"


def point_lines(points: Sequence[ProbePoint]) -> list[str]:
    lines = []
    for p in points:
        line = f"{fmt_size(p.bytes or 0):>10}  {p.gb_s or 0.0:8.1f} GB/s  (median {p.low_gb_s or 0.0:.1f})"
        if p.pages_differ and p.gb_s_4k and p.gb_s_huge:
            line += f"   4 KiB pages {p.gb_s_4k:.1f}, huge pages {p.gb_s_huge:.1f} GB/s"
        lines.append(line)
    return lines


def report_lines(body: BandwidthBody) -> list[str]:
    who = f"{body.threads} threads, " if body.device == "cpu" else ""
    lines = [f"bandwidth  device {body.device}  {body.method}, {who}best of {body.passes} passes", ""]
    points = body.points or ()
    lines += point_lines(points)
    lines += [f"skipped {fmt_size(s.bytes or 0)}: {s.reason}" for s in body.skipped or ()]
    lines += [f"note: {n}" for n in body.notes or ()]
    if len(points) > 1:
        lines.append("use the figure at the size closest to the model's resident size: "
                     "bandwidth falls as the working set grows")
    lines.append(UNITS_LINE)
    return lines


register("bandwidth", html=section)
