"""The demo run as a section of the HTML report (`report.html` draws the page around it; the
terminal lines are `report.lines.demo`, registered beside it)."""

from __future__ import annotations


from servecheck.model.bodies.demo import DemoBody
from servecheck.model.result import RunResult
from servecheck.model.readings import RunReading

from servecheck.report.html_kit import fmt, kv_table
from servecheck.report.lines.staircase_html import lanes_end, staircase_section
from servecheck.report.lines.log_html import log_findings


def section(run: RunResult[DemoBody], reading: RunReading) -> str:
    """The demo's staircase runs (one per server configuration), each drawn like a staircase run."""
    parts = []
    runs = run.body.runs
    readings = reading.parts if len(reading.parts) == len(runs) else tuple(RunReading() for _ in runs)
    # the same time axis for both configurations: the cluster ends visibly before the staircase
    x_max = max((lanes_end(r.staircase.points) for r in runs if r.staircase is not None), default=0.0) or None
    for r, part in zip(runs, readings):
        parts.append(f"<h3>--parallel {fmt(r.parallel, 0)}: expected {fmt(r.expected)}, got {fmt(r.verdict)}</h3>")
        if r.staircase is not None:
            parts.append(staircase_section(r.staircase, part.staircase, x_max))
        if r.log_audit is not None and r.log_audit.findings:
            parts.append(log_findings(r.log_audit.findings, r.log_audit.lines, part.log_audit))
    return "\n".join(parts) or _demo_nothing_measured(run.body)


def _demo_nothing_measured(body: DemoBody) -> str:
    """A demo stopped before its first point: the simple fields, as the generic section lists them."""
    return "<h3>Results</h3>" + kv_table([("model_path", body.model_path), ("runs", body.runs),
                                          ("as_expected", body.as_expected)])
