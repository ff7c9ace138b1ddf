"""The `log` command's terminal report, from its typed result alone: the summary, the findings (each
with its deciding line and where its rule was checked), the WARNING/ERROR lines, the verdict line.
(`servecheck show` prints a saved log run in its short form, report.terminal.)"""

from __future__ import annotations

from servecheck.model.result import RunResult

from rich.console import RenderableType

from collections.abc import Sequence
from typing import Protocol

from rich.console import Console
from rich.table import Table
from rich.text import Text

from servecheck.model.bodies.common import LogFinding
from servecheck.model.bodies.log import LogBody
from servecheck.report.lines import register
from servecheck.report.lines.short import DASH, scalar, table
from servecheck.report.lines.log_html import section

# WARNING/ERROR lines printed in the terminal; the JSON has all of them (up to the scan's cap).
SHOWN_LINES = 20
STATUS_STYLE = {"refused": "bold red", "confirmed": "green", "unconfirmed": "yellow", "not asked": "dim"}


def refused(body: LogBody) -> tuple[LogFinding, ...]:
    return tuple(f for f in body.findings if f.status == "refused")


class FindingRow(Protocol):
    """A finding as the table reads it: a saved one (model.bodies.common.LogFinding) or one just scanned
    (logscan.scan.Finding, the --serve audit)."""

    @property
    def feature(self) -> str | None: ...
    @property
    def status(self) -> str | None: ...
    @property
    def asked(self) -> str | None: ...
    @property
    def value(self) -> float | None: ...
    @property
    def line(self) -> str | None: ...
    @property
    def provenance(self) -> str | None: ...


def findings_table(findings: Sequence[FindingRow]) -> Table:
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    with_value = any(f.value is not None for f in findings)
    for name in ("feature", "status", "asked", *(("value",) if with_value else ()), "evidence"):
        table.add_column(name, overflow="fold")
    for f in findings:
        value = (Text("-" if f.value is None else f"{f.value:g}"),) if with_value else ()
        table.add_row(
            Text(f.feature or "-"),
            Text(f.status or "-", style=STATUS_STYLE.get(f.status or "", "")),
            Text(f.asked or "-"),
            *value,
            evidence_text(f.line, f.provenance),
        )
    return table


def evidence_text(line: str | None, provenance: str | None) -> Text:
    """The deciding line and, under it, where its rule was checked (a real log, or documentation only)."""
    text = Text(line or "no line confirms or refuses it")  # Text, never markup: log lines are untrusted
    if provenance:
        text.append(f"\n  rule {provenance}", style="dim")
    return text


def summary_lines(result: LogBody) -> list[str]:
    lines = [
        f"log {result.path}  engine {result.engine}  {result.lines_total} lines, "
        f"{result.warnings} warnings, {result.errors} errors"
    ]
    lines += [f"note: {n}" for n in result.notes]
    if not result.findings:
        lines.append("no known feature line matched (give the server's flags with --flags to check them)")
    return lines


def warning_lines(result: LogBody, limit: int = SHOWN_LINES) -> list[str]:
    shown = [f"  {ln.line_no or 0:>6} {(ln.level or '').upper():<7} {ln.text or ''}" for ln in result.lines[:limit]]
    hidden = len(result.lines) - len(shown) + (result.lines_dropped or 0)
    if hidden > 0:
        shown.append(f"  ... {hidden} more (all of them in --json)")
    return (["WARNING/ERROR lines:"] + shown) if shown else []


def verdict_line(result: LogBody) -> str:
    refused_ = refused(result)
    if not refused_:
        return "no feature refused"
    asked = ", ".join(f.feature or "-" for f in refused_ if f.requested)
    unasked = ", ".join(f.feature or "-" for f in refused_ if not f.requested)
    parts = [f"{asked} (accepted is not enabled: the lines above say so)"] if asked else []
    if unasked:
        parts.append(f"{unasked} (not switched on by these flags; the lines above show it off)")
    return "REFUSED: " + "; ".join(parts)


def render(console: Console, result: LogBody) -> None:
    for line in summary_lines(result):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if result.findings:
        console.print(findings_table(result.findings))
    for line in warning_lines(result):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    style = "bold red" if refused(result) else "green"
    console.print(verdict_line(result), markup=False, highlight=False, style=style, soft_wrap=True)


def short(run: RunResult[LogBody]) -> list[RenderableType]:
    # value and provenance columns only where the document has them: older documents print as they did
    findings = run.body.findings
    with_value = any(f.value is not None for f in findings)
    with_provenance = any(f.provenance for f in findings)
    headers = ["feature", "status", *(["value"] if with_value else []), "evidence",
               *(["provenance"] if with_provenance else [])]
    rows = [
        [f.feature or DASH, f.status or DASH, *([scalar(f.value)] if with_value else []), f.line or DASH,
         *([f.provenance or DASH] if with_provenance else [])]
        for f in findings
    ]
    return [table(headers, rows)]


register("log", short=short, html=section)
