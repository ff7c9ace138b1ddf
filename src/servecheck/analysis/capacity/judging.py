"""One probed N judged, pure: every probe at N pooled, the order-statistic intervals of the per-user
rate and the TTFT at the asked percentile held against the floor and the ceiling, and the late or held
requests kept only where the status is the same whatever their true times."""

from __future__ import annotations

from collections.abc import Sequence

from servecheck.analysis.capacity.criteria import Criteria
from servecheck.analysis.capacity.probes import ProbeSample
from servecheck.analysis.capacity.records import Point
from servecheck.analysis.stats import QuantileInterval, median, quantile_interval
from servecheck.model.bodies.capacity import Status
from servecheck.model.reason import Reason, joined


def side(interval: QuantileInterval | None, bound: float, *, above: bool, level: float) -> Status:
    """pass when the interval lies wholly on the good side of `bound`, fail when wholly on the bad one."""
    if interval is None or interval.level < level:
        return "uncertain"
    good_lo, good_hi = ((interval.lo > bound, interval.hi < bound) if above
                        else (interval.hi < bound, interval.lo > bound))
    return "pass" if good_lo else "fail" if good_hi else "uncertain"


def combine(*statuses: Status | None) -> Status:
    shown = [s for s in statuses if s is not None]
    if "fail" in shown:
        return "fail"
    return "pass" if all(s == "pass" for s in shown) else "uncertain"


def with_untimed(probes: Sequence[ProbeSample], c: Criteria) -> list[float] | None:
    """Every rate at n, the untimed ones (read late, or held by a hop) included, where the rate's status is
    the same whatever their true rates (span +- its untimed part: rate / (1 + f) .. rate / (1 - f)); None
    where it is not, or there are none."""
    rates = [x for p in probes for x in p.rates_tok_s]
    untimed = [u for p in probes for u in p.untimed_rates]
    if not untimed or any(f >= 1 for _, f in untimed):
        return None
    ends = ([r for r, _ in untimed], [r / (1 + f) for r, f in untimed], [r / (1 - f) for r, f in untimed])
    seen = {side(quantile_interval(rates + end, c.rate_quantile, c.level), c.min_user_rate_tok_s, above=True,
                  level=c.level) for end in ends}
    return rates + ends[0] if len(seen) == 1 and "uncertain" not in seen else None


def ttfts_with_untimed(probes: Sequence[ProbeSample], c: Criteria) -> list[float]:
    """Every TTFT at n, the late ones included where the TTFT status is the same at both ends of what
    each could have been; else the timed ones alone (left out whatever their value, so the percentile
    is not pulled either way)."""
    ttfts = [x for p in probes for x in p.ttfts_s]
    untimed = [u for p in probes for u in p.untimed_ttfts]
    if not untimed or c.max_ttft_s is None:
        return ttfts
    ends = ([t for t, _ in untimed], [max(t - late, 0.0) for t, late in untimed])
    seen = {side(quantile_interval(ttfts + end, c.ttft_quantile, c.level), c.max_ttft_s, above=False, level=c.level)
            for end in ends}
    return ttfts + ends[0] if len(seen) == 1 and "uncertain" not in seen else ttfts


def assess(n: int, probes: Sequence[ProbeSample], c: Criteria) -> Point:
    """Pool every probe at n and judge it; a failed request fails the whole N, with its reason."""
    kept = with_untimed(probes, c)
    rates = kept if kept is not None else [x for p in probes for x in p.rates_tok_s]
    ttfts = ttfts_with_untimed(probes, c)
    rate = quantile_interval(rates, c.rate_quantile, c.level) if rates else None
    ttft = quantile_interval(ttfts, c.ttft_quantile, c.level) if ttfts else None
    aggs = [p.aggregate_tok_s for p in probes if p.aggregate_tok_s is not None]
    failed = sum(p.failed for p in probes)
    rate_status = side(rate, c.min_user_rate_tok_s, above=True, level=c.level)
    ttft_status = None if c.max_ttft_s is None else side(ttft, c.max_ttft_s, above=False, level=c.level)
    failure = next((p.failure for p in probes if p.failure), None)
    if failure:
        rate_status = "fail"
    status = combine(rate_status, ttft_status)
    parts = [failure or _reason(rate, ttft, rate_status, ttft_status, c)]
    late = sum(len(p.client_late) for p in probes)
    if kept is not None:
        untimed = len(kept) - sum(len(p.rates_tok_s) for p in probes)
        parts.append(Reason("capacity.untimed_kept", rates=untimed))
    elif late and status == "uncertain" and not failure:
        parts.append(Reason("capacity.late_left_out", requests=late))
    held = sum(len(p.hop_held) for p in probes)
    if kept is None and held and status == "uncertain" and not failure:
        parts.append(Reason("capacity.held_left_out", requests=held))
    return Point(n, len(probes), rate, ttft, median(aggs) if aggs else None, status, rate_status, ttft_status,
                 parts[0] if len(parts) == 1 else joined(parts), failed)


def _reason(rate: QuantileInterval | None, ttft: QuantileInterval | None, rs: Status, ts: Status | None,
            c: Criteria) -> Reason:
    if rate is None:
        return Reason("capacity.no_rate")
    if rate.level < c.level:
        return Reason("capacity.interval_short", samples=rate.n, level=rate.level, needed=c.level)
    parts = [Reason("capacity.rate_side", lo=rate.lo, hi=rate.hi, status=rs, floor=c.min_user_rate_tok_s)]
    if ts is not None and ttft is not None and c.max_ttft_s is not None:
        parts.append(Reason("capacity.ttft_side", lo=ttft.lo, hi=ttft.hi, status=ts, ceiling=c.max_ttft_s))
    return parts[0] if len(parts) == 1 else joined(parts)
