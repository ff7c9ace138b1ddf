"""A saved run read for its reports: the medians over reps and the words a renderer shows, built
once here so that `show`, the command's own report and the HTML read the same figures. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servecheck.analysis.across import diff_runs, request_rate
from servecheck.analysis.arms import interval_level, median_by_arm
from servecheck.analysis.logaudit import audit_word
from servecheck.analysis.run_verdict import run_verdict
from servecheck.analysis.stats import median
from servecheck.model.bodies.arms import Arm, ArmsBody
from servecheck.model.bodies.check import CheckBody, card_run
from servecheck.model.bodies.common import LogAudit
from servecheck.model.bodies.demo import DemoBody, DemoRun
from servecheck.model.bodies.log import LogBody
from servecheck.model.bodies.staircase import Point, StaircaseBody
from servecheck.model.readings import ArmsReading, ReportReading, RunReading, StaircasePointReading
from servecheck.model.result import RunResult, measured
from servecheck.model.sidebyside import DIFFABLE, Diff, numbered_label


def read_report(runs: Sequence[RunResult[Any]]) -> ReportReading:
    """Every run's reading, and the staircase and arms runs among them side by side (two or more)."""
    return ReportReading(runs=tuple(read_run(r) for r in runs), side_by_side=side_by_side(runs))


def side_by_side(runs: Sequence[RunResult[Any]]) -> Diff | None:
    picked = [(i, r) for i, r in enumerate(runs) if r.command in DIFFABLE]
    if len(picked) < 2:
        return None
    return diff_runs([r for _, r in picked], labels=[numbered_label(r, i + 1) for i, r in picked])


def read_run(run: RunResult[Any]) -> RunReading:
    body = run.body
    return RunReading(
        verdict=run_verdict(run),
        log_audit=log_audit_word(run),
        staircase=tuple(read_point(p) for p in body.points) if isinstance(body, StaircaseBody) else (),
        arms=read_arms(body) if isinstance(body, ArmsBody) else ArmsReading(),
        parts=(tuple(read_demo_run(r) for r in body.runs) if isinstance(body, DemoBody)
               else read_check_cards(run) if isinstance(body, CheckBody) else ()),
    )


def read_check_cards(run: RunResult[CheckBody]) -> tuple[RunReading, ...]:
    """One reading per card, in the document's order: that of the command whose body the card carries
    (read as that command's own run), or an empty one."""
    out = []
    for card in run.body.cards:
        carried = card_run(card)
        out.append(RunReading() if carried is None else read_run(measured(carried[0], carried[1],
                                                                          simulated=run.simulated)))
    return tuple(out)


def read_demo_run(run: DemoRun) -> RunReading:
    """One configuration of a demo: its staircase's points and its log audit's word."""
    return RunReading(
        verdict=run.verdict,
        log_audit=audit_word(run.log_audit.findings) if run.log_audit is not None else None,
        staircase=tuple(read_point(p) for p in run.staircase.points) if run.staircase is not None else (),
    )


def log_audit_word(run: RunResult[Any]) -> str | None:
    """The word of the log findings a run holds: the `log` command's own, or its --serve audit's."""
    body = run.body
    if isinstance(body, LogBody):
        return audit_word(body.findings)
    audit = getattr(body, "log_audit", None)
    return audit_word(audit.findings) if isinstance(audit, LogAudit) else None


def read_point(point: Point) -> StaircasePointReading:
    little = [b.effective_concurrency for b in point.batches if b.effective_concurrency is not None]
    pairs = [(b.self_reported_sum_tok_s, b.aggregate_tok_s) for b in point.batches
             if b.self_reported_sum_tok_s is not None and b.aggregate_tok_s is not None]
    rates = [rate for batch in point.batches for req in batch.requests if (rate := request_rate(req)) is not None]
    flags = [b.self_reported_misleading for b in point.batches if b.self_reported_misleading is not None]
    return StaircasePointReading(
        queue_s=median_queue_s(point),
        effective_concurrency=median(little) if little else None,
        self_reported_sum_tok_s=median([c for c, _ in pairs]) if pairs else None,
        true_aggregate_tok_s=median([t for _, t in pairs]) if pairs else None,
        self_reported_misleading=(not flags or any(flags)) if pairs else None,
        per_user_rate_tok_s=median(rates) if rates else None,
    )


def median_queue_s(point: Point) -> tuple[float, ...] | None:
    """Queue time per finishing rank, the median over the reps that have it for every request."""
    rows = [[q for q in b.queue_s if q is not None] for b in point.batches if b.queue_s and None not in b.queue_s]
    if not rows:
        return None
    return tuple(median([row[i] for row in rows]) for i in range(min(len(row) for row in rows)))


def read_arms(body: ArmsBody) -> ArmsReading:
    cells = body.cells
    return ArmsReading(
        interval_level=arms_interval_level(body.arms),
        aggregate_tok_s=_recorded(body.arms, "aggregate_tok_s",
                                  median_by_arm((c.concurrency, c.aggregate_tok_s) for c in cells)),
        per_user_rate_tok_s=_recorded(body.arms, "per_user_rate_tok_s",
                                      median_by_arm((c.concurrency, c.per_user_rate_tok_s) for c in cells)),
        ttft_s=_recorded(body.arms, "ttft_s", median_by_arm((c.concurrency, c.ttft_s) for c in cells)),
    )


def arms_interval_level(arms: Sequence[Arm]) -> float | None:
    """The one rule both arms reports state their brackets by: the coverage that the fewest reps among
    the arms beyond the serial one with an interval give."""
    reps = [a.cells for a in arms if a.concurrency != 1 and a.aggregate_speedup_interval is not None and a.cells]
    return interval_level(min(reps)) if reps else None


def _recorded(arms: Sequence[Arm], name: str, cell_medians: dict[int, float]) -> dict[int, float]:
    """By concurrency: the arm's own median, else the median over its cells."""
    out: dict[int, float] = {}
    for a in arms:
        if a.concurrency is None:
            continue
        value = getattr(a, name)
        value = value if value is not None else cell_medians.get(a.concurrency)
        if value is not None:
            out[a.concurrency] = value
    return out
