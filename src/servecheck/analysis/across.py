"""Rules that judge several runs side by side (`servecheck diff`, the report's side-by-side page),
and the per-stream rate every reader of a saved request uses. Pure.

A line's trend is the run's own where it recorded one (staircase does); otherwise it is judged by
the one trend rule, `analysis.staircase.classify_trend`, never by a threshold of diff's own: a run
must read the same in `staircase` and in `diff`.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from servecheck.analysis.staircase import classify_trend
from servecheck.errors import UsageError
from servecheck.model.bodies.arms import ArmsBody
from servecheck.model.bodies.common import Request
from servecheck.model.bodies.staircase import StaircaseBody
from servecheck.model.reason import Reason
from servecheck.model.result import RunResult
from servecheck.model.sidebyside import DIFFABLE, Diff, Line, config_notes, label_for, marks_of, numbered_label

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


BATCHED_VERDICTS = ("cluster", "partial")  # a staircase run's own words for requests served together


def verdict_across(trends: Sequence[tuple[str, str]], verdicts: Sequence[tuple[str, str | None]] = ()) -> Reason:
    """Which configurations batch, from each line's (label, trend), led by the staircase runs' own verdicts
    where the aggregates alone would tell another story: a run that read `cluster` batched whether or not
    its aggregate rose, and one that read `staircase` queued whatever its aggregate did."""
    said = tuple((label, v) for label, v in verdicts if v is not None)
    batched = [label for label, v in said if v in BATCHED_VERDICTS]
    trend_of = dict(trends)
    if any((v in BATCHED_VERDICTS) != (trend_of.get(label) == "rising") for label, v in said):
        aggregate = _by_trend(trends, batched)
        return Reason("across.own_verdicts", verdicts=said, aggregate=aggregate)
    return _by_trend(trends, batched)


def _by_trend(trends: Sequence[tuple[str, str]], batched: Sequence[str]) -> Reason:
    """The throughput sentence; "no configuration batches" only where no run's own verdict says it batched."""
    rising = tuple(label for label, trend in trends if trend == "rising")
    flat = tuple(label for label, trend in trends if trend == "flat")
    unknown = tuple(label for label, trend in trends if trend not in ("rising", "flat"))
    if not rising and flat:
        return Reason("across.none_rises", batched=bool(batched), unknown=unknown)
    if not rising:
        return Reason("across.none_judged", unknown=unknown)
    if not flat and not unknown:
        return Reason("across.all_rise")
    return Reason("across.some_rise", rising=rising, flat=flat, unknown=unknown)


# ---------------------------------------------------------------- staircase or arms runs, by level


def diff_runs(runs: Sequence[RunResult[Any]], labels: Sequence[str] | None = None) -> Diff:
    """Lay out the runs and say which lines rise. Raises UsageError for fewer than two or other commands."""
    if len(runs) < 2:
        raise UsageError("diff needs at least two runs", "give two or more run ids, e.g. servecheck diff 3 4 5")
    for run in runs:
        if run.command not in DIFFABLE:
            raise UsageError(
                f"{label_for(run, 'a run')} is a {run.command} run; diff compares staircase and arms runs "
                "(or context runs with each other)",
                "pick staircase or arms runs, or only context runs, from `servecheck history`",
            )
    names = list(labels) if labels is not None else [numbered_label(r, i + 1) for i, r in enumerate(runs)]
    configs = config_notes(runs)
    lines = tuple(line_of(run, name, config) for run, name, config in zip(runs, names, configs))
    levels = tuple(sorted({n for line in lines for n in line.aggregate_tok_s}))
    return Diff(lines=lines, levels=levels, verdict=verdict_across([(line.label, line.trend) for line in lines],
                                                                   [(line.label, line.verdict) for line in lines]))


def line_of(run: RunResult[Any], label: str, config: str = "—") -> Line:
    body = run.body
    staircase = isinstance(body, StaircaseBody)
    aggregates = _staircase_aggregates(body) if staircase else _arms_aggregates(body)
    own = body.trend if staircase else None
    if own in ("rising", "flat", "inconclusive"):
        trend, source = own, "run"
    else:
        trend, source = trend_of_levels(aggregates), "computed"
    by_level = _staircase_rates(body) if staircase else _arms_rates(body)
    per_level = {level: statistics.median(v) for level, v in sorted(by_level.items()) if v}
    return Line(
        label=label,
        config=config,
        command=run.command,
        server_url=run.url,
        model=run.model,
        aggregate_tok_s=aggregates,
        per_user_tok_s=_median([r for rates in by_level.values() for r in rates]),
        ratio=growth_ratio(aggregates),
        trend=trend,
        trend_from=source,
        per_user_by_level=per_level,
        steady_per_stream_tok_s=(statistics.median(per_level.values()) if per_stream_steady(per_level.values())
                                 else None),
        marks=marks_of(run),
        verdict=body.verdict if isinstance(body, StaircaseBody) else None,
    )


def _staircase_aggregates(body: StaircaseBody) -> dict[int, float]:
    return {p.n: p.aggregate_tok_s for p in body.points if p.n is not None and p.aggregate_tok_s is not None}


def _arms_aggregates(body: ArmsBody) -> dict[int, float]:
    """Each arm's own median aggregate when given, else the median over its cells."""
    out = {a.concurrency: a.aggregate_tok_s for a in body.arms
           if a.concurrency is not None and a.aggregate_tok_s is not None}
    cells: dict[int, list[float]] = {}
    for cell in body.cells:
        if cell.concurrency is not None and cell.aggregate_tok_s is not None and cell.concurrency not in out:
            cells.setdefault(cell.concurrency, []).append(cell.aggregate_tok_s)
    out.update({c: statistics.median(v) for c, v in cells.items()})
    return dict(sorted(out.items()))


def _staircase_rates(body: StaircaseBody) -> dict[int, list[float]]:
    """Per level, every request's per-stream rate: it falls with N on a batching server, so one
    median over all levels would describe none of them."""
    rates: dict[int, list[float]] = {}
    for point in body.points:
        found = [request_rate(r) for b in point.batches for r in b.requests]
        if point.n is not None:
            rates.setdefault(point.n, []).extend(r for r in found if r is not None)
    return rates


def _arms_rates(body: ArmsBody) -> dict[int, list[float]]:
    rates: dict[int, list[float]] = {}
    for cell in body.cells:
        if cell.concurrency is not None and cell.per_user_rate_tok_s is not None:
            rates.setdefault(cell.concurrency, []).append(cell.per_user_rate_tok_s)
    return rates


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None
