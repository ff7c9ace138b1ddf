"""Cells from request records, pure: one batch's records reduced to a cell, the generation stage timed
over the union of the requests' decoding spans so a queue cannot pass for batching."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from servecheck.analysis.arms.records import Cell
from servecheck.analysis.stats import median
from servecheck.model.records import NS_PER_S, RequestRecord


def union_length_ns(intervals: Iterable[tuple[int, int]]) -> int:
    """Total length covered by at least one of the intervals."""
    total = 0
    cur_lo: int | None = None
    cur_hi = 0
    for lo, hi in sorted(i for i in intervals if i[1] > i[0]):
        if cur_lo is None or lo > cur_hi:
            if cur_lo is not None:
                total += cur_hi - cur_lo
            cur_lo, cur_hi = lo, hi
        else:
            cur_hi = max(cur_hi, hi)
    if cur_lo is not None:
        total += cur_hi - cur_lo
    return total


def decode_interval_ns(record: RequestRecord) -> tuple[int, int] | None:
    """First to last token event of a request, when it produced more than one event."""
    if record.first_token_ns is None:
        return None
    last = record.token_ns[-1] if record.token_ns else record.end_ns
    if last is None or last <= record.first_token_ns:
        return None
    return (record.first_token_ns, last)


def per_user_rate_tok_s(record: RequestRecord) -> float | None:
    """Tokens after the first over the time from first to last token: the rate one user watches."""
    span = decode_interval_ns(record)
    if span is None or record.tokens < 2:
        return None
    return (record.tokens - 1) * NS_PER_S / (span[1] - span[0])


def cell_from_records(
    records: Sequence[RequestRecord],
    *,
    rep: int,
    position: int,
    concurrency: int,
    release_ns: int,
    run: int = 0,
) -> Cell:
    """Reduce one batch's request records to a cell."""
    spans = [s for s in (decode_interval_ns(r) for r in records) if s is not None]
    last_token = max((s[1] for s in spans), default=None)
    ends = [r.end_ns for r in records if r.end_ns is not None]
    ttfts = [r.ttft_ns / NS_PER_S for r in records if r.ok and r.ttft_ns is not None]
    rates = [x for x in (per_user_rate_tok_s(r) for r in records if r.ok) if x is not None]
    wall_end = last_token if last_token is not None else (max(ends) if ends else release_ns)
    return Cell(
        rep=rep,
        position=position,
        concurrency=concurrency,
        wall_s=(wall_end - release_ns) / NS_PER_S,
        tokens=sum(r.tokens for r in records),
        decode_tokens=sum(max(r.tokens - 1, 0) for r in records if decode_interval_ns(r) is not None),
        decoding_union_s=union_length_ns(spans) / NS_PER_S,
        decoding_sum_s=sum(hi - lo for lo, hi in spans) / NS_PER_S,
        per_user_rate_tok_s=median(rates) if rates else None,
        ttft_s=median(ttfts) if ttfts else None,
        start_s=release_ns / NS_PER_S,
        batch_wall_s=(max(ends) - release_ns) / NS_PER_S if ends else None,
        run=run,
        failed=sum(1 for r in records if not r.ok),
    )

