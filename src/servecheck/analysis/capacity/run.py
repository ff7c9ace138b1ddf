"""The whole capacity run, pure: the N held, what bound it, the answer, the marginal users, non-monotone
readings, the baseline's drift and the warnings, put together by `analyse` from the probe samples alone."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from servecheck.analysis.findings import Finding
from servecheck.analysis.capacity.criteria import Criteria
from servecheck.analysis.capacity.judging import assess
from servecheck.analysis.capacity.probes import ProbeSample
from servecheck.analysis.capacity.records import CapacityAnalysis, BaselineDrift, Marginal, NonMonotone, Point
from servecheck.analysis.rules import DRIFT_LIMIT, drifted
from servecheck.analysis.stats import quantile_interval
from servecheck.model.bodies.capacity import Limit
from servecheck.model.reason import Reason


def held(points: Sequence[Point]) -> int | None:
    """The largest N that passed with every smaller probed N passing; 0 when one user alone
    fails; None when not even one user is shown either way."""
    best = 0
    for p in sorted(points, key=lambda p: p.n):
        if p.status != "pass":
            return None if p.n == 1 and p.status == "uncertain" else best
        best = p.n
    return best if points else None


def limit_of(points: Sequence[Point], held_n: int | None, max_n: int) -> Limit:
    """What bound the answer: the criterion the next N failed, max_n, or undetermined."""
    if held_n is None:
        return "undetermined"
    nxt = next((p for p in sorted(points, key=lambda p: p.n) if p.n > held_n), None)
    if nxt is None:
        return "max_n" if held_n >= max_n else "undetermined"
    if nxt.n != held_n + 1 or nxt.status != "fail":
        return "undetermined"
    return "user_rate" if nxt.rate_status == "fail" else "ttft"


def marginals(points: Sequence[Point]) -> list[Marginal]:
    ordered = [p for p in sorted(points, key=lambda p: p.n) if p.aggregate_tok_s is not None]
    out = []
    for prev, cur in zip(ordered, ordered[1:]):
        assert prev.aggregate_tok_s is not None and cur.aggregate_tok_s is not None
        change = None
        if prev.per_user_tok_s and cur.per_user_tok_s is not None:
            change = cur.per_user_tok_s / prev.per_user_tok_s - 1.0
        gain = cur.aggregate_tok_s / prev.aggregate_tok_s - 1.0 if prev.aggregate_tok_s > 0 else 0.0
        out.append(Marginal(cur.n, prev.n, (cur.aggregate_tok_s - prev.aggregate_tok_s) / (cur.n - prev.n), gain,
                            change))
    return out


def non_monotone(points: Sequence[Point]) -> list[NonMonotone]:
    """A larger N that passed after a smaller one failed, or a per-user rate that rose with N with
    the two intervals apart: reported as measured, never smoothed over."""
    ordered = sorted(points, key=lambda p: p.n)
    out = []
    for i, a in enumerate(ordered):
        for b in ordered[i + 1 :]:
            if a.status == "fail" and b.status == "pass":
                out.append(NonMonotone("status", a.n, b.n, (
                    Reason("capacity.passed_after_fail", n_low=a.n, n_high=b.n))))
            if a.rate is not None and b.rate is not None and b.rate.lo > a.rate.hi:
                out.append(NonMonotone("per_user_rate", a.n, b.n, (
                    Reason("capacity.rate_rises", n_low=a.n, low_lo=a.rate.lo, low_hi=a.rate.hi, n_high=b.n,
                           high_lo=b.rate.lo, high_hi=b.rate.hi))))
    return out


def drift_of(start: Point | None, end: ProbeSample | None, c: Criteria) -> BaselineDrift | None:
    if start is None or start.per_user_tok_s is None or end is None or not end.rates_tok_s:
        return None
    end_rate = quantile_interval(end.rates_tok_s, c.rate_quantile, c.level).estimate
    return BaselineDrift(start.per_user_tok_s, end_rate) if start.per_user_tok_s > 0 else None


def analyse_capacity(
    probes: Mapping[int, Sequence[ProbeSample]],
    c: Criteria,
    *,
    max_n: int,
    baseline_end: ProbeSample | None = None,
) -> CapacityAnalysis:
    """Everything `servecheck capacity` reports, from the probe samples alone."""
    points = tuple(assess(n, probes[n], c) for n in sorted(probes) if probes[n])
    held_n = held(points)
    limit = limit_of(points, held_n, max_n)
    margins = tuple(marginals(points))
    start = next((p for p in points if p.n == 1), None)
    drift = drift_of(start, baseline_end, c)
    odd = tuple(non_monotone(points))
    all_samples = [s for ps in probes.values() for s in ps] + ([baseline_end] if baseline_end else [])
    return CapacityAnalysis(
        points=points, max_concurrency=held_n, limit=limit, answer=answer_of(points, held_n, limit, c, max_n),
        marginals=margins, least=min(margins, key=lambda m: m.gain_tok_s_per_user, default=None), drift=drift,
        non_monotone=odd, warnings=tuple(_warnings(all_samples, drift, odd, points, c)),
    )


def answer_of(points: Sequence[Point], held_n: int | None, limit: Limit, c: Criteria, max_n: int) -> Reason:
    """The answer in one line: how many users the server holds at the promised rate, and what the first
    N that did not pass does to its users."""
    by_n = {p.n: p for p in points}
    promise = Reason("capacity.promise", floor=c.min_user_rate_tok_s, ceiling=c.max_ttft_s,
                          percentile=c.percentile)
    if held_n is None:
        return Reason("capacity.alone_undetermined", promise=promise, why=by_n[1].reason if 1 in by_n else None)
    if held_n == 0 and limit != "undetermined":
        alone = _alone(by_n[1], c)
        return Reason("capacity.holds_none", alone=alone)
    if limit == "max_n":
        return Reason("capacity.holds_up_to_max_n", held=held_n, promise=promise, max_n=max_n)
    nxt = next((p for p in sorted(points, key=lambda p: p.n) if p.n > held_n), None)
    if limit == "undetermined" and nxt is None:
        return Reason("capacity.search_unfinished", held=held_n, promise=promise)
    assert nxt is not None
    if limit == "undetermined":
        return Reason("capacity.holds_at_least", held=held_n, promise=promise, next_n=nxt.n,
                           next_status=nxt.status, next_reason=nxt.reason)
    then = _next(nxt)
    return Reason("capacity.holds", held=held_n, promise=promise, then=then)


def _next(p: Point) -> Reason:
    """What the first N that did not pass does to its users."""
    if p.failed:
        return Reason("capacity.next_fails", n=p.n, why=p.reason)
    if p.rate_status == "fail" or p.ttft_status != "fail":
        return Reason("capacity.next_too_slow", n=p.n, rate=p.per_user_tok_s)
    return Reason("capacity.next_too_late", n=p.n, ttft=p.ttft_s)


def _alone(p: Point, c: Criteria) -> Reason:
    """Why one user alone is not served as promised."""
    if p.failed:
        return Reason("capacity.alone_fails", why=p.reason)
    if p.rate_status == "fail":
        return Reason("capacity.alone_too_slow", rate=p.per_user_tok_s, floor=c.min_user_rate_tok_s,
                           percentile=c.percentile)
    return Reason("capacity.alone_too_late", ttft=p.ttft_s, ceiling=c.max_ttft_s, percentile=c.percentile)


def _warnings(
    samples: Sequence[ProbeSample], drift: BaselineDrift | None, odd: Sequence[NonMonotone], points: Sequence[Point],
    c: Criteria
) -> list[Finding]:
    out = []
    if drift is not None and drifted(drift.change):
        out.append(Finding(
            Reason("capacity.drift", change=drift.change, start_tok_s=drift.start_tok_s,
                        end_tok_s=drift.end_tok_s, limit=DRIFT_LIMIT),
            Reason("capacity.drift_fix"),
        ))
    out += [Finding(Reason("capacity.non_monotone", reading=x.message),
                     Reason("capacity.non_monotone_fix"))
            for x in odd]
    off = [name for s in samples for name in s.length_off]
    if off:
        out.append(Finding(Reason("capacity.length_trap", requests=len(off), named=tuple(off[:4])),
                            Reason("capacity.length_trap_fix")))
    late = [name for s in samples for name in s.client_late]
    if late:
        out.append(Finding(Reason("capacity.client_late", requests=len(late), named=tuple(late[:4])),
                            Reason("capacity.client_late_fix")))
    held = [name for s in samples for name in s.hop_held]
    if held:
        out.append(Finding(Reason("capacity.hop_held", requests=len(held), named=tuple(held[:4])),
                            Reason("capacity.hop_held_fix")))
    dirty = [name for s in samples for name in s.contaminated]
    if dirty:
        out.append(Finding(Reason("capacity.contaminated", requests=len(dirty)),
                            Reason("capacity.contaminated_fix")))
    short = [p.n for p in points if p.rate is not None and p.rate.level < c.level]
    if short:
        out.append(Finding(Reason("capacity.intervals_short", level=c.level, ns=tuple(short)),
                            Reason("capacity.intervals_short_fix")))
    return out
