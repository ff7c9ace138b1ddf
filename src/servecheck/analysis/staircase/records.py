"""The staircase analysis's records: what it takes in (`MeasuredBatch`), what it decides for a batch,
a point and the run, the findings it names, and how they are written into the body (`record`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import get_args

from servecheck.analysis.findings import Finding
from servecheck.analysis.staircase.windows import WindowReading
from servecheck.analysis.stats import Summary
from servecheck.analysis.witness import Reading
from servecheck.model.bodies import staircase as shape
from servecheck.model.bodies.staircase import RISING_RATIO, Evidence, Schedule, Trend, Verdict
from servecheck.model.reason import Reason
from servecheck.model.records import BatchResult

DEFINITE_VERDICTS: frozenset[Verdict] = frozenset(get_args(Schedule))  # the verdicts that claim a schedule

# The sum of the server's self-reported per-request rates is seed 000's trap: a queue's sum is N
# times the true aggregate (350 vs 91 tok/s). On a batching server the two agree to a few percent
# (each self-reported rate leaves out the request's prefill: 166.7 vs 164.2 tok/s, 1.5%, on real
# llama.cpp --parallel 4), so the sum is called misleading only when it is more than this off.
MISLEADING_SUM_FRAC = 0.10

# The stopwatch's evidence (the client's clock alone), as against the server's witnesses.
STOPWATCH: frozenset[Evidence] = frozenset({"completion_times", "generation_windows"})


@dataclass(frozen=True, slots=True)
class BatchVerdict:
    """The verdict on one batch and the numbers that decided it."""

    n: int
    verdict: Verdict
    reason: Reason
    single_s: float | None = None
    group_sizes: tuple[int, ...] = ()
    steps_s: tuple[float, ...] = ()  # release -> first group, then group -> group (group means)
    step_ratios: tuple[float, ...] = ()  # steps / single time
    spread_s: float | None = None  # last finish - first finish
    spread_ratio: float | None = None  # spread / single time
    # the first finish over the single time: about 1 in a queue (the first request ran alone, in the
    # same minute as the rest), near last_over_single in a batch (everyone finishes together, late)
    first_over_single: float | None = None
    last_over_single: float | None = None
    max_gap_ratio: float | None = None  # largest gap between consecutive finishes / single time
    evidence: tuple[Evidence, ...] = ()  # what decided a definite verdict
    reference_disagrees: bool = False  # a staircase decided by its own steps against an off N=1 time
    witnesses: tuple[Reading, ...] = ()  # what the server's witnesses read, agreeing or not
    times_verdict: Verdict | None = None  # what the finish times alone said, when windows or witnesses changed it
    slots: int | None = None  # a partial's requests at once (the finish groups', or the windows')
    windows: WindowReading | None = None  # what the generation windows showed, when they showed anything
    # witnesses that read another schedule than a clean stopwatch verdict, which stood: a finding
    contradicted_by: tuple[Reading, ...] = ()
    decided_by_witness: bool = False  # the times could not decide and the server's word did
    # the stopwatch verdicts of other batches ("N=4 rep 1 staircase") that set aside the schedule this
    # batch's witnesses decided: the batch is then undecided and its witnesses are in contradicted_by
    overruled_by: tuple[Reason, ...] = ()

    @property
    def stopwatch_clean(self) -> bool:
        """A definite verdict that no witness may withhold: a staircase (nothing on the client fakes
        evenly spaced finishes one request-time apart; a stall bunches finishes, it never spaces
        them), or any schedule the generation windows confirm. A cluster from the finishes alone is
        not: a client that read four queued finishes at the end of one stall sees four together."""
        if self.verdict not in DEFINITE_VERDICTS or self.decided_by_witness:
            return False
        return self.verdict == "staircase" or "generation_windows" in self.evidence

    def record(self) -> shape.BatchVerdict:
        w = self.windows
        return shape.BatchVerdict(
            verdict=self.verdict, reason=self.reason, evidence=self.evidence, times_verdict=self.times_verdict,
            reference_disagrees=self.reference_disagrees, witnesses=tuple(r.record() for r in self.witnesses),
            slots=self.slots,
            windows=None if w is None else shape.Windows(schedule=w.schedule, open_max=w.open_max,
                                                         description=w.description),
            contradicted_by=tuple(r.record() for r in self.contradicted_by), decided_by_witness=self.decided_by_witness,
            overruled_by=self.overruled_by,
            single_s=self.single_s, group_sizes=self.group_sizes, steps_s=self.steps_s, step_ratios=self.step_ratios,
            spread_s=self.spread_s, spread_ratio=self.spread_ratio, first_over_single=self.first_over_single,
            last_over_single=self.last_over_single,
            max_gap_ratio=self.max_gap_ratio,
        )


@dataclass(frozen=True, slots=True)
class MeasuredBatch:
    """One measured batch of the staircase run: N requests released together, repetition `rep`."""

    n: int
    rep: int
    batch: BatchResult


@dataclass(frozen=True, slots=True)
class BatchAnalysis:
    n: int
    rep: int
    finish_s: tuple[float, ...]  # ok requests, seconds from release, in finishing order
    tokens: tuple[int, ...]  # their tokens, same order
    aggregate_tok_s: float | None
    dispatch_skew_s: float
    verdict: BatchVerdict
    queue_s: tuple[float | None, ...]  # per request, finishing order
    self_reported_sum_tok_s: float | None
    effective_concurrency: float | None = None  # Little's law: sum of latencies / wall
    token_interval_cv: float | None = None  # spread of inter-token intervals (median per-request CV)

    @property
    def self_reported_misleading(self) -> bool | None:
        """True when the self-reported sum is more than MISLEADING_SUM_FRAC off the true aggregate."""
        if self.self_reported_sum_tok_s is None or not self.aggregate_tok_s:
            return None
        return abs(self.self_reported_sum_tok_s / self.aggregate_tok_s - 1.0) > MISLEADING_SUM_FRAC


@dataclass(frozen=True, slots=True)
class LevelAnalysis:
    """One N across its repetitions."""

    n: int
    finish_s: tuple[float, ...]  # those of one measured batch: the rep `shown_rep` (never a composite)
    tokens: tuple[int, ...]  # what that batch's requests produced, in finishing order
    aggregate: Summary | None
    verdict: Verdict
    reason: Reason
    batches: tuple[BatchAnalysis, ...]
    evidence: tuple[Evidence, ...] = ()
    shown_rep: int | None = None  # the rep whose aggregate is the median over the reps
    decided_by_witness: bool = False  # the definite verdict rests on the server's word alone

    @property
    def reps_taken(self) -> int:
        return len(self.batches)

    @property
    def aggregate_tok_s(self) -> float | None:
        return None if self.aggregate is None else self.aggregate.median


@dataclass(frozen=True, slots=True)
class StaircaseAnalysis:
    single_s: float | None
    points: tuple[LevelAnalysis, ...]
    verdict: Verdict
    verdict_reason: Reason
    trend: Trend
    trend_reason: Reason
    trend_ratios: dict[int, float]
    modal_tokens: int | None
    invalid: tuple[Finding, ...] = ()
    warnings: tuple[Finding, ...] = ()
    single_times_s: tuple[float, ...] = ()  # every N=1 measurement behind `single_s`, in run order
    evidence: tuple[Evidence, ...] = ()  # what decided the run verdict
    # per checked N: the client's timing error as a fraction of that point's last finish, the most
    # it moves the aggregate (tokens / last finish); above FIGURE_FRAC the aggregate is client-bound
    aggregate_error_frac: dict[int, float] = field(default_factory=dict)
    # the N > 1 whose trend is read from their schedule: queues whose generating windows never
    # overlapped, where hiding each request's prefill could gain at most `prefill_gain_bound`
    trend_by_schedule: tuple[int, ...] = ()
    prefill_gain_bound: float | None = None
    # per N > 1 that is a queue by its windows: what prefill done during the request before could have gained
    # it, from its own batches' stamps (`trend.hidden_prefill_gain`); flat from its schedule at or below 1.15x
    hidden_prefill_gain: dict[int, float] = field(default_factory=dict)
    # the agg(N)/agg(1) at or above which the trend reads rising: the rule travels with the run it judged
    trend_rising_ratio: float = RISING_RATIO

    @property
    def decided_by_witness(self) -> bool:
        """The run's definite verdict rests on the server's word alone (the stopwatch was ambiguous)."""
        return self.verdict in DEFINITE_VERDICTS and not STOPWATCH.intersection(self.evidence)

    @property
    def single_spread(self) -> float | None:
        """Slowest / fastest N=1 time - 1: how far the single-request reference moved during the run."""
        t = self.single_times_s
        return max(t) / min(t) - 1.0 if len(t) >= 2 and min(t) > 0 else None

    @property
    def valid(self) -> bool:
        return not self.invalid

    def record(self) -> shape.StaircaseBody:
        """The body fields this analysis decides; the run adds its own (design, server, points with their
        raw requests: `experiments.staircase.StaircaseResult.body`). A new field of the analysis is written
        here and in the body record, and nowhere else."""
        return shape.StaircaseBody(
            verdict=self.verdict, verdict_reason=self.verdict_reason, trend=self.trend, trend_reason=self.trend_reason,
            trend_ratios={str(n): r for n, r in sorted(self.trend_ratios.items())},
            single_s=self.single_s, single_times_s=self.single_times_s, single_spread=self.single_spread,
            evidence=self.evidence, decided_by_witness=self.decided_by_witness,
            trend_by_schedule=self.trend_by_schedule, prefill_gain_bound=self.prefill_gain_bound,
            hidden_prefill_gain={str(n): g for n, g in sorted(self.hidden_prefill_gain.items())},
            modal_tokens=self.modal_tokens, trend_rising_ratio=self.trend_rising_ratio,
            invalid=tuple(f.record() for f in self.invalid), warnings=tuple(f.record() for f in self.warnings),
        )
