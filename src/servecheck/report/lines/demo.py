"""The `demo` command's terminal report, from its typed result alone: the two staircase runs side by
side and the lesson they teach. The command prints them after its header; `show` keeps giving a
saved demo run the short rendering, as it always has, so nothing is registered in REPORTS."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from servecheck.model.bodies.demo import DEMO_NS, DemoRun, EmbeddedStaircase
from servecheck.model.bodies.staircase import Point
from servecheck.report.lines import register
from servecheck.report.lines.demo_html import section

TOP_N = max(DEMO_NS)


def cell_for_point(point: Point) -> str:
    finish = " / ".join(f"{t:.2f}" for t in point.finish_s) or "-"
    agg = point.aggregate_tok_s
    return f"finish {finish} s · {agg:.0f} tok/s" if agg is not None else f"finish {finish} s"


def verdict_cell(run: DemoRun) -> str:
    staircase = _staircase(run)
    right = staircase.verdict == run.expected
    mark = "as expected" if right else f"EXPECTED {run.expected}"
    if not staircase.valid:
        mark += ", but the run is invalid" if right else ", run invalid"
    if staircase.complete is False:
        mark += ", interrupted"
    return f"{staircase.verdict} ({mark})"


def trend_cell(run: DemoRun) -> str:
    staircase = _staircase(run)
    last = (staircase.trend_ratios or {}).get(str(TOP_N))
    return f"{staircase.trend}" + (f" (agg N={TOP_N} / N=1 = {last:.2f}x)" if last is not None else "")


def audit_cell(run: DemoRun) -> str:
    audit = run.log_audit
    if audit is None:
        return "log audit not available in this build"
    if audit.error:
        return f"log audit failed: {audit.error}"
    findings = [f"{f.feature}: {f.status}" for f in audit.findings]
    counts = f"{audit.warnings or 0} warning(s), {audit.errors or 0} error(s)"
    return "\n".join([*findings, counts])


def comparison_table(runs: Sequence[DemoRun]) -> Table:
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("")
    for run in runs:
        table.add_column(f"--parallel {run.parallel}")
    table.add_row("verdict", *(verdict_cell(r) for r in runs))
    by_n = [{p.n: p for p in _staircase(r).points} for r in runs]
    for n in DEMO_NS:
        table.add_row(f"N={n}", *(cell_for_point(points[n]) if n in points else "-" for points in by_n))
    table.add_row("trend", *(trend_cell(r) for r in runs))
    table.add_row("server log", *(audit_cell(r) for r in runs))
    return table


def lesson(runs: Sequence[DemoRun]) -> str:
    if not all(r.as_expected for r in runs):
        wrong = ", ".join(f"--parallel {r.parallel} gave {_staircase(r).verdict}" for r in runs if not r.as_expected)
        return (
            f"lesson: not shown this time ({wrong}); a heavily loaded machine blurs the timing: "
            "rerun `servecheck demo` when it is quieter"
        )
    one, many = runs[0], runs[-1]
    return (
        f"lesson: the same binary and model queue requests allowed one at a time (staircase, {_agg_at(one, TOP_N):.0f} "
        f"tok/s at N={TOP_N}) and batch them allowed {many.parallel} (cluster, {_agg_at(many, TOP_N):.0f} tok/s): "
        "\"accepted\" is not \"batched\"; run `servecheck staircase URL` on your own server to see which it does."
    )


def _agg_at(run: DemoRun, n: int) -> float:
    for point in _staircase(run).points:
        if point.n == n and point.aggregate_tok_s is not None:
            return point.aggregate_tok_s
    return float("nan")


def _staircase(run: DemoRun) -> EmbeddedStaircase:
    return run.staircase if run.staircase is not None else EmbeddedStaircase()


register("demo", html=section)
