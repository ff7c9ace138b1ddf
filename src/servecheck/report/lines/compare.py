"""The `compare` command's terminal report, from its typed result alone."""

from __future__ import annotations

from servecheck.model.bodies.compare import CompareBody, Comparison
from servecheck.model.figures import format_figure


def report_lines(body: CompareBody) -> list[str]:
    width = max(len(e.name or "") for e in body.engines)
    lines = [
        f"{e.name or '':<{width}}  {(e.bytes_per_token or 0) / 1e9:7.3f} GB/token  {e.tok_s:8.2f} tok/s"
        f"  achieved {format_figure(e.achieved_gb_s or 0.0):>6} GB/s  ({e.source})"
        for e in body.engines
    ]
    lines.append("")
    for c in body.comparisons:
        lines.extend(comparison_lines(c))
    lines.append("same machine assumed (equal bandwidth); GB = 10^9 bytes")
    return lines


def comparison_lines(c: Comparison) -> list[str]:
    fewer = "fewer" if (c.bytes_ratio or 0.0) >= 1 else "more"
    better = "better" if (c.utilization_ratio or 0.0) >= 1 else "worse"
    lines = [
        f"{c.a} vs {c.b}: measured {c.measured_ratio:.2f}x = bytes {c.bytes_ratio:.2f}x ({fewer} bytes per token) "
        f"x utilization {c.utilization_ratio:.2f}x ({better} bandwidth use) = {c.product:.2f}x",
        f"  share of the gap (log): bytes {_share(c.bytes_share)}, utilization {_share(c.utilization_share)}",
    ]
    if c.bytes_share is not None and not 0 <= c.bytes_share <= 1:
        lines.append("  the two factors pull in opposite directions, so one share is negative and the other above 100%")
    return lines


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"
