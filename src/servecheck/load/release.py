"""A batch released from a start barrier: every lane's warmed connection sends its first request at
one instant, at most one request in flight per lane, the rest of the batch sent as lanes free up.

Honest concurrency: each batch opens fresh connections (one per lane, warmed with a cheap
GET) before the barrier, releases them together, never retries, and measures dispatch skew.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

import aiohttp

from servecheck.wire.base import RunClock
from servecheck.wire.dialects import Dialect
from servecheck.load.witness import GaugeSampler, NoiseMeter
from servecheck.model.records import GenRequest, RequestRecord

# Awaited before a batch's barrier opens; returns the run-clock ns at which to open it.
ReleaseAt = Callable[[], Awaitable[int]]
SPIN_NS = 2_000_000  # the last stretch before a timed release is spun, not slept: a timer wakes late
# How a lane sends: its first request on its warmed connection (stamping the send into `first_sends`),
# each later one on a fresh connection (`LoadDriver._send` and `_send_fresh`).
Send = Callable[[aiohttp.ClientSession, Dialect, GenRequest, list[int] | None, float], Awaitable[RequestRecord]]
SendFresh = Callable[[Dialect, GenRequest, float], Awaitable[RequestRecord]]


async def sleep_until(clock: RunClock, at_ns: int) -> None:
    """Return at run-clock `at_ns` (or at once if it has passed): sleep most of the way, then spin."""
    ahead_ns = at_ns - clock.now_ns()
    if ahead_ns > SPIN_NS:
        await asyncio.sleep((ahead_ns - SPIN_NS) / 1e9)
    while clock.now_ns() < at_ns:
        pass


async def release(
    clock: RunClock,
    send: Send,
    send_fresh: SendFresh,
    sessions: list[aiohttp.ClientSession],
    dialect: Dialect,
    reqs: Sequence[GenRequest],
    queue_wait_s: float,
    sampler: GaugeSampler | None = None,
    noise: NoiseMeter | None = None,
    release_at: ReleaseAt | None = None,
) -> tuple[int, list[RequestRecord], list[int]]:
    """Open the gate of every warmed lane in `sessions` together (at once, or at the run-clock instant
    `release_at` names) and send `reqs` through them: (release_ns, records, each lane's first send stamp)."""
    gate = asyncio.Event()
    queue = deque(reqs)
    records: list[RequestRecord] = []
    first_sends: list[int] = []

    async def lane(session: aiohttp.ClientSession) -> None:
        await gate.wait()
        if queue:  # only a lane's first request is released together, on its warmed connection
            records.append(await send(session, dialect, queue.popleft(), first_sends, queue_wait_s))
        while queue:
            records.append(await send_fresh(dialect, queue.popleft(), queue_wait_s))

    tasks = [asyncio.create_task(lane(s)) for s in sessions]
    await asyncio.sleep(0)  # every lane reaches the gate before it opens
    if release_at is None:
        release_ns = clock.now_ns()
    else:
        release_ns = await release_at()
        await sleep_until(clock, release_ns)
    gate.set()
    # The witnesses start after the gate, so they never delay a lane's first send.
    for witness in (sampler, noise):
        if witness is not None:
            witness.start()
    await asyncio.gather(*tasks)
    return release_ns, records, first_sends
