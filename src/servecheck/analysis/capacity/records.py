"""What the capacity analysis decides, pure: one probed N's point, the marginal user between two points
(with the reason its record carries, `least_words`), the serial baseline's drift, a non-monotone
reading, and the whole analysis."""

from __future__ import annotations

from dataclasses import dataclass, field

from servecheck.analysis.findings import Finding
from servecheck.analysis.rules import DRIFT_LIMIT, drifted
from servecheck.analysis.stats import QuantileInterval
from servecheck.model.bodies import capacity as body
from servecheck.model.bodies.capacity import Limit, NonMonotoneKind, Status
from servecheck.model.reason import Reason


@dataclass(frozen=True, slots=True)
class Point:
    """Every probe at one N pooled, and what they show."""

    n: int
    probes: int
    rate: QuantileInterval | None
    ttft: QuantileInterval | None
    aggregate_tok_s: float | None  # median over the probes
    status: Status
    rate_status: Status
    ttft_status: Status | None  # None without a TTFT ceiling
    reason: Reason
    failed: int = 0

    @property
    def per_user_tok_s(self) -> float | None:
        return None if self.rate is None else self.rate.estimate

    @property
    def ttft_s(self) -> float | None:
        return None if self.ttft is None else self.ttft.estimate

    def record(self, marginal: Marginal | None = None) -> body.CapacityPoint:
        """As the document records it, with what the users added since the N before bought (`marginal`)."""
        m = marginal
        return body.CapacityPoint(
            n=self.n, per_user_tok_s=self.per_user_tok_s, ttft_s=self.ttft_s, aggregate_tok_s=self.aggregate_tok_s,
            status=self.status, per_user_interval=None if self.rate is None else (self.rate.lo, self.rate.hi),
            ttft_interval=None if self.ttft is None else (self.ttft.lo, self.ttft.hi),
            interval_level=None if self.rate is None else self.rate.level,
            samples=0 if self.rate is None else self.rate.n, rate_status=self.rate_status, ttft_status=self.ttft_status,
            reason=self.reason, probes=self.probes, failed=self.failed, prev_n=None if m is None else m.prev_n,
            marginal_gain_tok_s_per_user=None if m is None else m.gain_tok_s_per_user,
            marginal_aggregate_gain=None if m is None else m.aggregate_gain,
            marginal_per_user_change=None if m is None else m.per_user_change,
        )


@dataclass(frozen=True, slots=True)
class Marginal:
    """What the users added between two probed N buy the operator and cost each user."""

    n: int
    prev_n: int
    gain_tok_s_per_user: float  # (aggregate(n) - aggregate(prev)) / (n - prev)
    aggregate_gain: float  # aggregate(n) / aggregate(prev) - 1
    per_user_change: float | None  # per-user rate(n) / rate(prev) - 1

    def record(self) -> body.LeastMarginal:
        return body.LeastMarginal(n=self.n, prev_n=self.prev_n, gain_tok_s_per_user=self.gain_tok_s_per_user,
                                  aggregate_gain=self.aggregate_gain, per_user_change=self.per_user_change,
                                  text=least_words(self))


@dataclass(frozen=True, slots=True)
class BaselineDrift:
    """The serial baseline at the start against the same probe at the end."""

    start_tok_s: float
    end_tok_s: float

    @property
    def change(self) -> float:
        return self.end_tok_s / self.start_tok_s - 1.0

    def record(self) -> body.CapacityDrift:
        return body.CapacityDrift(start_tok_s=self.start_tok_s, end_tok_s=self.end_tok_s, change=self.change,
                                  limit=DRIFT_LIMIT, exceeded=drifted(self.change))


@dataclass(frozen=True, slots=True)
class NonMonotone:
    kind: NonMonotoneKind
    n_low: int
    n_high: int
    message: Reason

    def record(self) -> body.NonMonotone:
        return body.NonMonotone(kind=self.kind, n_low=self.n_low, n_high=self.n_high, message=self.message)


@dataclass(frozen=True)
class CapacityAnalysis:
    points: tuple[Point, ...]
    max_concurrency: int | None
    limit: Limit
    answer: Reason
    marginals: tuple[Marginal, ...]
    least: Marginal | None
    drift: BaselineDrift | None
    non_monotone: tuple[NonMonotone, ...]
    warnings: tuple[Finding, ...] = field(default=())

    @property
    def determined(self) -> bool:
        return self.limit != "undetermined"

    def point_records(self) -> tuple[body.CapacityPoint, ...]:
        by_n = {m.n: m for m in self.marginals}
        return tuple(p.record(by_n.get(p.n)) for p in self.points)


def least_words(m: Marginal) -> Reason:
    """Where the marginal user buys least, for the record's text (`model.words.capacity` says it)."""
    return Reason("capacity.least_marginal", n=m.n, prev_n=m.prev_n, gain_tok_s_per_user=m.gain_tok_s_per_user,
               aggregate_gain=m.aggregate_gain, per_user_change=m.per_user_change)
