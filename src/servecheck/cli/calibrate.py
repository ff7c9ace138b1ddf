"""`servecheck calibrate`: how much this client adds to token times at N streams, on this machine, now."""

from __future__ import annotations

import asyncio

import click

from servecheck import exitcodes
from servecheck.cli.common import workers_option
from servecheck.cli.context import AppContext
from servecheck.envinfo import environment
from servecheck.load.calibrate import DEFAULT_EVENTS, STAMP_DELAY_FRAC, Calibration, calibrate, check_design
from servecheck.results.jsonout import check_writable, envelope, write_json


def report_lines(c: Calibration) -> list[str]:
    bound = c.client_bound()
    lag = "-" if c.loop_lag_p99_ms is None else f"{c.loop_lag_p99_ms:.1f} ms p99, {c.loop_lag_max_ms or 0:.1f} ms max"
    return [
        f"calibrate  {c.streams} streams, an event every {c.gap_ms:g} ms per stream, {c.events} events stamped"
        + (f", read by {c.workers} client processes" if c.workers > 1 else ""),
        "  (servecheck's own loopback stamp server: this measures the client, no server)",
        f"stamp delay     p50 {c.stamp_delay_p50_ms:.2f} ms, p99 {c.stamp_delay_p99_ms:.2f} ms, max {c.stamp_delay_max_ms:.2f} ms"
        f"  (p99 = {c.stamp_delay_frac:.1%} of the gap; at most {STAMP_DELAY_FRAC:.0%})",
        f"dispatch skew   {c.dispatch_skew_ms:.2f} ms over {c.streams} requests released together",
        f"event-loop lag  {lag}",
        bound if bound is not None else f"client ok: at {c.streams} streams it adds {c.stamp_delay_p99_ms:.2f} ms (p99) to a token time",
    ]


@click.command("calibrate")
@click.option("--streams", type=int, default=16, show_default=True, help="Streams at once (the concurrency of the run to come).")
@click.option("--gap-ms", type=float, default=32.0, show_default=True,
              help="Milliseconds between one stream's tokens (the server's inter-token time).")
@click.option("--events", type=int, default=DEFAULT_EVENTS, show_default=True, help="Events per stream (10-150).")
@workers_option
@click.option("--json", "json_path", default=None, metavar="PATH", help="Write the JSON result ('-' for stdout).")
@click.pass_obj
def cmd(app: AppContext, streams: int, gap_ms: float, events: int, workers: int, json_path: str | None) -> int:
    """Measure what this client adds to every token time at N streams: stamp delay, dispatch skew and
    event-loop lag against servecheck's own loopback server. Exit 3 when the client would be the bottleneck."""
    check_design(streams, gap_ms, events)
    if json_path not in (None, "-"):
        check_writable(json_path)
    result = asyncio.run(calibrate(streams, gap_ms, events, workers))
    params = {"streams": streams, "gap_ms": gap_ms, "events": events, "workers": workers}
    doc = {**envelope("calibrate", params, environment()),
           "calibration": result.to_dict()}
    if json_path is not None:
        write_json(json_path, doc)
    console = app.err if json_path == "-" else app.out
    for line in report_lines(result):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return exitcodes.INVALID if result.client_bound() is not None else exitcodes.OK
