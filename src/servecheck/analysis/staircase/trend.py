"""The trend across N, pure: what concurrency buys, agg(N)/agg(1) read as rising, flat or neither
(`classify_trend`, the one rule `diff` judges by too), and how a run's points are put to it (`_trend`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from servecheck.analysis.client_timing import longest_holding
from servecheck.analysis.staircase.records import MeasuredBatch, LevelAnalysis
from servecheck.analysis.staircase.windows import WINDOW_OVERLAP_TOL, generation_windows
from servecheck.analysis.stats import median, ratio
from servecheck.analysis.transit import hop_hold_ns
from servecheck.model.bodies.staircase import RISING_RATIO, Trend
from servecheck.model.reason import Reason
from servecheck.model.records import NS_PER_S

# --- trend across N --------------------------------------------------------------------------
# Real batching climbs well above N=1 by N=4 (seed 000: "it is not flat"); a queue stays within a
# few percent (91.2 vs 93.0 tok/s). Rising needs +30%; flat means within -15%..+15%; between the
# two (or a fall below -15%) is left inconclusive rather than guessed.
# RISING_RATIO is the staircase's word (model.bodies.staircase): diff prints it beside its table.
FLAT_LO_RATIO = 0.85
FLAT_HI_RATIO = 1.15
# N=1 measurements that spread more than this (slowest / fastest - 1) mean the machine's speed
# moved during the run, in either direction; it is named, and rising must hold against the fastest.
REFERENCE_SPREAD_WARN = 0.25


def classify_trend(
    ratios: dict[int, float],
    *,
    against_fastest: dict[int, float] | None = None,
    own_bound: dict[int, float] | None = None,
    verdicts: Mapping[int, str] | None = None,
) -> tuple[Trend, Reason]:
    """`rising` or `flat` from agg(N)/agg(1) for every N > 1 (agg(1) the median N=1 aggregate).

    Each word is a claim with its own evidence. `rising` must hold against the fastest N=1
    measurement too (`against_fastest`), so one slow single request cannot make a queue rise,
    and a point whose finishes are a staircase (a queue) cannot rise: that contradiction is named.
    `own_bound` is each point's ceiling on its true ratio from its own batch (no request runs
    faster than alone, so the first finish is at most one single time: agg(N) / (tokens / first
    finish)); a rise needs room under it, and flat needs it to leave no room for a rise, unless
    the point is a staircase (a queue has no gain to hide).
    """
    if not ratios:
        return "inconclusive", Reason("staircase.no_aggregate")
    best_n = max(ratios, key=lambda n: ratios[n])
    if ratios[best_n] >= RISING_RATIO:
        strict = (against_fastest or {}).get(best_n, ratios[best_n])
        if (verdicts or {}).get(best_n) == "staircase":
            return "inconclusive", Reason("staircase.rise_on_queue", ratio=ratios[best_n], n=best_n)
        if strict < RISING_RATIO:
            return "inconclusive", (
                Reason("staircase.rise_not_against_fastest", ratio=ratios[best_n], n=best_n, strict=strict,
                       rising=RISING_RATIO))
        ceiling = (own_bound or {}).get(best_n)
        if ceiling is not None and ceiling < RISING_RATIO:
            return "inconclusive", (
                Reason("staircase.rise_over_own_bound", ratio=ratios[best_n], n=best_n, ceiling=ceiling))
        return "rising", Reason("staircase.rising", ratio=ratios[best_n], n=best_n)
    # A staircase point is a queue, which cannot raise the aggregate whatever its first finish
    # leaves room for: its bound is no reason to withhold `flat` (vLLM --max-num-seqs 1 once ran
    # the first of two queued requests 1.38x slower than alone, a bound of 1.44x on a queue).
    roomy = {n: b for n, b in (own_bound or {}).items()
             if b >= RISING_RATIO and (verdicts or {}).get(n) != "staircase"}
    if roomy and all(FLAT_LO_RATIO <= r <= FLAT_HI_RATIO for r in ratios.values()):
        n, b = next(iter(sorted(roomy.items())))
        return "inconclusive", Reason("staircase.flat_with_room", ratio=ratios[n], n=n, bound=b)
    if all(FLAT_LO_RATIO <= r <= FLAT_HI_RATIO for r in ratios.values()):
        lo, hi = min(ratios.values()), max(ratios.values())
        return "flat", Reason("staircase.flat", lo=lo, hi=hi)
    worst_n = min(ratios, key=lambda n: ratios[n])
    return "inconclusive", (
        Reason("staircase.neither", best=ratios[best_n], best_n=best_n, worst=ratios[worst_n], worst_n=worst_n,
               flat_lo=FLAT_LO_RATIO, flat_hi=FLAT_HI_RATIO, rising=RISING_RATIO))


def single_aggregates(points: Sequence[LevelAnalysis]) -> list[float]:
    """The aggregate of every N=1 measurement: the trend's references."""
    return [b.aggregate_tok_s for p in points if p.n == 1 for b in p.batches if b.aggregate_tok_s is not None]


def prefill_gain_bound(batches: Sequence[MeasuredBatch]) -> float | None:
    """The most a queue can gain over one request alone by hiding each request's prefill behind
    the previous one's generation (seed 003's pipelining): latency / (latency - TTFT) of the N=1
    requests, the median over them. A queue whose windows never overlap gains nothing else."""
    gains = [
        r.latency_ns / (r.latency_ns - r.ttft_ns)
        for mb in batches if mb.n == 1 for r in mb.batch.records
        if r.ok and r.latency_ns and r.ttft_ns is not None and 0 <= r.ttft_ns < r.latency_ns
    ]
    return median(gains) if gains else None


def hidden_prefill_gain(batches: Sequence[MeasuredBatch], prefill_s: float, tol_s: float) -> float | None:
    """The most a queue's batches could have gained over running their requests strictly one after another,
    from their own stamps (the largest over the batches): (span + hidden) / span, where span is the release to
    the last finish and each later request hid at most `prefill_s` (one prefill alone) less the gap between
    the window before it and its own first token. The gap is read on the client's clock: a first token
    stamped late makes it look longer, so each gap is taken shorter by the longest late stretch that held one
    of the batch's first tokens, plus the client's resolution outside them (by `tol_s` where the client's timing
    was not recorded), plus the longest a hop that buffers the streams may have held an event
    (`transit.hop_hold_ns`: a proxy releasing bursts every 35-105 ms held mlx-lm's tokens up to 106 ms).

    A queue that prefilled every request only after the one before it had finished hid nothing (1.0); one
    that prefilled each next request while the one before was still generating (mlx-lm, one slot: the
    windows 10 ms apart against a 0.16 s prefill) gained at most what those prefills took."""
    gains = []
    for mb in batches:
        windows = generation_windows(mb.batch.records)
        if not windows or len(windows) != mb.n:
            return None
        span_s = (windows[-1][1] - mb.batch.release_ns) / NS_PER_S
        if span_s <= 0:
            return None
        lateness = mb.batch.lateness
        late_s = tol_s if lateness is None else (
            lateness.resolution_ns + longest_holding(lateness, [a for a, _ in windows], 0)) / NS_PER_S
        late_s += max((hop_hold_ns(r.token_ns) for r in mb.batch.records if r.ok), default=0) / NS_PER_S
        gaps_s = [(a - b) / NS_PER_S for (_, b), (a, _) in zip(windows, windows[1:])]
        hidden_s = sum(max(0.0, prefill_s - gap + late_s) for gap in gaps_s)
        gains.append((span_s + hidden_s) / span_s)
    return max(gains) if gains else None


def single_prefill_s(batches: Sequence[MeasuredBatch]) -> float | None:
    """One request's prefill alone: the median TTFT of the N=1 requests."""
    ttfts = [r.ttft_ns / NS_PER_S for mb in batches if mb.n == 1 for r in mb.batch.records
             if r.ok and r.ttft_ns is not None and r.ttft_ns >= 0]
    return median(ttfts) if ttfts else None


def _queue_gains(points: Sequence[LevelAnalysis], batches: Sequence[MeasuredBatch]) -> dict[int, float]:
    """Per N > 1 whose every batch is a queue its generation windows confirm (none overlapped): what hiding
    prefill could have gained it, from its own batches (`hidden_prefill_gain`); each batch's own first
    request's TTFT, when longer than the N=1 median, stands for one prefill alone."""
    prefill = single_prefill_s(batches)
    singles = [mb.batch.records[0].latency_ns / NS_PER_S for mb in batches if mb.n == 1 and mb.batch.records
               and mb.batch.records[0].latency_ns]
    if prefill is None or not singles:
        return {}
    tol_s = WINDOW_OVERLAP_TOL * median(singles)
    out = {}
    for p in points:
        if p.n < 2 or p.verdict != "staircase" or not p.batches or not all(
                b.verdict.windows is not None and b.verdict.windows.schedule == "staircase" for b in p.batches):
            continue
        own = [mb for mb in batches if mb.n == p.n and mb.rep in {b.rep for b in p.batches}]
        firsts = [min((r for r in mb.batch.records if r.ok and r.ttft_ns is not None),
                      key=lambda r: r.first_token_ns or 0, default=None) for mb in own]
        p_s = max([prefill, *(r.ttft_ns / NS_PER_S for r in firsts if r is not None and r.ttft_ns is not None)])
        gain = hidden_prefill_gain(own, p_s, tol_s)
        if gain is not None:
            out[p.n] = gain
    return out


def _trend(points: Sequence[LevelAnalysis], batches: Sequence[MeasuredBatch]
           ) -> tuple[Trend, Reason, dict[int, float], tuple[int, ...], float | None, dict[int, float]]:
    """The trend, its reason, agg(N)/agg(1) per N, the N read from their schedule, the bound, and each
    queue's own bound from its stamps.

    A queue whose generating windows never overlapped ran every request alone: its aggregate is one
    request's rate, whatever the machine's speed did between the N=1 batches and this one (on a
    busy machine the single-request time wandered 3.45-4.80 s inside one run, and agg(N)/agg(1) of
    clean queues read 0.77-1.26x). Such a point reads as flat from its schedule when hiding its
    prefill could gain no more than the flat band allows: by the N=1 requests' share of prefill
    (`prefill_gain_bound`), or by what its own batches show was hidden (`hidden_prefill_gain`: mlx-lm's
    one slot prefills the next request during the last tokens of the one before, so the N=1 share
    says up to 1.25x where the batches show 1.1x). Its measured ratio is still shown."""
    bound = prefill_gain_bound(batches)
    refs = single_aggregates(points)
    base = median(refs) if refs else None
    fastest = max(refs) if refs else None
    ratios = {p.n: r for p in points if p.n > 1 and (r := ratio(p.aggregate_tok_s, base)) is not None}
    strict = {p.n: r for p in points if p.n > 1 and (r := ratio(p.aggregate_tok_s, fastest)) is not None}
    own = {p.n: b for p in points if p.n > 1 and (b := own_gain_bound(p)) is not None}
    verdicts = {p.n: p.verdict for p in points}
    queue_gains = _queue_gains(points, batches)
    scheduled: tuple[int, ...] = tuple(
        p.n for p in points if p.n in ratios and p.verdict == "staircase" and "generation_windows" in p.evidence
        and ((bound is not None and bound <= FLAT_HI_RATIO) or queue_gains.get(p.n, float("inf")) <= FLAT_HI_RATIO))
    used = {n: 1.0 if n in scheduled else r for n, r in ratios.items()}
    trend, reason = classify_trend(used, against_fastest=strict, own_bound=own, verdicts=verdicts)
    if scheduled and trend == "flat":
        if bound is not None and bound <= FLAT_HI_RATIO:
            could = Reason("staircase.prefill_bound", bound=bound)
        else:
            could = Reason("staircase.prefill_gained", ns=scheduled,
                                gains=tuple(queue_gains[n] for n in scheduled))
        reason = Reason("staircase.flat_by_schedule", reason=reason, ns=scheduled,
                   ratios=tuple(ratios[n] for n in scheduled), could=could)
    return trend, reason, ratios, scheduled, bound, queue_gains


def own_gain_bound(point: LevelAnalysis) -> float | None:
    """The point's ceiling on agg(N)/agg(1) from its own batches (median over reps): its aggregate
    over the first request's rate, tokens / first finish. No schedule runs a request faster than
    it runs alone, so the first finish is at most one single time and the true gain is at most this."""
    bounds = [
        b.aggregate_tok_s / (b.tokens[0] / b.finish_s[0])
        for b in point.batches
        if b.aggregate_tok_s and b.tokens and b.finish_s and b.tokens[0] > 0 and b.finish_s[0] > 0
    ]
    return median(bounds) if bounds else None
