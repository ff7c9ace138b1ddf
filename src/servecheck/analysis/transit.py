"""Whether a stream's arrival times are the server's or a hop's, pure: the other way a moment lies.

A hop that buffers the stream on its way (a reverse proxy, an API gateway, a load balancer) holds
events and releases them in bursts. The client reads them on time, so its own lateness meter sees
nothing, yet every stamp inside a burst is the hop's release, late by up to the hold. This module
tells such bursts from a server's own (a speculative step writes several tokens at once) and says how
long a hop may have held a stream's events; every command that times stamps asks it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from servecheck.model.reason import Reason

# No gap above this joins two events into one burst: a loopback write takes microseconds, and no engine
# completes a forward pass and its HTTP write in a tenth of a millisecond.
BURST_NS = 100_000
# Fewer bursts than this tell nothing of a stream's rhythm (and, to `speculative`, too few steps: two
# client stalls in a stream of single-token steps are a jump too).
MIN_STEPS = 8
# A hop that buffers the stream (a proxy, a gateway) releases tokens in bursts whose size follows the
# time since the last burst: k tokens after k of the server's steps. A speculative step's size follows
# its acceptance, not its length (the verify step takes about the same time whatever is accepted). So
# where the bursts' lengths vary (COALESCE_MIN_CV) and their sizes track them (COALESCE_MIN_R, and
# COALESCE_FIT of them within one token of the length over the stream's time per token), the groups
# are bursts made in transit, not steps, and never read as speculation.
COALESCE_MIN_CV = 0.15
COALESCE_MIN_R = 0.7
COALESCE_FIT = 0.8
# "Within" a burst's predicted size: one token, or this share of it where bursts are several steps of a
# speculating server (sizes come in multiples of its step, 3 tokens a step read through a 35-105 ms hop
# are bursts of 6-15: each within half a step of the length's share, a third of the size or less).
COALESCE_FIT_SHARE = 0.35
# Below this mean size there is nothing to mistake for speculation.
COALESCE_MIN_MEAN = 1.15


def in_transit(groups: Sequence[tuple[int, int | None, int]]) -> tuple[str, Reason] | None:
    """Why these groups are (or may be) bursts made in transit (see COALESCE_*), a code and words; or None."""
    pairs = [(size, gap) for size, gap, _ in groups if gap is not None]
    if len(pairs) < MIN_STEPS:
        if sum(k for k, _ in pairs) > COALESCE_MIN_MEAN * len(pairs):
            return "too_few_groups", (
                Reason("run.too_few_groups", groups=len(pairs), tokens=sum(k for k, _ in pairs), needed=MIN_STEPS))
        return None
    sizes = [float(k) for k, _ in pairs]
    lengths = [float(g) for _, g in pairs]
    if sum(sizes) / len(sizes) < COALESCE_MIN_MEAN:
        return None
    per_token = sum(lengths) / sum(sizes)
    predicted = [g / per_token for g in lengths]
    mean_len = sum(lengths) / len(lengths)
    cv = math.sqrt(sum((g - mean_len) ** 2 for g in lengths) / (len(lengths) - 1)) / mean_len
    r = _pearson(sizes, predicted)
    fit = sum(abs(k - p) <= max(1.0, COALESCE_FIT_SHARE * p) for k, p in zip(sizes, predicted)) / len(sizes)
    if cv < COALESCE_MIN_CV or r is None or r < COALESCE_MIN_R or fit < COALESCE_FIT:
        return None
    return "coalesced", Reason("run.coalesced", r=r, fit=fit, per_token_ms=per_token / 1e6)


def _pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx <= 0 or syy <= 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / math.sqrt(sxx * syy)


def bursts(arrivals_ns: Sequence[int]) -> list[tuple[int, int | None, int]]:
    """The stream's events joined where less than BURST_NS apart: (size, the gap before it, its first
    event's index) per burst; the first burst has no gap before it."""
    out: list[tuple[int, int | None, int]] = []
    for i, t in enumerate(arrivals_ns):
        gap = t - arrivals_ns[i - 1] if i else None
        if gap is not None and gap < BURST_NS:
            size, before, first = out[-1]
            out[-1] = (size + 1, before, first)
        else:
            out.append((1, gap, i))
    return out


def hop_hold_ns(arrivals_ns: Sequence[int]) -> int:
    """How long a hop that buffers the stream may have held one of its events: the longest gap between
    bursts where the bursts are coalesced in transit, or too few to tell them from a server's own
    (`in_transit`), else 0. The first event (the prompt's own step) is left out: its gap is the prefill."""
    found = bursts(arrivals_ns[1:])
    if len(found) < 2 or in_transit(found[1:]) is None:
        return 0
    return max(g for _, g, _ in found if g is not None)
