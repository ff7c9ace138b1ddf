"""How many users a server holds above a per-user floor: the pure analysis behind `servecheck capacity`.

A probe at N keeps N equal requests in flight (a closed loop) and is reduced here to per-request
samples from its steady part. A probed N passes only when the order-statistic interval of the
per-user rate at the asked percentile lies wholly above the floor (and, with a TTFT ceiling, the
TTFT interval wholly below it); `max_concurrency` is never an N that was not shown to pass.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from servecheck.analysis.arms import Warning_, per_user_rate_tok_s
from servecheck.analysis.cache import record_contaminated
from servecheck.analysis.rules import DRIFT_LIMIT, INTERVAL_LEVEL, OUTPUT_LENGTH_TOLERANCE, drifted
from servecheck.analysis.stats import QuantileInterval, median, quantile_interval, samples_needed
from servecheck.model.bodies import capacity as body
from servecheck.model.bodies.capacity import Limit, NonMonotoneKind, Status
from servecheck.model.records import NS_PER_S, RequestRecord


# A verdict needs an interval that covers the true percentile with at least INTERVAL_LEVEL
# (analysis.rules; exact, from the binomial). A probe too small to reach it is `uncertain`.
# Each lane's measured requests after its discarded first one. Two, so that every lane contributes
# a request that started and ended while all N were in flight, and the aggregate window holds at
# least one whole round of the loop.
MIN_MEASURED_PER_LANE = 2
# The serial baseline is measured again at the end; a change beyond DRIFT_LIMIT (analysis.rules),
# either way, means the machine drifted while the search ran.


# --- what is judged --------------------------------------------------------------------------


@dataclass(frozen=True)
class Criteria:
    """The floor and ceiling every probe is judged against.

    `percentile` P reads "P% of users are served at least this well": the per-user rate is judged
    at its (100 - P)th percentile and the TTFT at its Pth (50: both at the median)."""

    min_user_rate_tok_s: float
    max_ttft_s: float | None = None
    percentile: float = 50.0
    level: float = INTERVAL_LEVEL

    @property
    def rate_quantile(self) -> float:
        return 1.0 - self.percentile / 100.0

    @property
    def ttft_quantile(self) -> float:
        return self.percentile / 100.0

    @property
    def words(self) -> str:
        """How the percentile reads in a sentence."""
        return "median" if self.percentile == 50 else f"{self.percentile:g}% of users"

    def samples_needed(self) -> int:
        return max(samples_needed(self.rate_quantile, self.level), samples_needed(self.ttft_quantile, self.level))

    def measured_per_lane(self, n: int) -> int:
        """Requests each of n lanes sends after its discarded first one. When the lanes finish in
        step, the last round loses all but one request to the drain, hence the one extra round."""
        needed = self.samples_needed()
        return max(MIN_MEASURED_PER_LANE, 1 + math.ceil((needed - 1) / n))



# --- one probe, from its request records -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProbeSample:
    """One closed-loop probe at N reduced to its steady part."""

    n: int
    rates_tok_s: tuple[float, ...]  # per measured request: tokens after the first / first->last token
    ttfts_s: tuple[float, ...]
    aggregate_tok_s: float | None  # tokens produced inside the steady window / its length
    window_s: tuple[float, float] | None  # (start, end), seconds from the run start
    requests: int  # sent in the probe, the discarded ones included
    discarded: int
    failed: int
    failure: str | None  # the first failure's reason, in the server's words
    length_off: tuple[str, ...] = ()  # measured requests more than 5% off the asked length, named
    contaminated: tuple[str, ...] = ()  # measured requests the prefix cache partly served, named
    # Steady requests whose stamps the client itself read late (analysis.client_timing), named: their
    # rate and TTFT are no evidence and are left out of the samples.
    client_late: tuple[str, ...] = ()
    # Steady requests whose stream arrived in bursts a hop that buffers it may have held beyond the same
    # tolerance (analysis.transit), named: left out of the samples too.
    hop_held: tuple[str, ...] = ()
    # The left-out requests' rates, each with the share of its decode span that is untimed (how late, or
    # how long held, over the span): `assess` keeps them where the status is the same whatever their truth.
    untimed_rates: tuple[tuple[float, float], ...] = ()
    # TTFTs read late by more than 5% of the ceiling, each with how late (s): the true one lies in
    # [ttft - late, ttft]; `assess` keeps them where the TTFT status is the same at both ends.
    untimed_ttfts: tuple[tuple[float, float], ...] = ()

    @property
    def measured(self) -> int:
        return len(self.rates_tok_s)


def steady_records(records: Sequence[RequestRecord], n: int) -> tuple[list[RequestRecord], int, int | None]:
    """(measured records, window start ns, window end ns). The n first sent are each lane's
    synchronized first request; the window ends when the first lane runs out of work (the first
    end after the last send), so every request kept ran with all n lanes busy."""
    by_send = sorted(records, key=lambda r: r.send_ns)
    first, rest = by_send[:n], by_send[n:]
    first_ends = [r.end_ns for r in first if r.end_ns is not None]
    start = max(first_ends) if first_ends else by_send[0].send_ns
    last_send = by_send[-1].send_ns
    later = [r.end_ns for r in records if r.end_ns is not None and r.end_ns > last_send]
    end = min(later) if later else None
    kept = [r for r in rest if r.ok and r.end_ns is not None and (end is None or r.end_ns <= end)]
    return kept, start, end


def tokens_in_window(records: Sequence[RequestRecord], start_ns: int, end_ns: int) -> float:
    """Tokens produced inside [start, end]: each record's tokens shared out over its token events."""
    total = 0.0
    for r in records:
        if r.token_ns and r.tokens > 0:
            inside = sum(1 for t in r.token_ns if start_ns <= t <= end_ns)
            total += r.tokens * inside / len(r.token_ns)
    return total


def _failure(records: Sequence[RequestRecord]) -> str | None:
    bad = [r for r in records if not r.ok]
    if not bad:
        return None
    r = bad[0]
    what = r.error or (f"HTTP {r.http_status}" if r.http_status else r.status)
    return f"{len(bad)} of {len(records)} requests failed ({r.status}: {what})"


def _length_off(records: Sequence[RequestRecord], asked: int) -> tuple[str, ...]:
    return tuple(
        f"request {r.index} ({r.nonce}): {r.tokens} tokens for {asked} asked"
        for r in records
        if asked > 0 and abs(r.tokens - asked) / asked > OUTPUT_LENGTH_TOLERANCE
    )


def probe_from_records(records: Sequence[RequestRecord], *, n: int, tokens_asked: int,
                       late: Mapping[int, float] | None = None, held: Mapping[int, float] | None = None,
                       late_ttfts: Mapping[int, float] | None = None) -> ProbeSample:
    """Reduce one probe's request records to the samples the verdict reads; `late` maps the index of
    each request the client read late to how late (ms), `held` of each a hop may have held to how long:
    their rates and TTFTs are left out; `late_ttfts` maps those whose first token was read late by more
    than 5% of the TTFT ceiling to how late (ms): only their TTFTs are set apart."""
    if len(records) < n or n < 1:
        raise ValueError(f"a probe at N={n} needs at least {n} requests, got {len(records)}")
    kept, start, end = steady_records(records, n)
    late, held = late or {}, held or {}
    timed = [r for r in kept if r.index not in late and r.index not in held]
    rates = [x for x in (per_user_rate_tok_s(r) for r in timed) if x is not None]
    untimed = [(x, (late.get(r.index, 0.0) + held.get(r.index, 0.0)) / 1e3 / span)
               for r in kept if r.index in late or r.index in held
               if (x := per_user_rate_tok_s(r)) is not None and (span := _decode_span_s(r))]
    # a TTFT is the client's only where read late beyond its own rule (`late_ttfts`); a rate's lateness
    # (against the request's whole time) says nothing of it
    late_ttfts = late_ttfts or {}
    ttfts = [r.ttft_ns / NS_PER_S for r in kept
             if r.ttft_ns is not None and r.index not in late_ttfts and r.index not in held]
    untimed_ttfts = [(r.ttft_ns / NS_PER_S, late_ttfts[r.index] / 1e3) for r in kept
                     if r.ttft_ns is not None and r.index in late_ttfts and r.index not in held]
    window = (start, end) if end is not None and end > start else None
    aggregate = tokens_in_window(records, *window) * NS_PER_S / (window[1] - window[0]) if window else None
    return ProbeSample(
        n=n, rates_tok_s=tuple(rates), ttfts_s=tuple(ttfts), aggregate_tok_s=aggregate,
        window_s=None if window is None else (window[0] / NS_PER_S, window[1] / NS_PER_S),
        requests=len(records), discarded=n, failed=sum(1 for r in records if not r.ok), failure=_failure(records),
        length_off=_length_off(kept, tokens_asked),
        contaminated=tuple(f"request {r.index} ({r.nonce})" for r in kept if record_contaminated(r)),
        client_late=tuple(f"request {r.index} ({r.nonce}): {late[r.index]:.0f} ms" for r in kept if r.index in late)
        + tuple(f"request {r.index} ({r.nonce}): its TTFT, {late_ttfts[r.index]:.0f} ms" for r in kept
                if r.index in late_ttfts and r.index not in late),
        hop_held=tuple(f"request {r.index} ({r.nonce}): {held[r.index]:.0f} ms" for r in kept if r.index in held),
        untimed_rates=tuple(untimed),
        untimed_ttfts=tuple(untimed_ttfts),
    )


def _decode_span_s(r: RequestRecord) -> float | None:
    if len(r.token_ns) < 2:
        return None
    return (r.token_ns[-1] - r.token_ns[0]) / NS_PER_S or None


# --- one probed N: its verdict ---------------------------------------------------------------


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
    reason: str
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
    reason = failure or _reason(rate, ttft, rate_status, ttft_status, c)
    late = sum(len(p.client_late) for p in probes)
    if kept is not None:
        reason = (f"{reason}; {len(kept) - sum(len(p.rates_tok_s) for p in probes)} rate(s) read late or held by a "
                  "hop kept: the status is the same whatever their true rates")
    elif late and status == "uncertain" and not failure:
        reason = f"{reason}; {late} measured request(s) left out because the client itself was late reading them"
    held = sum(len(p.hop_held) for p in probes)
    if kept is None and held and status == "uncertain" and not failure:
        reason = (f"{reason}; {held} measured request(s) left out because a hop that buffers the stream "
                  "may have held them")
    return Point(n, len(probes), rate, ttft, median(aggs) if aggs else None, status, rate_status, ttft_status,
                 reason, failed)


def _reason(rate: QuantileInterval | None, ttft: QuantileInterval | None, rs: Status, ts: Status | None,
            c: Criteria) -> str:
    if rate is None:
        return "no measured request produced a per-user rate"
    if rate.level < c.level:
        return f"{rate.n} samples give a {rate.level:.0%} interval, below the {c.level:.0%} a verdict needs"
    parts = [f"per-user rate [{rate.lo:.1f}, {rate.hi:.1f}] tok/s {_side_words(rs, 'above', 'below')} the "
             f"{c.min_user_rate_tok_s:g} tok/s floor"]
    if ts is not None and ttft is not None and c.max_ttft_s is not None:
        parts.append(f"TTFT [{ttft.lo:.3f}, {ttft.hi:.3f}] s "
                     f"{_side_words(ts, 'below', 'above')} the {c.max_ttft_s:g} s ceiling")
    return "; ".join(parts)


def _side_words(status: Status, good: str, bad: str) -> str:
    return {"pass": f"wholly {good}", "fail": f"wholly {bad}", "uncertain": "straddles"}[status]


# --- the search ------------------------------------------------------------------------------


def next_n(statuses: Mapping[int, Status], max_n: int) -> int | None:
    """The next N to probe: doubling from 1 while every probe passes (capped at max_n), then
    bisection between the last pass and the first N that did not pass; None when done."""
    if 1 not in statuses:
        return 1
    blocked = [n for n, s in statuses.items() if s != "pass"]
    if not blocked:
        top = max(statuses)
        return None if top >= max_n else min(2 * top, max_n)
    hi = min(blocked)
    lo = max((n for n, s in statuses.items() if s == "pass" and n < hi), default=0)
    return (lo + hi) // 2 if hi - lo > 1 else None


# --- the whole run ---------------------------------------------------------------------------


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
class Drift:
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
    message: str

    def record(self) -> body.NonMonotone:
        return body.NonMonotone(kind=self.kind, n_low=self.n_low, n_high=self.n_high, message=self.message)


@dataclass(frozen=True)
class CapacityAnalysis:
    points: tuple[Point, ...]
    max_concurrency: int | None
    limit: Limit
    answer: str
    marginals: tuple[Marginal, ...]
    least: Marginal | None
    drift: Drift | None
    non_monotone: tuple[NonMonotone, ...]
    warnings: tuple[Warning_, ...] = field(default=())

    @property
    def determined(self) -> bool:
        return self.limit != "undetermined"

    def point_records(self) -> tuple[body.CapacityPoint, ...]:
        by_n = {m.n: m for m in self.marginals}
        return tuple(p.record(by_n.get(p.n)) for p in self.points)


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


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _users(n: int) -> str:
    return f"{n} user{'' if n == 1 else 's'}"


def _promise(c: Criteria) -> str:
    ttft = f" and a first token within {c.max_ttft_s:g} s" if c.max_ttft_s is not None else ""
    return f"at >= {c.min_user_rate_tok_s:g} tok/s each{ttft} ({c.words})"


def _next_words(p: Point, c: Criteria) -> str:
    """What the first N that did not pass does to its users."""
    if p.failed:
        return f"at {p.n} {p.reason}"
    if p.rate_status == "fail" or p.ttft_status != "fail":
        rate = "-" if p.per_user_tok_s is None else f"{p.per_user_tok_s:.1f}"
        return f"the {ordinal(p.n)} drops each to {rate} tok/s"
    return f"the {ordinal(p.n)} makes users wait {p.ttft_s or 0:.2f} s for a first token"


def answer_text(points: Sequence[Point], held_n: int | None, limit: Limit, c: Criteria, max_n: int) -> str:
    """The answer in one line."""
    by_n = {p.n: p for p in points}
    if held_n is None:
        return (f"undetermined: one user alone is not shown to be served {_promise(c)} or not "
                f"({by_n[1].reason if 1 in by_n else 'nothing was measured'})")
    if held_n == 0 and limit != "undetermined":
        return f"holds 0 users: {_alone_words(by_n[1], c)}"
    if limit == "max_n":
        return f"holds at least {_users(held_n)} {_promise(c)}: every N probed passed, up to --max-n {max_n}"
    nxt = next((p for p in sorted(points, key=lambda p: p.n) if p.n > held_n), None)
    if limit == "undetermined":
        tail = f"; N={nxt.n} is {nxt.status} ({nxt.reason})" if nxt is not None else "; the search did not finish"
        return f"holds at least {_users(held_n)} {_promise(c)}{tail}"
    assert nxt is not None
    return f"holds {_users(held_n)} {_promise(c)}; {_next_words(nxt, c)}"


def _alone_words(p: Point, c: Criteria) -> str:
    if p.failed:
        return f"requests fail with one user alone: {p.reason}"
    if p.rate_status == "fail":
        return (f"one user alone gets {p.per_user_tok_s or 0:.1f} tok/s ({c.words}), below the "
                f"{c.min_user_rate_tok_s:g} tok/s floor")
    return (f"one user alone waits {p.ttft_s or 0:.2f} s for a first token ({c.words}), "
            f"above the {c.max_ttft_s:g} s ceiling")


def least_words(m: Marginal) -> str:
    cost = "" if m.per_user_change is None else f" and changes each user's rate by {m.per_user_change:+.0%}"
    users = f"the {ordinal(m.n)} user" if m.n - m.prev_n == 1 else f"each of users {m.prev_n + 1}-{m.n}"
    return (f"the marginal user buys least from N={m.prev_n} to N={m.n}: {users} adds "
            f"{m.gain_tok_s_per_user:+.1f} tok/s ({m.aggregate_gain:+.0%} aggregate){cost}")


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


def length_valid(samples: Sequence[ProbeSample]) -> bool:
    """A run is invalid when any measured request was off the asked output length."""
    return not any(s.length_off for s in samples)
