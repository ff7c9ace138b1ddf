"""The bandwidth run as a section of the HTML report (`report.html` draws the page around it; the
terminal lines are `report.lines.bandwidth`, registered beside it)."""

from __future__ import annotations


from servecheck.model.bodies.bandwidth import BandwidthBody
from servecheck.model.result import RunResult
from servecheck.model.readings import RunReading
from servecheck.report.svg import (
    Bar,
    bar_chart,
)

from servecheck.report.html_kit import fmt, fmt_field, kv_table, table


def section(run: RunResult[BandwidthBody], _: RunReading) -> str:
    points = run.body.points or ()
    bars = [
        Bar(f"{p.bytes / 2**30:g} GiB", p.gb_s, "primary", f"{p.bytes / 2**30:g} GiB working set: {p.gb_s:.1f} GB/s")
        for p in points
        if p.bytes is not None and p.gb_s is not None
    ]
    chart = bar_chart(bars, title="Read bandwidth by working-set size", y_label="GB/s") if bars else ""
    return chart + _bandwidth_tables(run.body)


# A point's columns in the order its JSON object keeps them (sorted keys), as the tables always listed them.
PROBE_POINT_COLUMNS = ("bytes", "gb_s", "gb_s_4k", "gb_s_huge", "gib", "low_gb_s", "median_gb_s_4k", "median_gb_s_huge",
                       "pages_differ")


def _bandwidth_tables(b: BandwidthBody) -> str:
    """The probe's settings, its points and the sizes it skipped, laid out as the generic section lays out
    any document: the simple fields in key order, then a table per list of records."""
    # as there, an empty list is a field that reads "—", and a list longer than 16 is not a simple field
    settings = [("device", b.device), ("method", b.method),
                ("notes", b.notes if b.notes is None or len(b.notes) <= 16 else None), ("passes", b.passes),
                ("points", () if b.points == () else None), ("skipped", () if b.skipped == () else None),
                ("threads", b.threads)]
    rows = [(k, v) for k, v in settings if v is not None]
    out = ["<h3>Results</h3>" + kv_table(rows)] if rows else []
    if b.points:
        cells = [[fmt_field(k, getattr(p, k)) for k in PROBE_POINT_COLUMNS] for p in b.points]
        out.append("<h3>points</h3>" + table(PROBE_POINT_COLUMNS, cells))
    if b.skipped:
        out.append("<h3>skipped</h3>" + table(["bytes", "reason"], [[fmt_field("bytes", s.bytes), fmt(s.reason)]
                                                                    for s in b.skipped]))
    return "\n".join(out)
