"""The log run as a section of the HTML report (`report.html` draws the page around it; the
terminal lines are `report.lines.log`, registered beside it)."""

from __future__ import annotations

from collections.abc import Sequence

from servecheck.model.bodies.common import LogFinding, LogLine
from servecheck.model.bodies.log import LogBody
from servecheck.model.result import RunResult
from servecheck.model.readings import RunReading
from servecheck.report.svg import (
    esc,
)

from servecheck.report.html_kit import excerpt, fmt, table, verdict_line


def section(run: RunResult[LogBody], reading: RunReading) -> str:
    return log_findings(run.body.findings, run.body.lines, reading.log_audit)


def log_findings(findings: Sequence[LogFinding], lines: Sequence[LogLine], word: str | None) -> str:
    """A log audit's word, its findings and the WARNING/ERROR lines: the `log` command's, or a --serve run's."""
    # value and provenance columns only where the document has them: older documents render as they did
    with_value = any(f.value is not None for f in findings)
    with_provenance = any(f.provenance for f in findings)
    rows = [
        [fmt(f.feature), f'<span class="status-{esc((f.status or "").replace(" ", "-"))}">{fmt(f.status)}</span>',
         *([fmt(f.value)] if with_value else []), excerpt(f.line), fmt(f.meaning),
         *([fmt(f.provenance)] if with_provenance else [])]
        for f in findings
    ]
    headers = ["feature", "status", *(["value"] if with_value else []), "evidence", "meaning",
               *(["provenance"] if with_provenance else [])]
    parts = [verdict_line("Verdict", word), "<h3>Findings</h3>", table(headers, rows)]
    if lines:
        line_rows = [[fmt(line.level), excerpt(line.text)] for line in lines]
        parts.append("<details><summary>Warning and error lines</summary>" + table(["level", "line"], line_rows)
                     + "</details>")
    return "\n".join(parts)
