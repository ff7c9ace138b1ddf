"""A point and the run, pure: `analyse_point` puts a point's grouping, estimate, counters and pays
together; `analyse_speculative` gives the run's verdict and, with a baseline, where it stops paying; a hop
that buffered any stream leaves every point undecided, without an estimate."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from servecheck.analysis.speculative.counters import CounterCheck, MetricDeltas, alone, check_counters
from servecheck.analysis.speculative.grouping import Stream, group_steps
from servecheck.analysis.speculative.paying import Pays, pays, stops_paying
from servecheck.analysis.speculative.verdict import Estimate, estimate, run_verdict
from servecheck.analysis.stats import median
from servecheck.model.bodies.speculative import PROMPT_KINDS, SpecVerdict, SpeculativePoint, kind_label
from servecheck.model.reason import Reason, Text


@dataclass(frozen=True, slots=True)
class SpecPointAnalysis:
    """One N and prompt kind as the run records it: the estimate from the streams' arrivals, the rates,
    the server's counters beside it, and against the baseline (None without one)."""

    n: int
    kind: str
    estimate: Estimate
    grouping: tuple[Text, ...]  # how the grouped streams' arrivals were split into steps (Grouping.method)
    failed: int
    counters: CounterCheck
    per_stream_tok_s: float | None
    aggregate_tok_s: float | None
    baseline_per_stream_tok_s: float | None
    paid: Pays | None
    late_groups: int = 0  # groups left out: the client was late for the read that opened them
    coalesced: int = 0  # streams whose groups were bursts made in transit
    extra_reps: int = 0  # reps taken beyond the planned ones because pays / costs was undecided

    def record(self) -> SpeculativePoint:
        est, paid, counters = self.estimate, self.paid, self.counters
        return SpeculativePoint(
            n=self.n, prompt_kind=self.kind, tokens_per_step=est.tokens_per_step,  # type: ignore[arg-type]  # a PROMPT_KIND
            tokens_per_step_interval=est.interval, per_stream_tok_s=self.per_stream_tok_s,
            aggregate_tok_s=self.aggregate_tok_s, pays=None if paid is None else paid.verdict, verdict=est.verdict,
            reason=est.reason, steps=est.steps, streams=est.streams, grouped=est.grouped, grouping=self.grouping,
            problems=est.problems, failed=self.failed, server_tokens_per_step=counters.server_tokens_per_step,
            server_acceptance=counters.acceptance, counters_agree=counters.agrees, counters_note=counters.note,
            baseline_per_stream_tok_s=self.baseline_per_stream_tok_s, pays_ratio=None if paid is None else paid.ratio,
            pays_interval=None if paid is None else paid.interval, pays_reason=None if paid is None else paid.reason,
            client_late_groups=self.late_groups, coalesced_streams=self.coalesced,
            extra_reps=None if paid is None else self.extra_reps,
        )


def analyse_point(n: int, kind: str, streams: Sequence[Stream], *, failed: int, rates: Sequence[float],
                  aggregates: Sequence[float], baseline_rates: Sequence[float] | None,
                  metrics: MetricDeltas | None = None, extra_reps: int = 0) -> SpecPointAnalysis:
    """A point from its streams (the requests that finished), their decode rates, the batches' aggregates
    and, with a baseline, its streams' rates (None without one); `extra_reps` of its reps were taken
    because the planned ones left pays / costs undecided."""
    groupings = [group_steps(s) for s in streams]
    est = estimate(groupings)
    paid = None if baseline_rates is None else repeated(pays(rates, baseline_rates), extra_reps)
    return SpecPointAnalysis(
        n=n, kind=kind, estimate=est, grouping=tuple(sorted({g.method for g in groupings if g.ok}, key=str)),
        failed=failed,
        counters=check_counters(streams, est, metrics), per_stream_tok_s=median(rates) if rates else None,
        aggregate_tok_s=median(aggregates) if aggregates else None,
        baseline_per_stream_tok_s=median(baseline_rates) if baseline_rates else None,
        paid=paid, extra_reps=extra_reps,
        late_groups=sum(g.late_groups for g in groupings),
        coalesced=sum(g.problem_code == "coalesced" for g in groupings),
    )


def pays_undecided(point: SpecPointAnalysis) -> bool:
    """Whether the point's pays / costs is still open against a baseline: the one figure another pair of
    target and baseline batches could decide (the experiment repeats such a point, up to its bound)."""
    return point.paid is not None and point.paid.verdict == "inconclusive"


def repeated(paid: Pays, extra_reps: int) -> Pays:
    """The verdict's reason with the reps a still-open figure took beyond the planned ones."""
    if extra_reps <= 0:
        return paid
    still_open = paid.verdict == "inconclusive"
    return Pays(paid.verdict, paid.ratio, paid.interval, (
        Reason("speculative.repeated", pays_reason=paid.reason, extra_reps=extra_reps, still_open=still_open)))


@dataclass(frozen=True, slots=True)
class SpeculativeAnalysis:
    """The run's verdict from its points, and with a baseline the first N that stops paying per prompt kind."""

    verdict: SpecVerdict
    reason: Reason
    stops_paying_n: dict[str, int | None]
    stops_paying_reason: dict[str, Reason]


def behind_a_hop(points: Sequence[SpecPointAnalysis]) -> list[SpecPointAnalysis]:
    """The points as the run can stand by them: where any stream arrived coalesced in transit, a hop buffered
    the run's streams, so no point's groups are steps. Every point with an estimate is left undecided, named,
    and keeps no tokens per step: a figure made of bursts would read as a measurement in the table, in `diff`
    and in the history (what it read alone stays in the reason, as that). The server's counters are not held
    against it either: a disagreement with bursts is no finding about the server."""
    hop = sum(p.coalesced for p in points)
    if not hop:
        return list(points)
    return [p if p.estimate.tokens_per_step is None else replace(
                p, estimate=replace(p.estimate, tokens_per_step=None, interval=None, verdict="inconclusive", reason=(
                    Reason("speculative.point_behind_a_hop", streams=hop, alone=p.estimate.reason))),
                counters=p.counters if p.counters.server_tokens_per_step is None else alone(
                    p.counters.server_tokens_per_step, p.counters.acceptance))
            for p in points]


def analyse_speculative(points: Sequence[SpecPointAnalysis], *, with_baseline: bool) -> SpeculativeAnalysis:
    # the reason names each kind as the reports do ("prose", "verbatim repetition"), not by its JSON value
    verdict, reason = run_verdict([p.estimate for p in points], [kind_label(p.kind) for p in points])
    hop = sum(p.coalesced for p in points)
    if hop and verdict != "inconclusive":
        # a hop that buffers does so for every stream: where it showed, the other streams' groups may be bursts too
        verdict, reason = "inconclusive", Reason("speculative.run_behind_a_hop", streams=hop, points_read=reason)
    stops: dict[str, int | None] = {}
    stops_reason: dict[str, Reason] = {}
    if with_baseline:
        for kind in PROMPT_KINDS:
            by_n = {p.n: p.paid.verdict for p in points if p.kind == kind and p.paid is not None}
            if by_n:
                stops[kind], stops_reason[kind] = stops_paying(by_n)
    return SpeculativeAnalysis(verdict, reason, stops, stops_reason)
