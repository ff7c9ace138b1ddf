"""A whole staircase run judged, pure: the entry point (`analyse_staircase`) that puts the batches,
points, run verdict, trend and findings together, and what another rep could still decide (`needs_more`)."""

from __future__ import annotations

from collections.abc import Sequence

from servecheck.analysis.staircase.findings import (
    aggregate_error_fracs,
    aggregate_finding,
    approximate_finding,
    client_finding,
    contamination_finding,
    failed_finding,
    length_finding,
    reference_disagreement_finding,
    reference_finding,
    short_of_request_finding,
    skew_finding,
    witness_finding,
)
from servecheck.analysis.staircase.records import MeasuredBatch, StaircaseAnalysis
from servecheck.analysis.staircase.trend import _trend
from servecheck.analysis.staircase.validity import single_times_s
from servecheck.analysis.staircase.weighing import (
    _run_verdict,
    analyze_batch,
    analyze_point,
    set_aside_witness_decisions,
)
from servecheck.analysis.stats import median
from servecheck.model.client import ClientCheck


def analyse_staircase(
    batches: Sequence[MeasuredBatch],
    *,
    tokens_requested: int,
    client_checks: Sequence[ClientCheck] = (),
    witnesses_decide: bool = True,
) -> StaircaseAnalysis:
    """Judge a staircase run: per-batch verdicts, per-N points, the run verdict, trend and validity;
    `client_checks` are the pre-flight's (a client-bound N makes the run invalid); with
    `witnesses_decide` off (--evidence stopwatch) the server's witnesses never decide a batch."""
    modal, length = length_finding(batches)
    singles = single_times_s(batches, modal)
    single = median(singles) if singles else None
    analysed = set_aside_witness_decisions([analyze_batch(mb, single, modal, witnesses_decide=witnesses_decide)
                                            for mb in batches])
    ns = sorted({b.n for b in analysed})
    noise = {n: [mb.batch.noise for mb in batches if mb.n == n] for n in ns}
    points = tuple(analyze_point(n, [b for b in analysed if b.n == n], noise[n]) for n in ns)
    verdict, verdict_reason, evidence = _run_verdict(points)
    trend, trend_reason, ratios, scheduled, bound, queue_gains = _trend(points, batches)
    fracs = aggregate_error_fracs(points, client_checks)
    invalid = [f for f in (length, failed_finding(batches), skew_finding(batches, single),
                           client_finding(client_checks))
               if f is not None]
    warnings = [
        f
        for f in (
            contamination_finding(batches),
            approximate_finding(batches),
            short_of_request_finding(modal, tokens_requested),
            reference_finding(singles),
            reference_disagreement_finding(points, single),
            aggregate_finding(fracs),
            witness_finding(points),
        )
        if f is not None
    ]
    return StaircaseAnalysis(
        single_s=single,
        points=points,
        verdict=verdict,
        verdict_reason=verdict_reason,
        trend=trend,
        trend_reason=trend_reason,
        trend_ratios=ratios,
        modal_tokens=modal,
        invalid=tuple(invalid),
        warnings=tuple(warnings),
        single_times_s=tuple(singles),
        evidence=evidence,
        aggregate_error_frac=fracs,
        trend_by_schedule=scheduled,
        prefill_gain_bound=bound,
        hidden_prefill_gain=queue_gains,
    )


def needs_more(analysis: StaircaseAnalysis) -> tuple[list[int], bool]:
    """What another rep could decide: the N > 1 points left inconclusive (by their completion times,
    not by a failed request or a contradiction between points), and whether the trend waits on a
    better N=1 reference."""
    if analysis.invalid:
        return [], False
    ns = [p.n for p in analysis.points if p.n > 1 and p.verdict == "inconclusive"]
    return ns, analysis.trend == "inconclusive"
