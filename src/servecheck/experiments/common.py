"""What the experiments share: how they get their requests, and how long a request queued at the
server may wait for its first token."""

from __future__ import annotations

import inspect
import random
from collections.abc import Awaitable, Callable, Sequence

from servecheck.load.prompts import make_requests
from servecheck.load.protocol import Driver
from servecheck.model.records import NS_PER_S, GenRequest, RequestRecord

# How an experiment gets its requests: `load.prompts.make_requests` (driver, n, prompt_tokens,
# max_tokens, rng[, start_index]) or a test's own, which may return them or an awaitable of them.
RequestFactory = Callable[..., Awaitable[Sequence[GenRequest]] | Sequence[GenRequest]]

# Queued requests wait for the ones ahead; each of those may take longer than the warm-up did
# (a loaded machine, a queue hand-over), so the allowance counts each one and a half times.
QUEUE_WAIT_MARGIN = 1.5


async def make(
    factory: RequestFactory | None, driver: Driver, n: int, prompt_tokens: int, tokens: int, rng: random.Random,
    start_index: int | None = None,
) -> list[GenRequest]:
    """`n` requests from `factory` (default `make_requests`: equal length, each with its own nonce);
    `start_index` numbers them on from earlier ones, for an experiment that sends many rounds."""
    numbered = () if start_index is None else (start_index,)
    reqs = (factory or make_requests)(driver, n, prompt_tokens, tokens, rng, *numbered)
    if inspect.isawaitable(reqs):
        reqs = await reqs
    return list(reqs)


def queue_wait_s(warmup: RequestRecord | None, n: int) -> float:
    """How long the last of `n` requests in flight may wait in a server queue before its first
    token: the n - 1 ahead of it, each about one warm-up request long, with QUEUE_WAIT_MARGIN for a
    slow step. Without it a serial server slower than --timeout / (n - 1) per request fails the
    requests whose queueing the test exists to show."""
    if warmup is None or warmup.latency_ns is None:
        return 0.0
    return (n - 1) * QUEUE_WAIT_MARGIN * warmup.latency_ns / NS_PER_S
