"""`servecheck bandwidth`: read-stream bandwidth per working-set size, the honest roofline denominator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from servecheck import exitcodes
from servecheck.analysis.roofline import parse_bytes
from servecheck.cli.common import Recorder, output_options
from servecheck.cli.context import AppContext
from servecheck.envinfo import environment
from servecheck.errors import UsageError
from servecheck.probe import GIB, BandwidthResult, ProbePoint, measure_bandwidth
from servecheck.results.jsonout import envelope

UNITS_LINE = "GB/s = 10^9 bytes per second; sizes in GiB = 2^30 bytes, MiB = 2^20 bytes"


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


def fmt_size(nbytes: int) -> str:
    """Binary units, as the sizes are given: 8 MiB stays 8 MiB rather than 0.01 GiB."""
    if nbytes >= GIB:
        return f"{nbytes / GIB:.2f} GiB"
    return f"{nbytes / (1 << 20):.1f} MiB"


def point_lines(result: BandwidthResult) -> list[str]:
    return point_lines_of(result.points)


def point_lines_of(points: Sequence[ProbePoint]) -> list[str]:
    lines = []
    for p in points:
        line = f"{fmt_size(p.bytes):>10}  {p.gb_s:8.1f} GB/s  (median {p.low_gb_s:.1f})"
        four, huge = p.run("4k"), p.run("huge")
        if p.pages_differ and four and huge:
            line += f"   4 KiB pages {four.best_gb_s:.1f}, huge pages {huge.best_gb_s:.1f} GB/s"
        lines.append(line)
    return lines


def report_lines(result: BandwidthResult) -> list[str]:
    who = f"{result.threads} threads, " if result.device == "cpu" else ""
    lines = [f"bandwidth  device {result.device}  {result.method}, {who}best of {result.passes} passes", ""]
    lines += point_lines(result)
    lines += [f"skipped {fmt_size(b)}: {reason}" for b, reason in result.skipped]
    lines += [f"note: {n}" for n in result.notes]
    if len(result.points) > 1:
        lines.append("use the figure at the size closest to the model's resident size: bandwidth falls as the working set grows")
    lines.append(UNITS_LINE)
    return lines


def bandwidth_doc(result: BandwidthResult, params: dict[str, Any]) -> dict[str, Any]:
    return {**envelope("bandwidth", params, environment()), **result.to_dict()}


@click.command("bandwidth")
@click.option("--sizes", default=None, help="Working-set sizes, e.g. 1,4,8,16GiB (default: those that fit in memory).")
@click.option("--threads", type=int, default=None, help="Reader threads (default: every core).")
@click.option("--device", type=click.Choice(["cpu", "cuda", "mps"]), default="cpu", show_default=True,
              help="Where the engine runs; cuda and mps need torch.")
@click.option("--passes", type=click.IntRange(min=1), default=5, show_default=True, help="Timed passes per size (best is reported).")
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
    recorder = Recorder(json_path=json_path, html_path=html_path, db_path=db_path, no_save=no_save)
    head = envelope("bandwidth", params, environment())
    measured: list[ProbePoint] = []

    def keep(point: ProbePoint) -> None:
        measured.append(point)
        recorder.partial({**head, "device": device, "points": [p.to_dict() for p in measured]})

    try:
        recorder.start({**head, "points": []})
        result = measure_bandwidth(planned, device=device, threads=threads, passes=passes, method=method, on_point=keep,
                                   progress=None if app.quiet else lambda s: app.err.print(f"probing {s}", style="dim", markup=False))
        recorder.finish({**head, **result.to_dict()})
    except KeyboardInterrupt:
        recorder.interrupted()
        app.err.print(f"Interrupted: {len(measured)} size(s) measured and kept.", markup=False)
        for line in point_lines_of(measured):
            app.err.print(line, markup=False, highlight=False)
        return exitcodes.INTERRUPTED
    finally:
        recorder.close()
    console = app.err if json_path == "-" else app.out
    for line in report_lines(result):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return exitcodes.OK
