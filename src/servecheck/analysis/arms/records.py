"""What the arms analysis takes in and decides, pure: a cell (one rep of one arm), an arm's estimates and
label, the position bias, the drift, a deviant cell, a warning and the whole analysis; and the rules
those records and the labels read (what counts as a rise, as no gain, the reps and gauge cells behind a
label, the bias limit)."""

from __future__ import annotations

from dataclasses import dataclass, field

from servecheck.model.bodies import arms as shape
from servecheck.model.bodies.arms import INTERVAL_LEVEL, BiasMethod, Label
from servecheck.analysis.findings import Finding
from servecheck.model.reason import Reason, Text


# A rise counts only when the whole interval of the within-rep ratio lies above 1: a median above
# 1 with an interval reaching below it is a gain the reps cannot tell from noise.
RISE_INTERVAL_FLOOR = 1.0
# ...and only when the median itself is at least 5% above serial. Even a strictly serial server
# gains a few percent when requests queue at the server instead of waiting on the client's
# round trip; the seed's drift between burst and plateau (8.2%) is of the same order.
MIN_RISE = 1.05
# `none` is a claim too: the aggregate is shown not to gain materially, its whole interval below
# this. A strictly serial server's within-rep ratios sit at 0.95-1.06 on a quiet machine; the
# seed's pipelining gain (+9%) is caught first by the rise rule, so the two words never overlap
# on one arm: an arm that neither shows a rise nor shows the absence of one is `inconclusive`.
NO_GAIN_CEILING = 1.10
# The seed's analyser stops reporting a headline when one arm's median differs by more than 10%
# between the positions it occupied: a bias that size is as large as the effects being measured.
DEFAULT_BIAS_LIMIT = 0.10
# A cell whose total output is more than OUTPUT_LENGTH_TOLERANCE (5%) away from the run's modal
# output did not do the same work: it is named (deviant_cells) so nobody compares its wall clock.
# Burst-to-plateau loss of the serial arm beyond DRIFT_LIMIT (analysis.rules), either way, is warned of.
# A per-user rate change under FIGURE_FRAC (analysis.rules, 2%) rounds to "0%" or "1%" in words;
# calling that a cost misleads.
# Below three within-rep ratios there is no interval to speak of: one ratio gives a zero-width
# "interval" and two give [min, max], which covers the median only half the time. A rise needs at
# least this many reps behind it; fewer label every arm `none` and say why.
MIN_REPS_FOR_RISE = 3
# The server's gauges speak for an arm when at least this share of its cells (and at least
# MIN_REPS_FOR_RISE) had enough readings. A scheduler's limit is the same in every cell, so cells
# read and none showing two running is evidence; under a busy-laptop load some reads time out
# (vLLM --max-num-seqs 1: 2- and 4-way stayed inconclusive over 12 reps while every cell the
# gauges did read showed one running).
MIN_GAUGE_CELL_SHARE = 0.5
# INTERVAL_LEVEL, the level the intervals aim at, is the arms body's word (model.bodies.arms): the
# reports print it.


@dataclass(frozen=True, slots=True)
class Cell:
    """One rep of one arm, reduced to the numbers the analysis compares."""

    rep: int
    position: int
    concurrency: int
    wall_s: float  # release to the last token: the clock that produced `tokens`
    tokens: int  # generated tokens actually produced, summed over the cell's requests
    decode_tokens: int  # tokens after each request's first (the first is the prefill's)
    decoding_union_s: float  # time during which at least one request of the cell was decoding
    decoding_sum_s: float  # sum of every request's own first-to-last-token time
    per_user_rate_tok_s: float | None  # median over requests of (tokens - 1) / (last - first token)
    ttft_s: float | None  # median time to first token
    start_s: float = 0.0  # release time, seconds from the run start
    batch_wall_s: float | None = None  # release to the last response's end; recorded, never compared
    run: int = 0  # which pooled run the cell came from
    failed: int = 0  # requests that did not finish ok
    # The most requests the server's own gauges showed running at once during the cell (None when
    # it has no gauges or the cell was too short for enough readings).
    peak_running: int | None = None
    # The longest late window of the client's own that held one of the cell's stamps, beyond the rule's
    # tolerance (analysis.client_timing); 0 where the client vouched for it. A late cell's rep is no evidence.
    client_late_ms: float = 0.0
    # How long a hop that buffers the stream may have held one of its events, beyond the same tolerance
    # (analysis.transit); 0 where every stream arrived as the server wrote it. Such a rep is no evidence either.
    hop_held_ms: float = 0.0

    @property
    def aggregate_tok_s(self) -> float | None:
        return self.tokens / self.wall_s if self.wall_s > 0 else None

    @property
    def generation_tok_s(self) -> float | None:
        """What the generation stage delivered while it was busy."""
        return self.decode_tokens / self.decoding_union_s if self.decoding_union_s > 0 else None

    @property
    def mean_decoding(self) -> float | None:
        """Average number of requests decoding at once while any was."""
        return self.decoding_sum_s / self.decoding_union_s if self.decoding_union_s > 0 else None

    def record(self, *, deviant: bool) -> shape.ArmsCell:
        """The cell as the document records it (`deviant`: the analysis named it, `ArmsAnalysis.deviant`)."""
        return shape.ArmsCell(
            rep=self.rep, position=self.position, concurrency=self.concurrency, run=self.run, start_s=self.start_s,
            wall_s=self.wall_s, batch_wall_s=self.batch_wall_s, tokens=self.tokens, decode_tokens=self.decode_tokens,
            decoding_union_s=self.decoding_union_s, decoding_sum_s=self.decoding_sum_s,
            aggregate_tok_s=self.aggregate_tok_s, generation_tok_s=self.generation_tok_s,
            per_user_rate_tok_s=self.per_user_rate_tok_s, ttft_s=self.ttft_s, failed=self.failed,
            peak_running=self.peak_running, deviant=deviant, client_late_ms=self.client_late_ms or None,
            hop_held_ms=self.hop_held_ms or None,
        )


@dataclass(frozen=True, slots=True)
class Estimate:
    """A median of within-rep ratios with its interval."""

    median: float
    lo: float
    hi: float
    n: int
    level: float = INTERVAL_LEVEL  # the chance the interval covers the true median

    @property
    def rises(self) -> bool:
        return self.n >= MIN_REPS_FOR_RISE and self.lo > RISE_INTERVAL_FLOOR and self.median >= MIN_RISE


@dataclass(frozen=True, slots=True)
class ArmResult:
    concurrency: int
    n_cells: int
    aggregate_tok_s: float | None  # medians across reps
    generation_tok_s: float | None
    per_user_rate_tok_s: float | None
    ttft_s: float | None
    mean_decoding: float | None
    aggregate_speedup: Estimate | None
    generation_gain: Estimate | None
    per_user_rate_ratio: Estimate | None
    ttft_multiple: Estimate | None
    label: Label
    label_reason: Text = ""  # what decided the label (labels.label_with_reason)

    @property
    def efficiency(self) -> float | None:
        return None if self.aggregate_speedup is None else self.aggregate_speedup.median / self.concurrency

    @property
    def per_user_rate_change(self) -> float | None:
        return None if self.per_user_rate_ratio is None else self.per_user_rate_ratio.median - 1.0

    def record(self) -> shape.Arm:
        return shape.Arm(
            concurrency=self.concurrency, cells=self.n_cells,
            aggregate_speedup=_median(self.aggregate_speedup),
            aggregate_speedup_interval=_interval(self.aggregate_speedup), generation_gain=_median(self.generation_gain),
            generation_gain_interval=_interval(self.generation_gain), per_user_rate_change=self.per_user_rate_change,
            per_user_rate_change_interval=None if self.per_user_rate_ratio is None
            else (self.per_user_rate_ratio.lo - 1.0, self.per_user_rate_ratio.hi - 1.0),
            ttft_multiple=_median(self.ttft_multiple), ttft_multiple_interval=_interval(self.ttft_multiple),
            efficiency=self.efficiency, label=self.label, label_reason=self.label_reason,
            aggregate_tok_s=self.aggregate_tok_s, generation_tok_s=self.generation_tok_s,
            per_user_rate_tok_s=self.per_user_rate_tok_s, ttft_s=self.ttft_s, mean_decoding=self.mean_decoding,
        )


def _median(e: Estimate | None) -> float | None:
    return None if e is None else e.median


def _interval(e: Estimate | None) -> tuple[float, float] | None:
    return None if e is None else (e.lo, e.hi)


@dataclass(frozen=True, slots=True)
class PositionBias:
    """The widest spread of one arm's median throughput across the positions it occupied."""

    concurrency: int
    spread: float  # fraction: (highest - lowest) / lowest
    method: BiasMethod
    by_position: tuple[tuple[int, float], ...] = ()  # (position, median aggregate tok/s)

    def record(self) -> shape.PositionBias:
        return shape.PositionBias(
            concurrency=self.concurrency, spread=self.spread, method=self.method,
            by_position=tuple(shape.PositionMedian(position=p, aggregate_tok_s=v) for p, v in self.by_position),
        )


@dataclass(frozen=True, slots=True)
class SerialDrift:
    """The serial arm's throughput in the first reps against the last (burst against plateau)."""

    first_tok_s: float
    last_tok_s: float
    reps_each: int
    run: int = 0  # with pooled runs, the one that lost most

    @property
    def loss(self) -> float:
        return 1.0 - self.last_tok_s / self.first_tok_s if self.first_tok_s > 0 else 0.0

    def record(self) -> shape.ArmsDrift:
        return shape.ArmsDrift(first_tok_s=self.first_tok_s, last_tok_s=self.last_tok_s, loss=self.loss,
                               reps_each=self.reps_each, run=self.run)


@dataclass(frozen=True, slots=True)
class DeviantCell:
    run: int
    rep: int
    concurrency: int
    tokens: int
    modal_tokens: int

    @property
    def deviation(self) -> float:
        return (self.tokens - self.modal_tokens) / self.modal_tokens

    def record(self) -> shape.DeviantCell:
        return shape.DeviantCell(run=self.run, rep=self.rep, concurrency=self.concurrency, tokens=self.tokens,
                                 modal_tokens=self.modal_tokens, deviation=self.deviation)

    def describe(self) -> Reason:
        return Reason("arms.deviant_cell", rep=self.rep, concurrency=self.concurrency, tokens=self.tokens,
                   modal=self.modal_tokens, deviation=self.deviation)


@dataclass(frozen=True, slots=True)
class ArmsAnalysis:
    arms: tuple[ArmResult, ...]
    position_bias: PositionBias | None
    bias_limit: float
    drift: SerialDrift | None
    deviant_cells: tuple[DeviantCell, ...]
    headline: Reason | None
    refusal: Reason | None
    warnings: tuple[Finding, ...] = field(default=())

    @property
    def headline_refused(self) -> bool:
        return self.refusal is not None

    def arm(self, concurrency: int) -> ArmResult:
        for a in self.arms:
            if a.concurrency == concurrency:
                return a
        raise KeyError(concurrency)

    def deviant(self, cell: Cell) -> bool:
        """Whether `cell` is one of the deviant cells (its output far from its run's modal output)."""
        return any((d.run, d.rep, d.concurrency) == (cell.run, cell.rep, cell.concurrency) for d in self.deviant_cells)

