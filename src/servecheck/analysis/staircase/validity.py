"""Which measurements count, pure: per-request checks and figures (output length, dispatch skew, queue
time, the aggregate), why a batch's finish times cannot show the schedule (`batch_doubt`,
`stall_doubt`), and the N=1 reference the usable single requests give."""

from __future__ import annotations

from collections.abc import Sequence

from servecheck.analysis.client_timing import late_reads, longest_holding
from servecheck.analysis.rules import OUTPUT_LENGTH_TOLERANCE
from servecheck.analysis.staircase.grouping import SMALL_GAP_FRAC
from servecheck.analysis.staircase.records import MeasuredBatch
from servecheck.analysis.stats import median, mode, ratio
from servecheck.model.reason import Reason
from servecheck.model.records import NS_PER_S, BatchResult, RequestRecord

# --- validity --------------------------------------------------------------------------------
# Requests more than OUTPUT_LENGTH_TOLERANCE (5%) away from the run's modal output length smear a
# staircase into a cluster (seed 000 section 7: "fast ones finish first").
# Requests released more than 5% of T1 apart no longer start together; the issue fixes 5%.
DISPATCH_SKEW_FRAC = 0.05

# A client stall: while the client's event loop was due to run and did not, stream data waited
# in the socket and was timed when the loop woke. Finishes read at the end of a stall of D may
# have happened any time in it, so a stall as long as the gap that still joins a group can merge
# a queue's steps into a "cluster" or split a cluster into "steps". Seen on vLLM here: a server
# in another autogroup starved the client for 2-8 s and all four queued finishes "arrived" at once.
# A finish counts as read at a stall's end up to this fraction of T1 after it (reading what piled
# up takes a starved client a while).
STALL_DOUBT_FRAC = SMALL_GAP_FRAC
STALL_READ_FRAC = SMALL_GAP_FRAC


def length_outliers(tokens: Sequence[int], tol: float = OUTPUT_LENGTH_TOLERANCE) -> tuple[int | None, list[int]]:
    """The modal output length and the positions of requests more than `tol` away from it."""
    if not tokens:
        return None, []
    modal = mode(tokens)
    return modal, [i for i, t in enumerate(tokens) if off_length(t, modal, tol)]


def off_length(tokens: int, modal: int | None, tol: float = OUTPUT_LENGTH_TOLERANCE) -> bool:
    """True when an output of `tokens` is more than `tol` away from the run's modal length."""
    if modal is None:
        return False
    if modal <= 0:
        return tokens != modal
    return abs(tokens - modal) / modal > tol


def skew_invalid(dispatch_skew_s: float, single_s: float | None) -> bool:
    """True when the requests did not start together (skew > DISPATCH_SKEW_FRAC x single time)."""
    return single_s is not None and single_s > 0 and dispatch_skew_s > DISPATCH_SKEW_FRAC * single_s


def aggregate_tok_s(tokens: int, last_finish_s: float | None) -> float | None:
    """Tokens actually produced / the time the last request finished: the only honest aggregate."""
    return ratio(float(tokens), last_finish_s)


def queue_time_s(record: RequestRecord) -> float | None:
    """Client latency - server prefill - server decode: the time the request waited in a queue."""
    s = record.server
    if record.latency_ns is None or s is None or s.prompt_s is None or s.decode_s is None:
        return None
    return record.latency_ns / NS_PER_S - s.prompt_s - s.decode_s


def self_reported_sum(records: Sequence[RequestRecord]) -> float | None:
    """Sum of the server's own per-request rates: the misleading figure (350 vs a true 91 in seed 000)."""
    rates = [r.server.self_reported_tok_s if r.server else None for r in records if r.ok]
    if not rates or any(x is None for x in rates):
        return None
    return float(sum(x for x in rates if x is not None))


def _ok_by_finish(batch: BatchResult) -> list[RequestRecord]:
    return [r for r in batch.records_by_finish() if r.ok]


def single_times_s(batches: Sequence[MeasuredBatch], modal: int | None = None) -> list[float]:
    """Every usable N=1 measurement, in run order (before and after the batches, and any extras).

    A single request whose output length is off the run's modal length times a different amount
    of work, so it is no reference for the others and is left out.
    """
    return [
        mb.batch.finish_s()[-1]
        for mb in batches
        if mb.n == 1 and mb.batch.finish_s() and not any(off_length(r.tokens, modal) for r in _ok_by_finish(mb.batch))
    ]


def single_time_s(batches: Sequence[MeasuredBatch], modal: int | None = None) -> float | None:
    """The N=1 reference: the median of every N=1 measurement, robust to one slow or fast one."""
    times = single_times_s(batches, modal)
    return median(times) if times else None


def batch_doubt(mb: MeasuredBatch, single_s: float | None, modal: int | None) -> Reason | None:
    """Why this batch's finish times cannot show the server's schedule, or None when they can.

    Unequal outputs smear a staircase into a cluster (a serial server finishing one long request
    and three short ones reads as four finishes together), and requests that did not leave
    together finish apart for the client's reasons, not the server's.
    """
    off = [r for r in _ok_by_finish(mb.batch) if off_length(r.tokens, modal)]
    if off:
        return Reason("staircase.lengths_differ", off=tuple((r.index, r.tokens) for r in off), modal=modal)
    skew_s = mb.batch.dispatch_skew_ns / NS_PER_S
    if skew_invalid(skew_s, single_s):
        return Reason("staircase.not_together", skew_s=skew_s, skew_frac=DISPATCH_SKEW_FRAC)
    return None


def stall_doubt(batch: BatchResult, single_s: float | None) -> Reason | None:
    """Why the client's own lateness leaves this batch's finish times unknown, or None.

    A late window matters when it is at least STALL_DOUBT_FRAC of the single time and a finish was
    read in it or as it drained: that finish may have happened anywhere inside it. The judge is
    `analysis.client_timing` over the driver's ticker; a batch recorded without one (a record made
    before it) is judged from the coarser stall list of its noise record."""
    if not single_s or single_s <= 0:
        return None
    min_ns = STALL_DOUBT_FRAC * single_s * NS_PER_S
    ends = sorted(r.end_ns for r in batch.records if r.ok and r.end_ns is not None)
    if batch.lateness is not None:
        read = len(late_reads(batch.lateness, ends, min_ns))
        if read:
            worst_s = longest_holding(batch.lateness, ends, min_ns) / NS_PER_S
            return Reason("staircase.client_late", worst_s=worst_s, doubt_frac=STALL_DOUBT_FRAC, read=read)
        return None
    if batch.noise is None:
        return None
    slack_ns = int(STALL_READ_FRAC * single_s * NS_PER_S)
    for a, b in batch.noise.stalls_over(int(min_ns)):
        read = sum(1 for e in ends if a <= e <= b + slack_ns)
        if read:
            return (
                Reason("staircase.client_stalled", stall_s=(b - a) / NS_PER_S, from_s=(a - batch.release_ns) / NS_PER_S,
                       to_s=(b - batch.release_ns) / NS_PER_S, doubt_frac=STALL_DOUBT_FRAC, read=read))
    return None
