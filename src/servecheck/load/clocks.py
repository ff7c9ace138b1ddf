"""A remote client's clock against ours, from round trips: the bounds a stopwatch can defend.

A Ray actor on another node reads its own CLOCK_MONOTONIC, which has nothing to do with ours. One
round trip brackets it: we read t0, the actor reads r, we read t1, so r was read somewhere in
[t0, t1] of our time and the offset (r - our time at that instant) lies in [r - t1, r - t0]. Every
round trip gives such an interval and the truth lies in all of them, so it lies in their
intersection, whose width the fastest round trips set (the minimum-RTT samples are the ones that
count; a slow one only adds an interval that already contains the fast ones' intersection). The
estimate is the intersection's middle and its uncertainty half its width. Clocks that drift apart
during the samples can leave the intersection empty; then the fastest sample alone is used, with
half its RTT as the uncertainty, and the drift is one more reason the offset is re-estimated before
every batch.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from time import perf_counter_ns

from servecheck.model.client import ClockOffset

SAMPLES = 24  # round trips per estimate: a few ms over Ray on one node, tens on a LAN


def offset_from(samples: Sequence[tuple[int, int, int]], worker: int = 0, node: str = "") -> ClockOffset:
    """The offset bounded by (t0, remote, t1) round trips: ours before, theirs, ours after."""
    if not samples:
        raise ValueError("no round trips to bound a clock offset with")
    lo = max(r - t1 for t0, r, t1 in samples)
    hi = min(r - t0 for t0, r, t1 in samples)
    fastest = min(samples, key=lambda s: s[2] - s[0])
    rtt_min = fastest[2] - fastest[0]
    if lo > hi:  # the intervals do not meet: the clocks moved against each other while sampled
        t0, r, t1 = fastest
        offset, half = r - (t0 + t1) // 2, (rtt_min + 1) // 2
    else:
        offset, half = (lo + hi) // 2, (hi - lo + 1) // 2
    return ClockOffset(worker=worker, node=node, offset_ns=offset, uncertainty_ns=half, rtt_min_ns=rtt_min,
                       samples=len(samples))


async def estimate_offset(read_remote: Callable[[], Awaitable[int]], *, worker: int = 0, node: str = "",
                          samples: int = SAMPLES, clock: Callable[[], int] = perf_counter_ns) -> ClockOffset:
    """`samples` round trips to `read_remote` (the remote clock, in ns), one after another."""
    taken = []
    for _ in range(samples):
        t0 = clock()
        remote = await read_remote()
        taken.append((t0, int(remote), clock()))
    return offset_from(taken, worker, node)
