"""One probe from its request records, pure: the steady part of a closed loop at N reduced to per-user
rates and TTFTs, the requests the client read late or a hop held set apart, and the requests off the
asked length or served from the prefix cache named."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from servecheck.analysis.arms import per_user_rate_tok_s
from servecheck.analysis.cache import record_contaminated
from servecheck.analysis.rules import OUTPUT_LENGTH_TOLERANCE
from servecheck.model.reason import Reason
from servecheck.model.records import NS_PER_S, RequestRecord


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
    failure: Reason | None  # how many failed, and the first failure's reason in the server's words
    length_off: tuple[Reason, ...] = ()  # measured requests more than 5% off the asked length, named
    contaminated: tuple[Reason, ...] = ()  # measured requests the prefix cache partly served, named
    # Steady requests whose stamps the client itself read late (analysis.client_timing), named: their
    # rate and TTFT are no evidence and are left out of the samples.
    client_late: tuple[Reason, ...] = ()
    # Steady requests whose stream arrived in bursts a hop that buffers it may have held beyond the same
    # tolerance (analysis.transit), named: left out of the samples too.
    hop_held: tuple[Reason, ...] = ()
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


def _failure(records: Sequence[RequestRecord]) -> Reason | None:
    bad = [r for r in records if not r.ok]
    if not bad:
        return None
    r = bad[0]
    return Reason("capacity.requests_failed", failed=len(bad), sent=len(records), status=r.status, error=r.error,
                       http_status=r.http_status)


def _length_off(records: Sequence[RequestRecord], asked: int) -> tuple[Reason, ...]:
    return tuple(
        Reason("capacity.request_off_length", index=r.index, nonce=r.nonce, tokens=r.tokens, asked=asked)
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
        contaminated=tuple(Reason("capacity.request_cached", index=r.index, nonce=r.nonce)
                           for r in kept if record_contaminated(r)),
        client_late=tuple(Reason("capacity.request_late", index=r.index, nonce=r.nonce, late_ms=late[r.index])
                          for r in kept if r.index in late)
        + tuple(Reason("capacity.request_ttft_late", index=r.index, nonce=r.nonce, late_ms=late_ttfts[r.index])
                for r in kept if r.index in late_ttfts and r.index not in late),
        hop_held=tuple(Reason("capacity.request_held", index=r.index, nonce=r.nonce, held_ms=held[r.index])
                       for r in kept if r.index in held),
        untimed_rates=tuple(untimed),
        untimed_ttfts=tuple(untimed_ttfts),
    )


def _decode_span_s(r: RequestRecord) -> float | None:
    if len(r.token_ns) < 2:
        return None
    return (r.token_ns[-1] - r.token_ns[0]) / NS_PER_S or None


def length_valid(samples: Sequence[ProbeSample]) -> bool:
    """A run is invalid when any measured request was off the asked output length."""
    return not any(s.length_off for s in samples)
