"""Rules that judge several runs side by side (`servecheck diff`, the report's side-by-side page),
and the per-stream rate every reader of a saved request uses. Pure.

A line's trend is the run's own where it recorded one (staircase does); otherwise it is judged by
the one trend rule, `analysis.staircase.classify_trend`, never by a threshold of diff's own: a run
must read the same in `staircase` and in `diff`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from servecheck.analysis.staircase import classify_trend
from servecheck.model.bodies.common import Request

# Within 10% across levels the per-stream rate is "constant" (seed 000: ~95-98 on every line).
PER_STREAM_STEADY = 1.10


def stream_rate(tokens: float | None, decode_s: float | None) -> float | None:
    """The rate one user watches: tokens after the first over the time from the first token to the last."""
    if tokens is None or decode_s is None or tokens < 2 or decode_s <= 0:
        return None
    return (tokens - 1) / decode_s


def request_rate(req: Request) -> float | None:
    """A saved request's per-stream rate (its first token to its end), or None for a failed one."""
    if not req.ok or req.first_token_s is None or req.end_s is None:
        return None
    return stream_rate(req.tokens, req.end_s - req.first_token_s)


def per_stream_steady(rates: Iterable[float]) -> bool:
    """Whether a run's per-stream rate holds across its levels: the highest within PER_STREAM_STEADY
    of the lowest (`diff` then shows one figure, else the fall from the lowest level to the highest)."""
    values = list(rates)
    return bool(values) and max(values) <= min(values) * PER_STREAM_STEADY


def growth_ratio(aggregates: Mapping[int, float]) -> float | None:
    """agg(highest N) / agg(1), or None without both."""
    base = aggregates.get(1)
    if not base or len(aggregates) < 2:
        return None
    return aggregates[max(aggregates)] / base


def trend_of(ratio: float | None) -> str:
    """The one trend rule on a single agg(N)/agg(1)."""
    if ratio is None:
        return "inconclusive"
    return classify_trend({2: ratio})[0]


def trend_of_levels(aggregates: Mapping[int, float]) -> str:
    """The one trend rule on every level's agg(N)/agg(1)."""
    base = aggregates.get(1)
    if not base or len(aggregates) < 2:
        return "inconclusive"
    return classify_trend({n: a / base for n, a in aggregates.items() if n > 1})[0]


def verdict_across(trends: Sequence[tuple[str, str]]) -> str:
    """Which configurations batch, from each line's (label, trend)."""
    rising = [label for label, trend in trends if trend == "rising"]
    flat = [label for label, trend in trends if trend == "flat"]
    unknown = [label for label, trend in trends if trend not in ("rising", "flat")]
    tail = f"; inconclusive (no N=1 point or one level only): {', '.join(unknown)}" if unknown else ""
    if not rising and flat:
        return "no configuration batches: all lines flat" + tail if not unknown else "no configuration batches: every decided line is flat" + tail
    if not rising:
        return "no verdict: no line can be judged" + tail
    if not flat and not unknown:
        return "every configuration batches: all lines rise"
    subject = f"only {rising[0]} rises" if len(rising) == 1 else f"{', '.join(rising)} rise"
    return f"{subject}; flat: {', '.join(flat) or 'none'}" + tail
