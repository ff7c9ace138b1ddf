"""Whether speculation pays, pure: the per-stream decode rate against a baseline's at one point (pays,
costs or inconclusive), and the first N that stops paying."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from servecheck.analysis.rules import FIGURE_FRAC
from servecheck.analysis.stats import mean_interval, student_t_95
from servecheck.model.bodies.speculative import PaysVerdict
from servecheck.model.reason import Reason


# The per-stream decode rate against the baseline's: pays when the interval of the ratio lies above
# 1 + FIGURE_FRAC, costs when it lies below 1 - FIGURE_FRAC. 2% is the schema's rule for figures
# (analysis.rules): a difference smaller than that is not one servecheck reports.


@dataclass(frozen=True, slots=True)
class Pays:
    """The per-stream decode rate against the baseline's at one point."""

    verdict: PaysVerdict
    ratio: float | None  # mean rate / baseline mean rate
    interval: tuple[float, float] | None
    reason: Reason


def pays(rates: Sequence[float], baseline: Sequence[float]) -> Pays:
    """pays / costs / inconclusive from two sets of per-stream rates (tok/s), each with its interval."""
    a, b = mean_interval(rates, student_t_95), mean_interval(baseline, student_t_95)
    if a is None or b is None:
        return Pays("inconclusive", None, None, (
            Reason("speculative.too_few_streams", streams=len(rates), baseline_streams=len(baseline))))
    ratio = a.mean / b.mean if b.mean > 0 else None
    if ratio is None or b.lo <= 0:
        return Pays("inconclusive", ratio, None, Reason("speculative.baseline_zero"))
    lo, hi = a.lo / b.hi, a.hi / b.lo
    if lo > 1 + FIGURE_FRAC:
        return Pays("pays", ratio, (lo, hi), (
            Reason("speculative.pays", ratio=ratio, lo=lo, hi=hi, above=1 + FIGURE_FRAC)))
    if hi < 1 - FIGURE_FRAC:
        return Pays("costs", ratio, (lo, hi), (
            Reason("speculative.costs", ratio=ratio, lo=lo, hi=hi, below=1 - FIGURE_FRAC)))
    return Pays("inconclusive", ratio, (lo, hi), (
        Reason("speculative.pays_open", ratio=ratio, lo=lo, hi=hi, below=1 - FIGURE_FRAC, above=1 + FIGURE_FRAC)))


def stops_paying(by_n: Mapping[int, PaysVerdict]) -> tuple[int | None, Reason]:
    """The first N (ascending) that does not pay after a smaller one did; None with why otherwise."""
    ordered = sorted(by_n)
    if not ordered:
        return None, Reason("speculative.no_baseline")
    if by_n[ordered[0]] != "pays":
        return None, Reason("speculative.never_pays", n=ordered[0], pays=by_n[ordered[0]])
    for n in ordered[1:]:
        if by_n[n] != "pays":
            return n, Reason("speculative.stops_paying", paid_up_to=ordered[ordered.index(n) - 1], n=n,
                                  pays=by_n[n])
    return None, Reason("speculative.pays_throughout", n=ordered[-1])
