"""Small pure statistics shared by the analyses: median, range, mode, ratios, and every interval they
report (order statistics for a quantile, normal or t for a mean). No numpy needed for a handful of values."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from servecheck.analysis.rules import INTERVAL_LEVEL


def median(values: Sequence[float]) -> float:
    """The median; raises ValueError on an empty sequence (an empty median is a bug upstream)."""
    if not values:
        raise ValueError("median of an empty sequence")
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[mid])
    return (ordered[mid - 1] + ordered[mid]) / 2.0


def value_range(values: Sequence[float]) -> tuple[float, float]:
    if not values:
        raise ValueError("range of an empty sequence")
    return (float(min(values)), float(max(values)))


def mode(values: Sequence[int]) -> int:
    """The most common value; ties go to the largest value.

    Used for output lengths: when counts tie, the longest length is the one the server was
    asked for (a server stops early, it never overshoots), so it is the honest reference.
    """
    if not values:
        raise ValueError("mode of an empty sequence")
    counts = Counter(values)
    return max(counts, key=lambda v: (counts[v], v))


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is missing or the denominator is not positive."""
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


@dataclass(frozen=True, slots=True)
class Summary:
    """A median with its range across repetitions."""

    median: float
    lo: float
    hi: float
    count: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        lo, hi = value_range(values)
        return cls(median=median(values), lo=lo, hi=hi, count=len(values))

    @property
    def spread(self) -> float:
        return self.hi - self.lo


# --- order statistics: a distribution-free interval for a quantile ----------------------------
# Exact coverage from the binomial, no resampling, no seed. arms judges the median of within-rep
# ratios with it, capacity a percentile of per-user rates and TTFTs.


@dataclass(frozen=True, slots=True)
class QuantileInterval:
    """A sample quantile with its interval [x(lo_rank), x(hi_rank)]."""

    estimate: float
    lo: float
    hi: float
    n: int
    quantile: float  # 0.5 is the median
    level: float  # the exact chance the interval covers the true quantile


def binomial_cdf(n: int, q: float) -> list[float]:
    """cdf[k] = P(Binomial(n, q) < k), for k = 0 .. n + 1."""
    out, total = [0.0], 0.0
    for i in range(n + 1):
        total += math.comb(n, i) * q**i * (1.0 - q) ** (n - i)
        out.append(total)
    return out


def coverage(n: int, q: float, lo_rank: int, hi_rank: int) -> float:
    """P(x(lo_rank) <= true q-quantile <= x(hi_rank)) = P(lo_rank <= Binomial(n, q) < hi_rank)."""
    cdf = binomial_cdf(n, q)
    return cdf[hi_rank] - cdf[lo_rank]


def interval_ranks(n: int, q: float, level: float = INTERVAL_LEVEL) -> tuple[int, int, float]:
    """Equal-tailed ranks (1-based): x(lo) lies above the true quantile, and x(hi) below it, each
    with chance at most (1 - level) / 2, so each one-sided verdict errs that rarely. Where n is too
    small for a tail, that end is the extreme value and the level falls short (reported as it is).
    For the median the two ends are symmetric, x(k) and x(n + 1 - k)."""
    cdf = binomial_cdf(n, q)
    tail = (1.0 - level) / 2.0
    lo = max([k for k in range(1, n + 1) if cdf[k] <= tail], default=1)
    hi = min([k for k in range(lo, n + 1) if 1.0 - cdf[k] <= tail], default=n)
    return lo, hi, (cdf[hi] - cdf[lo]) if hi > lo else 0.0


def sample_quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (the median for q = 0.5, to the last bit where
    the two middle values are within 2x of each other)."""
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def quantile_interval(values: Sequence[float], q: float, level: float = INTERVAL_LEVEL) -> QuantileInterval:
    """The q-quantile of `values` with its order-statistic interval; one value gives level 0."""
    if not values:
        raise ValueError("quantile_interval of no values")
    xs = sorted(float(v) for v in values)
    lo, hi, reached = interval_ranks(len(xs), q, level)
    return QuantileInterval(sample_quantile(xs, q), xs[lo - 1], xs[hi - 1], len(xs), q, reached)


def samples_needed(q: float, level: float = INTERVAL_LEVEL) -> int:
    """The fewest samples whose interval covers the q-quantile with `level`."""
    n = 2
    while interval_ranks(n, q, level)[2] < level:
        n += 1
    return n


# --- the mean with a 95% interval -------------------------------------------------------------
# Two-sided 95% quantiles: the normal one, and Student's t by degrees of freedom (1..30; beyond
# 30 the normal one). speculative pools many decode steps (normal) and compares a few per-stream
# rates (t).
Z_95 = 1.96
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def normal_95(df: int) -> float:
    """The normal quantile whatever the degrees of freedom: for a mean over many values."""
    return Z_95


def student_t_95(df: int) -> float:
    """Student's t quantile for `df` degrees of freedom: for a mean over a few values."""
    return _T95[df - 1] if df <= len(_T95) else Z_95


@dataclass(frozen=True, slots=True)
class MeanInterval:
    mean: float
    lo: float
    hi: float


def mean_interval(values: Sequence[float], critical: Callable[[int], float] = student_t_95) -> MeanInterval | None:
    """The mean and its two-sided interval, mean +- critical(n - 1) * s / sqrt(n); None below two values."""
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    half = critical(len(values) - 1) * math.sqrt(var / len(values))
    return MeanInterval(mean, mean - half, mean + half)
