"""Each arm's intervals and label, pure: medians of within-rep ratios against the serial arm with their
order-statistic intervals, and the label (batching, pipelining, none, inconclusive) each interval or the
server's gauges support, with what decided it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from servecheck.analysis.arms.records import (
    MIN_GAUGE_CELL_SHARE,
    MIN_REPS_FOR_RISE,
    MIN_RISE,
    NO_GAIN_CEILING,
    ArmResult,
    Cell,
    Estimate,
)
from servecheck.analysis.stats import median, quantile_interval
from servecheck.model.bodies.arms import INTERVAL_LEVEL, Label
from servecheck.model.reason import Reason


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
) -> tuple[Label, Reason]:
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
        return "inconclusive", Reason("arms.unpaired")
    if aggregate.n < MIN_REPS_FOR_RISE:
        return "inconclusive", Reason("arms.too_few_reps", reps=aggregate.n, needed=MIN_REPS_FOR_RISE)
    agg = _iv(aggregate)
    if peak_running == 1:
        cells = _cells_read(gauge_cells)
        if generation is not None and generation.rises:
            gen_iv = _iv(generation)
            return "inconclusive", Reason("arms.gauges_disagree", generation=gen_iv, cells=cells)
        return "none", Reason("arms.one_running", cells=cells, aggregate=agg)
    if not aggregate.rises:
        if aggregate.hi < NO_GAIN_CEILING:
            return "none", Reason("arms.no_gain", aggregate=agg, ceiling=NO_GAIN_CEILING)
        return "inconclusive", Reason("arms.unsure_gain", aggregate=agg, rise=MIN_RISE, ceiling=NO_GAIN_CEILING)
    if generation is None:
        return "inconclusive", Reason("arms.generation_unmeasured", aggregate=agg)
    gen = _iv(generation)
    if generation.rises:
        return "batching", Reason("arms.batching", aggregate=agg, generation=gen)
    if generation.hi < MIN_RISE:
        return "pipelining", Reason("arms.pipelining", aggregate=agg, generation=gen)
    return "inconclusive", Reason("arms.unsure_generation", aggregate=agg, generation=gen, rise=MIN_RISE)


def _cells_read(gauge_cells: tuple[int, int] | None) -> Reason:
    read, cells = (None, None) if gauge_cells is None else gauge_cells
    return Reason("arms.cells_read", read=read, cells=cells)


def observed_peak(peaks: Sequence[int | None]) -> int | None:
    """The most requests the gauges saw running in any cell, when enough cells were read to speak
    for the arm (MIN_GAUGE_CELL_SHARE of them, at least MIN_REPS_FOR_RISE); None otherwise."""
    read = [p for p in peaks if p is not None]
    if not read or len(read) < max(MIN_REPS_FOR_RISE, MIN_GAUGE_CELL_SHARE * len(peaks)):
        return None
    return max(read)


def _iv(e: Estimate) -> Reason:
    return Reason("arms.interval", median=e.median, lo=e.lo, hi=e.hi)


def arm_result(cells: Sequence[Cell], concurrency: int, *, gauges_decide: bool = True) -> ArmResult:
    """One arm's figures and label; with `gauges_decide` off (--evidence stopwatch) the server's gauges
    (each cell's `peak_running`, still recorded) never decide the label."""
    mine = [c for c in cells if c.concurrency == concurrency]
    agg = _estimate(cells, concurrency, "aggregate_tok_s")
    gen = _estimate(cells, concurrency, "generation_tok_s")
    peaks = [c.peak_running for c in mine]
    peak = observed_peak(peaks) if gauges_decide else None
    read = (sum(p is not None for p in peaks), len(peaks))
    label: Label
    reason: Reason
    if concurrency == 1:
        label, reason = "none", Reason("arms.serial_baseline")
    else:
        label, reason = label_with_reason(agg, gen, peak, read)
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

