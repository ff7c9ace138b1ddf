"""What concurrency buys the operator and costs each user: the pure analysis behind `servecheck arms`.

A cell is one rep of one arm (the same requests, `concurrency` of them in flight at once). Speedups
are within-rep ratios against the serial arm, which is what the rotated design supports; the
generation stage is measured from the time during which at least one request was decoding, so a
queue cannot pass for batching.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from servecheck.analysis.cache import record_contaminated
from servecheck.analysis.design import rotation
from servecheck.analysis.rules import DRIFT_LIMIT, FIGURE_FRAC, OUTPUT_LENGTH_TOLERANCE
from servecheck.analysis.stats import median, mode, quantile_interval
from servecheck.model.bodies import arms as shape
from servecheck.model.bodies.arms import INTERVAL_LEVEL, BiasMethod, Label
from servecheck.model.bodies.common import Finding
from servecheck.model.records import NS_PER_S, RequestRecord


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


# --- cells from request records ------------------------------------------------------------


def union_length_ns(intervals: Iterable[tuple[int, int]]) -> int:
    """Total length covered by at least one of the intervals."""
    total = 0
    cur_lo: int | None = None
    cur_hi = 0
    for lo, hi in sorted(i for i in intervals if i[1] > i[0]):
        if cur_lo is None or lo > cur_hi:
            if cur_lo is not None:
                total += cur_hi - cur_lo
            cur_lo, cur_hi = lo, hi
        else:
            cur_hi = max(cur_hi, hi)
    if cur_lo is not None:
        total += cur_hi - cur_lo
    return total


def decode_interval_ns(record: RequestRecord) -> tuple[int, int] | None:
    """First to last token event of a request, when it produced more than one event."""
    if record.first_token_ns is None:
        return None
    last = record.token_ns[-1] if record.token_ns else record.end_ns
    if last is None or last <= record.first_token_ns:
        return None
    return (record.first_token_ns, last)


def per_user_rate_tok_s(record: RequestRecord) -> float | None:
    """Tokens after the first over the time from first to last token: the rate one user watches."""
    span = decode_interval_ns(record)
    if span is None or record.tokens < 2:
        return None
    return (record.tokens - 1) * NS_PER_S / (span[1] - span[0])


def cell_from_records(
    records: Sequence[RequestRecord],
    *,
    rep: int,
    position: int,
    concurrency: int,
    release_ns: int,
    run: int = 0,
) -> Cell:
    """Reduce one batch's request records to a cell."""
    spans = [s for s in (decode_interval_ns(r) for r in records) if s is not None]
    last_token = max((s[1] for s in spans), default=None)
    ends = [r.end_ns for r in records if r.end_ns is not None]
    ttfts = [r.ttft_ns / NS_PER_S for r in records if r.ok and r.ttft_ns is not None]
    rates = [x for x in (per_user_rate_tok_s(r) for r in records if r.ok) if x is not None]
    wall_end = last_token if last_token is not None else (max(ends) if ends else release_ns)
    return Cell(
        rep=rep,
        position=position,
        concurrency=concurrency,
        wall_s=(wall_end - release_ns) / NS_PER_S,
        tokens=sum(r.tokens for r in records),
        decode_tokens=sum(max(r.tokens - 1, 0) for r in records if decode_interval_ns(r) is not None),
        decoding_union_s=union_length_ns(spans) / NS_PER_S,
        decoding_sum_s=sum(hi - lo for lo, hi in spans) / NS_PER_S,
        per_user_rate_tok_s=median(rates) if rates else None,
        ttft_s=median(ttfts) if ttfts else None,
        start_s=release_ns / NS_PER_S,
        batch_wall_s=(max(ends) - release_ns) / NS_PER_S if ends else None,
        run=run,
        failed=sum(1 for r in records if not r.ok),
    )


# --- design --------------------------------------------------------------------------------


def rotated_order(arms: Sequence[int], rep: int, *, fixed: bool = False) -> tuple[int, ...]:
    """The arm order of one rep: cyclic rotation by rep, so each arm takes each position in turn."""
    return tuple(arms) if fixed else rotation(arms, rep)


def schedule(arms: Sequence[int], reps: int, *, fixed: bool = False) -> list[tuple[int, int, int]]:
    """(rep, position, concurrency) for every cell, in the order they run."""
    return [(rep, pos, c) for rep in range(reps) for pos, c in enumerate(rotated_order(arms, rep, fixed=fixed))]


def balanced(n_arms: int, reps: int) -> bool:
    """Each arm occupies each position equally often exactly when reps is a multiple of the arm count."""
    return n_arms > 0 and reps % n_arms == 0


# --- results -------------------------------------------------------------------------------


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
    label_reason: str = ""

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
class Drift:
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

    def describe(self) -> str:
        return (
            f"rep {self.rep} at {self.concurrency}-way produced {self.tokens} tokens against the modal "
            f"{self.modal_tokens} ({self.deviation:+.0%})"
        )


@dataclass(frozen=True, slots=True)
class Warning_:
    """A warning is data: what happened and what to do about it."""

    message: str
    hint: str | None = None

    def record(self) -> Finding:
        return Finding(message=self.message, hint=self.hint)


@dataclass(frozen=True, slots=True)
class ArmsAnalysis:
    arms: tuple[ArmResult, ...]
    position_bias: PositionBias | None
    bias_limit: float
    drift: Drift | None
    deviant_cells: tuple[DeviantCell, ...]
    headline: str | None
    refusal: str | None
    warnings: tuple[Warning_, ...] = field(default=())

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


# --- statistics ----------------------------------------------------------------------------


def median_interval(values: Sequence[float]) -> Estimate:
    """The median with its order-statistic interval (`stats.quantile_interval` at INTERVAL_LEVEL: for the
    median, [x(k), x(n+1-k)] for the largest k that keeps the coverage; k = 1, the whole range, when fewer
    reps cannot reach it). One value gives a zero-width interval of level 0. The point is `stats.median`,
    as it always was: the interpolated quantile can differ from it in the last bit."""
    iv = quantile_interval(values, 0.5, INTERVAL_LEVEL)
    return Estimate(median(values), iv.lo, iv.hi, iv.n, iv.level)


def interval_level(n: int) -> float:
    """The coverage `median_interval` reaches with n within-rep ratios."""
    return median_interval([float(i) for i in range(n)]).level if n > 0 else 0.0


def within_rep_ratios(
    cells: Sequence[Cell], concurrency: int, metric: str, baseline: int = 1
) -> list[float]:
    """metric(arm) / metric(serial) for every (run, rep) that has both with usable values."""
    base = {(c.run, c.rep): getattr(c, metric) for c in cells if c.concurrency == baseline}
    out = []
    for c in cells:
        if c.concurrency != concurrency:
            continue
        num, den = getattr(c, metric), base.get((c.run, c.rep))
        if num is not None and den is not None and den > 0 and num > 0:
            out.append(num / den)
    return out


def _estimate(cells: Sequence[Cell], concurrency: int, metric: str) -> Estimate | None:
    ratios = within_rep_ratios(cells, concurrency, metric)
    return median_interval(ratios) if ratios else None


def _median_of(cells: Sequence[Cell], metric: str) -> float | None:
    vals = [v for v in (getattr(c, metric) for c in cells) if v is not None]
    return median(vals) if vals else None


def median_by_arm(values: Iterable[tuple[int | None, float | None]]) -> dict[int, float]:
    """Per arm, the median of one cell metric over the arm's cells, (concurrency, value) pairs with
    missing ones left out: the rule `arm_result` takes its medians by, for a document that kept its
    cells but not the arm's medians."""
    by_arm: dict[int, list[float]] = defaultdict(list)
    for arm, value in values:
        if arm is not None and value is not None:
            by_arm[arm].append(value)
    return {arm: median(v) for arm, v in by_arm.items()}


def label_arm(aggregate: Estimate | None, generation: Estimate | None, peak_running: int | None = None) -> Label:
    """The label alone; `label_with_reason` says what decided it."""
    return label_with_reason(aggregate, generation, peak_running)[0]


def label_with_reason(
    aggregate: Estimate | None, generation: Estimate | None, peak_running: int | None = None,
    gauge_cells: tuple[int, int] | None = None,
) -> tuple[Label, str]:
    """Each label is a claim with its own evidence, never the absence of evidence against it.

    batching: the aggregate rises and the generation stage is shown to gain; pipelining: the
    aggregate rises and the generation stage is shown not to (its interval wholly below the rise
    threshold); none: the aggregate is shown not to gain (its interval wholly below
    NO_GAIN_CEILING), or the server's own gauges showed one request running at a time in every
    cell of the arm they were read in (`peak_running` 1: nothing was batched and nothing overlapped,
    whatever the aggregate moved by handing requests over without a client round trip; `gauge_cells`
    is (cells read, cells)). Anything else is inconclusive, with what would decide it.
    """
    if aggregate is None:
        return "inconclusive", "no rep pairs this arm with the serial arm"
    if aggregate.n < MIN_REPS_FOR_RISE:
        return "inconclusive", f"only {aggregate.n} paired rep(s): an interval needs {MIN_REPS_FOR_RISE} or more"
    agg = _iv(aggregate)
    if peak_running == 1:
        cells = _cells_read(gauge_cells)
        if generation is not None and generation.rises:
            return "inconclusive", (
                f"the generation stage reads a gain {_iv(generation)}, but the server's gauges showed one request "
                f"running at a time in {cells}: the two disagree"
            )
        return "none", (
            f"the server's gauges showed one request running at a time in {cells}: no batching and no overlap "
            f"(aggregate {agg})"
        )
    if not aggregate.rises:
        if aggregate.hi < NO_GAIN_CEILING:
            return "none", f"aggregate {agg}: shown below {NO_GAIN_CEILING:.2f}x, no material gain"
        return "inconclusive", (
            f"aggregate {agg}: neither wholly above 1 with a median >= {MIN_RISE} (a rise) nor wholly below "
            f"{NO_GAIN_CEILING:.2f}x (no gain); more reps narrow it"
        )
    if generation is None:
        return "inconclusive", f"aggregate rises {agg}, but the generation stage was not measured"
    gen = _iv(generation)
    if generation.rises:
        return "batching", f"aggregate {agg} and generation stage {gen} both rise: the decode steps are shared"
    if generation.hi < MIN_RISE:
        return "pipelining", (
            f"aggregate rises {agg} while the generation stage is shown not to gain {gen}: overlap, not batching"
        )
    return "inconclusive", (
        f"aggregate rises {agg}, but the generation stage {gen} is neither shown to gain nor shown not to "
        f"(below {MIN_RISE}); more reps narrow it"
    )


def _cells_read(gauge_cells: tuple[int, int] | None) -> str:
    if gauge_cells is None or gauge_cells[0] == gauge_cells[1]:
        return "every cell"
    return f"every cell they were read in ({gauge_cells[0]} of {gauge_cells[1]}; the rest had too few readings)"


def observed_peak(peaks: Sequence[int | None]) -> int | None:
    """The most requests the gauges saw running in any cell, when enough cells were read to speak
    for the arm (MIN_GAUGE_CELL_SHARE of them, at least MIN_REPS_FOR_RISE); None otherwise."""
    read = [p for p in peaks if p is not None]
    if not read or len(read) < max(MIN_REPS_FOR_RISE, MIN_GAUGE_CELL_SHARE * len(peaks)):
        return None
    return max(read)


def _iv(e: Estimate) -> str:
    return f"x{e.median:.2f} [{e.lo:.2f}-{e.hi:.2f}]"


def arm_result(cells: Sequence[Cell], concurrency: int, *, gauges_decide: bool = True) -> ArmResult:
    """One arm's figures and label; with `gauges_decide` off (--evidence stopwatch) the server's gauges
    (each cell's `peak_running`, still recorded) never decide the label."""
    mine = [c for c in cells if c.concurrency == concurrency]
    agg = _estimate(cells, concurrency, "aggregate_tok_s")
    gen = _estimate(cells, concurrency, "generation_tok_s")
    peaks = [c.peak_running for c in mine]
    peak = observed_peak(peaks) if gauges_decide else None
    read = (sum(p is not None for p in peaks), len(peaks))
    serial: tuple[Label, str] = ("none", "the serial arm is the baseline")
    label, reason = serial if concurrency == 1 else label_with_reason(agg, gen, peak, read)
    return ArmResult(
        concurrency=concurrency,
        n_cells=len(mine),
        aggregate_tok_s=_median_of(mine, "aggregate_tok_s"),
        generation_tok_s=_median_of(mine, "generation_tok_s"),
        per_user_rate_tok_s=_median_of(mine, "per_user_rate_tok_s"),
        ttft_s=_median_of(mine, "ttft_s"),
        mean_decoding=_median_of(mine, "mean_decoding"),
        aggregate_speedup=agg,
        generation_gain=gen,
        per_user_rate_ratio=_estimate(cells, concurrency, "per_user_rate_tok_s"),
        ttft_multiple=_estimate(cells, concurrency, "ttft_s"),
        label=label,
        label_reason=reason,
    )


# --- checks --------------------------------------------------------------------------------


def _rep_key(c: Cell) -> tuple[int, int]:
    return (c.run, c.rep)


def position_spreads(cells: Sequence[Cell]) -> list[PositionBias]:
    """Per arm, its median throughput at each position it occupied, after taking out each rep's level.

    Dividing by the rep's level removes slow drift across the run (which rotation balances and the
    drift check reports), leaving what running first or last within a rep does to an arm.
    """
    arm_med = {a: _median_of([c for c in cells if c.concurrency == a], "aggregate_tok_s") for a in _arms(cells)}
    rel: dict[tuple[int, int], list[tuple[Cell, float]]] = defaultdict(list)
    for c in cells:
        agg, ref = c.aggregate_tok_s, arm_med.get(c.concurrency)
        if agg is not None and ref:
            rel[_rep_key(c)].append((c, agg / ref))
    out = []
    for a in _arms(cells):
        by_pos: dict[int, list[float]] = defaultdict(list)
        for members in rel.values():
            level = median([r for _, r in members])
            for c, r in members:
                if c.concurrency == a and level > 0:
                    by_pos[c.position].append(r / level * (arm_med[a] or 0.0))
        if len(by_pos) < 2:
            continue
        meds = tuple(sorted((p, median(v)) for p, v in by_pos.items()))
        lo, hi = min(v for _, v in meds), max(v for _, v in meds)
        out.append(PositionBias(a, (hi - lo) / lo if lo > 0 else math.inf, "positions", meds))
    return out


def drift_position_bias(cells: Sequence[Cell]) -> PositionBias | None:
    """Position bias when the order was fixed: each arm always held one position, so positions cannot
    be compared directly. A steady drift then charges each arm with the drift between its place in
    the rep and the first place; the drift rate comes from every arm's trend across the run, the
    places from the cells' own times. The arm carrying the largest bias is named."""
    arms = _arms(cells)
    slopes = [s for s in (_log_slope_per_s(cells, a) for a in arms) if s is not None]
    if len(arms) < 2 or not slopes:
        return None
    per_s = median(slopes)
    offsets = _offsets_in_rep_s(cells)
    biased = [(abs(math.expm1(per_s * off)), a) for a, off in offsets.items()]
    spread, arm = max(biased)
    return PositionBias(arm, spread, "drift")


def _mid_s(c: Cell) -> float:
    return c.start_s + c.wall_s / 2.0


def _log_slope_per_s(cells: Sequence[Cell], concurrency: int) -> float | None:
    """Theil-Sen slope of log throughput against time: robust to one odd cell. Pairs are taken within
    a run only: pooled runs each count time from their own start."""
    pts = [
        (c.run, _mid_s(c), math.log(c.aggregate_tok_s))
        for c in cells
        if c.concurrency == concurrency and c.aggregate_tok_s
    ]
    pairs = [
        (y2 - y1) / (x2 - x1)
        for k, (r1, x1, y1) in enumerate(pts)
        for r2, x2, y2 in pts[k + 1 :]
        if r1 == r2 and x2 != x1
    ]
    return median(pairs) if pairs else None


def _offsets_in_rep_s(cells: Sequence[Cell]) -> dict[int, float]:
    """Per arm, the median time between its cell's middle and the middle of its rep's first cell."""
    firsts = {_rep_key(c): _mid_s(c) for c in cells if c.position == 0}
    by_arm: dict[int, list[float]] = defaultdict(list)
    for c in cells:
        if _rep_key(c) in firsts:
            by_arm[c.concurrency].append(_mid_s(c) - firsts[_rep_key(c)])
    return {a: median(v) for a, v in by_arm.items()}


def position_bias(cells: Sequence[Cell]) -> PositionBias | None:
    """The widest position spread of any arm, measured from positions when the order rotated."""
    spreads = position_spreads(cells)
    if spreads:
        return max(spreads, key=lambda b: b.spread)
    return drift_position_bias(cells)


def drift(cells: Sequence[Cell], baseline: int = 1) -> Drift | None:
    """Serial throughput over the first quarter of reps (at least one) against the last quarter,
    within each run (pooled runs each count time from their own start); the run that lost most."""
    found = [d for d in (_run_drift(cells, run, baseline) for run in sorted({c.run for c in cells})) if d is not None]
    return max(found, key=lambda d: d.loss, default=None)


def _run_drift(cells: Sequence[Cell], run: int, baseline: int) -> Drift | None:
    serial = sorted(
        (c for c in cells if c.run == run and c.concurrency == baseline and c.aggregate_tok_s), key=lambda c: c.start_s
    )
    if len(serial) < 2:
        return None
    k = max(1, len(serial) // 4)
    first = median([c.aggregate_tok_s or 0.0 for c in serial[:k]])
    last = median([c.aggregate_tok_s or 0.0 for c in serial[-k:]])
    return Drift(first, last, k, run)


def deviant_cells(cells: Sequence[Cell], limit: float = OUTPUT_LENGTH_TOLERANCE) -> list[DeviantCell]:
    """Cells whose total output is more than `limit` away from their run's modal output."""
    out = []
    for run in sorted({c.run for c in cells}):
        mine = [c for c in cells if c.run == run]
        modal = mode([c.tokens for c in mine])
        for c in mine:
            if modal > 0 and abs(c.tokens - modal) / modal > limit:
                out.append(DeviantCell(run, c.rep, c.concurrency, c.tokens, modal))
    return out


def cached_prompt_suspects(
    records: Iterable[tuple[int, int, RequestRecord]],
) -> list[str]:
    """Requests (rep, concurrency, record) whose prompt the prefix cache partly served, named."""
    out = []
    for rep, conc, r in records:
        if record_contaminated(r):
            cached = r.server.cached_prompt_tokens if r.server else None
            out.append(f"rep {rep} {conc}-way request {r.index} ({r.nonce}): {cached} cached prompt tokens")
    return out


def _arms(cells: Sequence[Cell]) -> list[int]:
    return sorted({c.concurrency for c in cells})


# --- words ---------------------------------------------------------------------------------


def ttft_words(multiple: float) -> str:
    """How a time-to-first-token multiple reads in a sentence."""
    if multiple < 0.9:
        return f"cuts the time to first token to {multiple:.2f}x"
    if multiple < 1.15:
        return "leaves the time to first token about unchanged"
    named = {2: "doubles", 3: "triples", 4: "quadruples"}
    nearest = round(multiple)
    if nearest in named and abs(multiple - nearest) <= 0.1:
        return f"{named[nearest]} the time to first token"
    if nearest in named and nearest - 0.35 <= multiple < nearest:
        return f"nearly {named[nearest]} the time to first token"
    return f"multiplies the time to first token by {multiple:.1f}"


def headline(arm: ArmResult, *, with_ttft: bool = True) -> str | None:
    """The two-sided sentence: what the operator gains and what each user pays (without the TTFT
    words when the client cannot resolve the TTFT: `with_ttft` False)."""
    if arm.aggregate_speedup is None:
        return None
    gain = arm.aggregate_speedup.median - 1.0
    operator = (f"buys the operator {gain:+.0%} throughput" if gain >= 0
                else f"costs the operator {-gain:.0%} throughput")
    parts = [f"{arm.concurrency}-way concurrency {operator}"]
    change = arm.per_user_rate_change
    user = []
    if change is not None:
        user.append(_user_rate_words(change))
    if arm.ttft_multiple is not None and with_ttft:
        user.append(ttft_words(arm.ttft_multiple.median))
    if user:
        parts.append("it " + " and ".join(user))
    return "; ".join(parts)


def _user_rate_words(change: float) -> str:
    if abs(change) < FIGURE_FRAC:
        return "leaves each user's generation rate about unchanged"
    if change < 0:
        return f"costs each user {-change:.0%} of their generation rate"
    return f"gives each user {change:+.0%} generation rate"


def refusal_text(bias: PositionBias, limit: float) -> str:
    where = (
        "across the positions it occupied"
        if bias.method == "positions"
        else "from the drift it carried by always running in the same place (fixed order)"
    )
    return (
        f"headline withheld: the {bias.concurrency}-way arm's throughput spreads {bias.spread:.1%} "
        f"{where}, above the {limit:.0%} limit"
    )


# --- the whole analysis --------------------------------------------------------------------


def analyse(
    cells: Sequence[Cell],
    *,
    bias_limit: float = DEFAULT_BIAS_LIMIT,
    baseline: int = 1,
    ttft_unresolved: frozenset[int] = frozenset(),
    gauges_decide: bool = True,
) -> ArmsAnalysis:
    """Everything `servecheck arms` reports, from cells alone; `ttft_unresolved` are the concurrencies
    whose TTFT the client's own timing error swamps (the headline then says nothing of TTFT there);
    `gauges_decide` off (--evidence stopwatch): the server's gauges never decide a label."""
    if not any(c.concurrency == baseline for c in cells):
        raise ValueError("the serial arm (concurrency 1) is the baseline and has no cells")
    late = late_reps(cells)
    kept = bool(late) and labels_stand(cells, baseline, gauges_decide=gauges_decide)
    if kept:
        late = set()
    timed = [c for c in cells if _rep_key(c) not in late]
    results = tuple(_client_named(arm_result(timed, a, gauges_decide=gauges_decide), len(late))
                    for a in _arms(cells))
    bias = position_bias(timed)
    refusal = refusal_text(bias, bias_limit) if bias is not None and bias.spread > bias_limit else None
    top = results[-1]
    drift_ = drift(timed, baseline)
    deviants = tuple(deviant_cells(cells))
    return ArmsAnalysis(
        arms=results,
        position_bias=bias,
        bias_limit=bias_limit,
        drift=drift_,
        deviant_cells=deviants,
        headline=None if refusal else headline(top, with_ttft=not ({top.concurrency, baseline} & ttft_unresolved)),
        refusal=refusal,
        warnings=tuple(_warnings(cells, results, drift_, deviants, late_kept=kept)),
    )


def _untimed_s(c: Cell) -> float:
    """How far the cell's times may be from the server's: the client's lateness or a hop's hold, s."""
    return (c.client_late_ms + c.hop_held_ms) / 1e3


def shifted(c: Cell, sign: int) -> Cell:
    """The cell with every span it was timed over moved by its whole untimed margin, `sign` x: the far
    end of what its late reads could have been (a read late at either end of a span moves it either way)."""
    d = sign * _untimed_s(c)
    if not d:
        return c
    union = max(c.decoding_union_s + d, 1e-9)
    rate = None if c.per_user_rate_tok_s is None else c.per_user_rate_tok_s * c.decoding_union_s / union
    return replace(c, wall_s=max(c.wall_s + d, 1e-9), decoding_union_s=union,
                   decoding_sum_s=max(c.decoding_sum_s + d, 1e-9), per_user_rate_tok_s=rate,
                   ttft_s=None if c.ttft_s is None else max(c.ttft_s + d, 0.0))


def labels_stand(cells: Sequence[Cell], baseline: int = 1, *, gauges_decide: bool = True) -> bool:
    """Whether every arm's label is the same for any time the late cells' reads could have had: the serial
    arm's late cells moved one way and the others' the other, both ways round, and all alike. Then the
    labels rest on nothing the client could not vouch for, and the late reps stay in."""
    arms = _arms(cells)

    def labels(serial: int, other: int) -> tuple[Label, ...]:
        moved = [shifted(c, serial if c.concurrency == baseline else other) for c in cells]
        return tuple(arm_result(moved, a, gauges_decide=gauges_decide).label for a in arms)

    seen = {labels(a, b) for a, b in ((0, 0), (1, -1), (-1, 1), (1, 1), (-1, -1))}
    return len(seen) == 1


def late_reps(cells: Sequence[Cell]) -> set[tuple[int, int]]:
    """The reps (run, rep) with a cell the client read late, or a hop may have held: a within-rep ratio
    needs both of its cells timed, so the whole rep is no evidence."""
    return {_rep_key(c) for c in cells if c.client_late_ms > 0 or c.hop_held_ms > 0}


def _client_named(arm: ArmResult, late: int) -> ArmResult:
    """An undecided arm whose evidence the client's own lateness thinned says so."""
    if not late or arm.label != "inconclusive":
        return arm
    return replace(arm, label_reason=f"{arm.label_reason}; {late} rep(s) were left out because the client itself "
                                     "was late reading them, or a hop that buffers the stream held them")


def _warnings(
    cells: Sequence[Cell], results: Sequence[ArmResult], drift_: Drift | None, deviants: Sequence[DeviantCell],
    *, late_kept: bool = False,
) -> list[Warning_]:
    out = []
    if late_kept:
        untimed = [c for c in cells if _untimed_s(c) > 0]
        out.append(Warning_(
            f"{len(late_reps(cells))} rep(s) had cells read late by the client or held by a hop (up to "
            f"{max(_untimed_s(c) for c in untimed) * 1e3:.0f} ms), kept: every arm's label is the same whatever "
            "those reads' true times were within that",
            "the figures beside the labels carry that error; measure on a quieter machine for them",
        ))
        cells = [c for c in cells if _untimed_s(c) == 0]
    if drift_ is not None and drift_.loss > DRIFT_LIMIT:
        out.append(
            Warning_(
                f"the serial arm lost {drift_.loss:.1%} of its throughput between the first and last reps",
                "let the machine settle (or cool) before measuring, or add reps so the rotation averages it out",
            )
        )
    elif drift_ is not None and -drift_.loss > DRIFT_LIMIT:
        out.append(
            Warning_(
                f"the serial arm gained {-drift_.loss:.1%} throughput between the first and last reps: the server or "
                "the machine got faster during the run",
                "a load that ended mid-run or a warming cache moves every ratio; rerun on a settled machine, "
                "or add reps",
            )
        )
    held = [c for c in cells if c.hop_held_ms > 0]
    if held:
        out.append(
            Warning_(
                f"{len({_rep_key(c) for c in held})} rep(s) left out: the streams of {len(held)} cell(s) arrived in "
                "bursts coalesced in transit, which a hop that buffers the stream (a proxy, a gateway) may have held "
                f"up to {max(c.hop_held_ms for c in held):.0f} ms, so their times are the hop's, not the server's",
                "point servecheck at the server itself, not through the hop",
            )
        )
    late = [c for c in cells if c.client_late_ms > 0]
    if late:
        out.append(
            Warning_(
                f"{len({_rep_key(c) for c in late})} rep(s) left out: the client itself was late by up to "
                f"{max(c.client_late_ms for c in late):.0f} ms reading {len(late)} cell(s) of them (a busy machine or "
                "a late reader), so their times are no evidence",
                "measure on a quieter machine, or raise --max-reps so the run repeats what it lost",
            )
        )
    for d in deviants:
        out.append(
            Warning_(
                f"output-length trap: {d.describe()}",
                "its throughput uses the tokens it actually produced; never compare its wall clock",
            )
        )
    paired = min((a.aggregate_speedup.n for a in results if a.aggregate_speedup is not None and a.concurrency != 1),
                 default=None)
    if paired is not None and paired < MIN_REPS_FOR_RISE:
        out.append(
            Warning_(
                f"only {paired} rep(s) pair an arm with the serial arm: too few for an interval, so no arm is "
                "labelled batching or pipelining",
                f"use --reps {MIN_REPS_FOR_RISE} or more (a multiple of the arm count)",
            )
        )
    for a in results:
        if a.label == "inconclusive":
            out.append(Warning_(f"{a.concurrency}-way is inconclusive: {a.label_reason}",
                                "add reps (--reps, --max-reps)"))
    failed = sum(c.failed for c in cells)
    if failed:
        out.append(Warning_(f"{failed} request(s) failed",
                            "see the cells; a failed request changes the work an arm did"))
    return out
