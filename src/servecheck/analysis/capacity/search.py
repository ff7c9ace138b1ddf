"""The search, pure: which N to probe next (doubling while every N passes, then bisection)."""

from __future__ import annotations

from collections.abc import Mapping

from servecheck.model.bodies.capacity import Status


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
