"""`servecheck calibrate`: how much this client adds to token times at N streams, on this machine, now.
The measuring is `jobs.calibrate.CalibrateJob`, run by `runs.runner.run_job`; this module parses,
runs and renders."""

from __future__ import annotations

import click

from servecheck import exitcodes
from servecheck.cli.common import workers_option
from servecheck.cli.context import AppContext
from servecheck.envinfo import environment
from servecheck.jobs.calibrate import CalibrateJob
from servecheck.load.calibrate import DEFAULT_EVENTS, check_design
from servecheck.model.bodies.calibrate import CalibrateBody
from servecheck.report.lines.calibrate import report_lines
from servecheck.runs.jsonout import envelope
from servecheck.runs.runner import run_job
from servecheck.runs.sinks import JsonFileSink


@click.command("calibrate")
@click.option("--streams", type=int, default=16, show_default=True,
              help="Streams at once (the concurrency of the run to come).")
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
    sinks = [JsonFileSink(json_path)] if json_path is not None else []  # calibrate is never saved to the history
    params = {"streams": streams, "gap_ms": gap_ms, "events": events, "workers": workers}
    run = run_job(CalibrateJob(streams, gap_ms, events, workers), sinks,
                  head=envelope("calibrate", params, environment()))
    # one calibration: nothing to save before it ends; main says so, exits 130
    if run.interrupted or run.written is None:
        raise KeyboardInterrupt
    body: CalibrateBody = run.written.body
    assert body.calibration is not None  # a finished job's document carries it
    console = app.err if json_path == "-" else app.out
    for line in report_lines(body.calibration):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return exitcodes.INVALID if body.calibration.client_bound is not None else exitcodes.OK
