"""The `calibrate` command's terminal report, from its typed result alone."""

from __future__ import annotations

from servecheck.model.bodies.common import Calibration
from servecheck.model.client import STAMP_DELAY_FRAC


def report_lines(c: Calibration) -> list[str]:
    lag = "-" if c.loop_lag_p99_ms is None else f"{c.loop_lag_p99_ms:.1f} ms p99, {c.loop_lag_max_ms or 0:.1f} ms max"
    return [
        f"calibrate  {c.streams} streams, an event every {c.gap_ms:g} ms per stream, {c.events} events stamped"
        + (f", read by {c.workers} client processes" if (c.workers or 1) > 1 else ""),
        "  (servecheck's own loopback stamp server: this measures the client, no server)",
        f"stamp delay     p50 {c.stamp_delay_p50_ms:.2f} ms, p99 {c.stamp_delay_p99_ms:.2f} ms, max "
        f"{c.stamp_delay_max_ms:.2f} ms  (p99 = {c.stamp_delay_frac:.1%} of the gap; at most {STAMP_DELAY_FRAC:.0%})",
        f"dispatch skew   {c.dispatch_skew_ms:.2f} ms over {c.streams} requests released together",
        f"event-loop lag  {lag}",
        c.client_bound if c.client_bound is not None
        else f"client ok: at {c.streams} streams it adds {c.stamp_delay_p99_ms:.2f} ms (p99) to a token time",
    ]
