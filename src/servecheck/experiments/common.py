"""What the experiments share: how long a request queued at the server may wait for its first token."""

from __future__ import annotations

from servecheck.model.records import NS_PER_S, RequestRecord

# Queued requests wait for the ones ahead; each of those may take longer than the warm-up did
# (a loaded machine, a queue hand-over), so the allowance counts each one and a half times.
QUEUE_WAIT_MARGIN = 1.5


def queue_wait_s(warmup: RequestRecord | None, n: int) -> float:
    """How long the last of `n` requests in flight may wait in a server queue before its first
    token: the n - 1 ahead of it, each about one warm-up request long, with QUEUE_WAIT_MARGIN for a
    slow step. Without it a serial server slower than --timeout / (n - 1) per request fails the
    requests whose queueing the test exists to show."""
    if warmup is None or warmup.latency_ns is None:
        return 0.0
    return (n - 1) * QUEUE_WAIT_MARGIN * warmup.latency_ns / NS_PER_S
