"""`servecheck bandwidth`: read-stream bandwidth per working-set size, the honest roofline denominator."""

from __future__ import annotations


import click

from servecheck import exitcodes
from servecheck.analysis.roofline import parse_bytes
from servecheck.cli.common import output_options, output_sinks
from servecheck.cli.context import AppContext
from servecheck.envinfo import environment
from servecheck.errors import UsageError
from servecheck.model.bodies.bandwidth import BandwidthBody
from servecheck.probe.job import BandwidthJob
from servecheck.report.lines import bandwidth as report
from servecheck.runs.jsonout import envelope
from servecheck.runs.runner import run_job

def parse_sizes(raw: str | None) -> list[int] | None:
    """'1,4,8GiB' -> sizes in bytes; a bare number takes the unit of the last item that has one (GiB if none)."""
    if raw is None:
        return None
    items = [p.strip() for p in raw.split(",") if p.strip()]
    if not items:
        raise UsageError(f"--sizes {raw!r} is empty", "for example --sizes 1,4,8GiB")
    unit = next((_unit(p) for p in reversed(items) if _unit(p)), "GiB")
    out = []
    for item in items:
        try:
            out.append(parse_bytes(item if _unit(item) else item + unit))
        except ValueError as exc:
            raise UsageError(f"--sizes: {exc}", "for example --sizes 1,4,8GiB or 512MiB,2GiB") from None
    return out


def _unit(item: str) -> str:
    i = len(item)
    while i > 0 and item[i - 1].isalpha():
        i -= 1
    return item[i:]


@click.command("bandwidth")
@click.option("--sizes", default=None, help="Working-set sizes, e.g. 1,4,8,16GiB (default: those that fit in memory).")
@click.option("--threads", type=int, default=None, help="Reader threads (default: every core).")
@click.option("--device", type=click.Choice(["cpu", "cuda", "mps"]), default="cpu", show_default=True,
              help="Where the engine runs; cuda and mps need torch.")
@click.option("--passes", type=click.IntRange(min=1), default=5, show_default=True,
              help="Timed passes per size (best is reported).")
@click.option("--method", type=click.Choice(["auto", "c", "numpy"]), default="auto", show_default=True,
              help="CPU reader: the compiled C kernel, or threaded numpy.")
@output_options
@click.pass_obj
def cmd(
    app: AppContext,
    sizes: str | None,
    threads: int | None,
    device: str,
    passes: int,
    method: str,
    json_path: str | None,
    html_path: str | None,
    db_path: str | None,
    no_save: bool,
) -> int:
    """Measure pure read-stream memory bandwidth per working-set size, on every core (GB/s = 10^9 B/s)."""
    planned = parse_sizes(sizes)
    params = {"sizes": planned, "threads": threads, "device": device, "passes": passes, "method": method}
    job = BandwidthJob(planned, device=device, threads=threads, passes=passes, method=method,
                       progress=(None if app.quiet
                                 else lambda s: app.err.print(f"probing {s}", style="dim", markup=False)))
    sinks = output_sinks(json_path=json_path, html_path=html_path, db_path=db_path, no_save=no_save)
    run = run_job(job, sinks, head=envelope("bandwidth", params, environment()))
    body: BandwidthBody = run.written.body if run.written is not None else BandwidthBody()
    if run.interrupted:
        measured = body.points or ()
        app.err.print(f"Interrupted: {len(measured)} size(s) measured and kept.", markup=False)
        for line in report.point_lines(measured):
            app.err.print(line, markup=False, highlight=False)
        return exitcodes.INTERRUPTED
    console = app.err if json_path == "-" else app.out
    for line in report.report_lines(body):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return exitcodes.OK
