"""The whole capacity run, pure: the N held, what bound it, the marginal users, non-monotone readings,
the baseline's drift and the warnings, put together by `analyse` from the probe samples alone."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from servecheck.analysis.arms import Warning_
from servecheck.analysis.capacity.criteria import Criteria
from servecheck.analysis.capacity.judging import assess
from servecheck.analysis.capacity.probes import ProbeSample
from servecheck.analysis.capacity.records import CapacityAnalysis, Drift, Marginal, NonMonotone, Point
from servecheck.analysis.capacity.words import answer_text
from servecheck.analysis.rules import DRIFT_LIMIT, drifted
from servecheck.analysis.stats import quantile_interval
from servecheck.model.bodies.capacity import Limit


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
                out.append(NonMonotone("status", a.n, b.n, f"N={b.n} passed although N={a.n} failed"))
            if a.rate is not None and b.rate is not None and b.rate.lo > a.rate.hi:
                out.append(NonMonotone("per_user_rate", a.n, b.n, f"the per-user rate rises from N={a.n} "
                                       f"[{a.rate.lo:.1f}, {a.rate.hi:.1f}] to N={b.n} "
                                       f"[{b.rate.lo:.1f}, {b.rate.hi:.1f}] tok/s"))
    return out


def drift_of(start: Point | None, end: ProbeSample | None, c: Criteria) -> Drift | None:
    if start is None or start.per_user_tok_s is None or end is None or not end.rates_tok_s:
        return None
    end_rate = quantile_interval(end.rates_tok_s, c.rate_quantile, c.level).estimate
    return Drift(start.per_user_tok_s, end_rate) if start.per_user_tok_s > 0 else None


def analyse(
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
        points=points, max_concurrency=held_n, limit=limit, answer=answer_text(points, held_n, limit, c, max_n),
        marginals=margins, least=min(margins, key=lambda m: m.gain_tok_s_per_user, default=None), drift=drift,
        non_monotone=odd, warnings=tuple(_warnings(all_samples, drift, odd, points, c)),
    )


def _warnings(
    samples: Sequence[ProbeSample], drift: Drift | None, odd: Sequence[NonMonotone], points: Sequence[Point],
    c: Criteria
) -> list[Warning_]:
    out = []
    if drift is not None and drifted(drift.change):
        out.append(Warning_(
            f"drift: the serial baseline moved {drift.change:+.1%} between the start and the end of the search "
            f"({drift.start_tok_s:.1f} -> {drift.end_tok_s:.1f} tok/s), beyond the {DRIFT_LIMIT:.0%} limit",
            "the machine changed while probing (heat, other load): let it settle and rerun",
        ))
    out += [Warning_(f"non-monotone: {x.message}", "reported as measured; rerun to see whether it holds") for x in odd]
    off = [name for s in samples for name in s.length_off]
    if off:
        out.append(Warning_(f"output-length trap: {len(off)} measured request(s) off the asked length: "
                            f"{'; '.join(off[:4])}",
                            "the engine does not pin the output length; rates use the tokens actually produced"))
    late = [name for s in samples for name in s.client_late]
    if late:
        out.append(Warning_(f"the client itself was late reading {len(late)} measured request(s), left out of the "
                            f"samples: {'; '.join(late[:4])}",
                            "measure on a quieter machine, or raise --remeasures so an undecided N is probed again"))
    held = [name for s in samples for name in s.hop_held]
    if held:
        out.append(Warning_(f"{len(held)} measured request(s) arrived in bursts coalesced in transit, which a hop that "
                            f"buffers the stream (a proxy, a gateway) may have held: left out of the samples: "
                            f"{'; '.join(held[:4])}", "point servecheck at the server itself, not through the hop"))
    dirty = [name for s in samples for name in s.contaminated]
    if dirty:
        out.append(Warning_(f"contaminated by the prefix cache: {len(dirty)} measured request(s) "
                            "had cached prompt tokens",
                            "restart the server or disable prompt caching and rerun"))
    short = [p.n for p in points if p.rate is not None and p.rate.level < c.level]
    if short:
        out.append(Warning_(f"too few samples for a {c.level:.0%} interval at N={', '.join(map(str, short))}",
                            "raise --remeasures, or a lower --percentile needs fewer samples"))
    return out
