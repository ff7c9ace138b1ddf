"""Small pure statistics shared by the analyses: median, range, mode, ratios. No numpy needed for a handful of values."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass


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
