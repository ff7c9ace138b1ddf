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
from servecheck.model.reason import Reason, twin


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
                out.append(NonMonotone("status", a.n, b.n, twin(
                    Reason("capacity.passed_after_fail", n_low=a.n, n_high=b.n),
                    f"N={b.n} passed although N={a.n} failed")))
            if a.rate is not None and b.rate is not None and b.rate.lo > a.rate.hi:
                out.append(NonMonotone("per_user_rate", a.n, b.n, twin(
                    Reason("capacity.rate_rises", n_low=a.n, low_lo=a.rate.lo, low_hi=a.rate.hi, n_high=b.n,
                           high_lo=b.rate.lo, high_hi=b.rate.hi),
                    f"the per-user rate rises from N={a.n} [{a.rate.lo:.1f}, {a.rate.hi:.1f}] to N={b.n} "
                    f"[{b.rate.lo:.1f}, {b.rate.hi:.1f}] tok/s")))
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
    promise = twin(Reason("capacity.promise", floor=c.min_user_rate_tok_s, ceiling=c.max_ttft_s,
                          percentile=c.percentile),
                   f"at >= {c.min_user_rate_tok_s:g} tok/s each"
                   f"{f' and a first token within {c.max_ttft_s:g} s' if c.max_ttft_s is not None else ''} "
                   f"({'median' if c.percentile == 50 else f'{c.percentile:g}% of users'})")
    if held_n is None:
        return twin(Reason("capacity.alone_undetermined", promise=promise, why=by_n[1].reason if 1 in by_n else None),
                    f"undetermined: one user alone is not shown to be served {promise} or not "
                    f"({by_n[1].reason if 1 in by_n else 'nothing was measured'})")
    if held_n == 0 and limit != "undetermined":
        alone = _alone(by_n[1], c)
        return twin(Reason("capacity.holds_none", alone=alone), f"holds 0 users: {alone}")
    if limit == "max_n":
        return twin(Reason("capacity.holds_up_to_max_n", held=held_n, promise=promise, max_n=max_n),
                    f"holds at least {held_n} user{'' if held_n == 1 else 's'} {promise}: every N probed passed, "
                    f"up to --max-n {max_n}")
    nxt = next((p for p in sorted(points, key=lambda p: p.n) if p.n > held_n), None)
    if limit == "undetermined" and nxt is None:
        return twin(Reason("capacity.search_unfinished", held=held_n, promise=promise),
                    f"holds at least {held_n} user{'' if held_n == 1 else 's'} {promise}; the search did not finish")
    assert nxt is not None
    if limit == "undetermined":
        return twin(Reason("capacity.holds_at_least", held=held_n, promise=promise, next_n=nxt.n,
                           next_status=nxt.status, next_reason=nxt.reason),
                    f"holds at least {held_n} user{'' if held_n == 1 else 's'} {promise}; "
                    f"N={nxt.n} is {nxt.status} ({nxt.reason})")
    then = _next(nxt)
    return twin(Reason("capacity.holds", held=held_n, promise=promise, then=then),
                f"holds {held_n} user{'' if held_n == 1 else 's'} {promise}; {then}")


def _next(p: Point) -> Reason:
    """What the first N that did not pass does to its users."""
    if p.failed:
        return twin(Reason("capacity.next_fails", n=p.n, why=p.reason), f"at {p.n} {p.reason}")
    if p.rate_status == "fail" or p.ttft_status != "fail":
        return twin(Reason("capacity.next_too_slow", n=p.n, rate=p.per_user_tok_s),
                    f"the {p.n}{'th' if 10 <= p.n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(p.n % 10, 'th')} "
                    f"drops each to {'-' if p.per_user_tok_s is None else f'{p.per_user_tok_s:.1f}'} tok/s")
    return twin(Reason("capacity.next_too_late", n=p.n, ttft=p.ttft_s),
                f"the {p.n}{'th' if 10 <= p.n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(p.n % 10, 'th')} "
                f"makes users wait {p.ttft_s or 0:.2f} s for a first token")


def _alone(p: Point, c: Criteria) -> Reason:
    """Why one user alone is not served as promised."""
    if p.failed:
        return twin(Reason("capacity.alone_fails", why=p.reason), f"requests fail with one user alone: {p.reason}")
    if p.rate_status == "fail":
        return twin(Reason("capacity.alone_too_slow", rate=p.per_user_tok_s, floor=c.min_user_rate_tok_s,
                           percentile=c.percentile),
                    f"one user alone gets {p.per_user_tok_s or 0:.1f} tok/s "
                    f"({'median' if c.percentile == 50 else f'{c.percentile:g}% of users'}), below the "
                    f"{c.min_user_rate_tok_s:g} tok/s floor")
    return twin(Reason("capacity.alone_too_late", ttft=p.ttft_s, ceiling=c.max_ttft_s, percentile=c.percentile),
                f"one user alone waits {p.ttft_s or 0:.2f} s for a first token "
                f"({'median' if c.percentile == 50 else f'{c.percentile:g}% of users'}), above the "
                f"{c.max_ttft_s:g} s ceiling")


def _warnings(
    samples: Sequence[ProbeSample], drift: BaselineDrift | None, odd: Sequence[NonMonotone], points: Sequence[Point],
    c: Criteria
) -> list[Finding]:
    out = []
    if drift is not None and drifted(drift.change):
        out.append(Finding(
            twin(Reason("capacity.drift", change=drift.change, start_tok_s=drift.start_tok_s,
                        end_tok_s=drift.end_tok_s, limit=DRIFT_LIMIT),
                 f"drift: the serial baseline moved {drift.change:+.1%} between the start and the end of the search "
                 f"({drift.start_tok_s:.1f} -> {drift.end_tok_s:.1f} tok/s), beyond the {DRIFT_LIMIT:.0%} limit"),
            twin(Reason("capacity.drift_fix"),
                 "the machine changed while probing (heat, other load): let it settle and rerun"),
        ))
    out += [Finding(twin(Reason("capacity.non_monotone", reading=x.message), f"non-monotone: {x.message}"),
                     twin(Reason("capacity.non_monotone_fix"), "reported as measured; rerun to see whether it holds"))
            for x in odd]
    off = [name for s in samples for name in s.length_off]
    if off:
        out.append(Finding(twin(Reason("capacity.length_trap", requests=len(off), named=tuple(off[:4])),
                                 f"output-length trap: {len(off)} measured request(s) off the asked length: "
                                 f"{'; '.join(map(str, off[:4]))}"),
                            twin(Reason("capacity.length_trap_fix"),
                                 "the engine does not pin the output length; rates use the tokens actually produced")))
    late = [name for s in samples for name in s.client_late]
    if late:
        out.append(Finding(twin(Reason("capacity.client_late", requests=len(late), named=tuple(late[:4])),
                                 f"the client itself was late reading {len(late)} measured request(s), left out of the "
                                 f"samples: {'; '.join(map(str, late[:4]))}"),
                            twin(Reason("capacity.client_late_fix"),
                                 "measure on a quieter machine, or raise --remeasures so an undecided N is probed "
                                 "again")))
    held = [name for s in samples for name in s.hop_held]
    if held:
        out.append(Finding(twin(Reason("capacity.hop_held", requests=len(held), named=tuple(held[:4])),
                                 f"{len(held)} measured request(s) arrived in bursts coalesced in transit, which a hop "
                                 "that buffers the stream (a proxy, a gateway) may have held: left out of the samples: "
                                 f"{'; '.join(map(str, held[:4]))}"),
                            twin(Reason("capacity.hop_held_fix"),
                                 "point servecheck at the server itself, not through the hop")))
    dirty = [name for s in samples for name in s.contaminated]
    if dirty:
        out.append(Finding(twin(Reason("capacity.contaminated", requests=len(dirty)),
                                 f"contaminated by the prefix cache: {len(dirty)} measured request(s) "
                                 "had cached prompt tokens"),
                            twin(Reason("capacity.contaminated_fix"),
                                 "restart the server or disable prompt caching and rerun")))
    short = [p.n for p in points if p.rate is not None and p.rate.level < c.level]
    if short:
        out.append(Finding(twin(Reason("capacity.intervals_short", level=c.level, ns=tuple(short)),
                                 f"too few samples for a {c.level:.0%} interval at N={', '.join(map(str, short))}"),
                            twin(Reason("capacity.intervals_short_fix"),
                                 "raise --remeasures, or a lower --percentile needs fewer samples")))
    return out
