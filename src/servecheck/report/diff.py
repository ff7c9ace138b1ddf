"""Several staircase or arms runs side by side, in the shape of seed 000 section 3: aggregate
throughput per concurrency level, one row per run, and which configuration's line rises; and
context runs side by side by depth: decode rate and ratio to the shallowest depth per run."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from servecheck.analysis.staircase import RISING_RATIO, classify_trend
from servecheck.errors import UsageError
from servecheck.results import fields
from servecheck.results.fields import as_dict, as_float, as_int, as_list, as_str

# A line's trend is the run's own (staircase records it); for a document that does not (arms, or
# a hand-made table) it is judged by the one trend rule, `analysis.staircase.classify_trend`,
# never by a threshold of diff's own: a run must read the same in `staircase` and in `diff`.
__all__ = ["RISING_RATIO"]
DIFFABLE = ("staircase", "arms")
# Parameters that change from run to run without changing what is measured: a fresh prompt seed
# per run would otherwise be the "difference" named for every pair of runs.
# Within 10% across levels the per-stream rate is "constant" (seed 000: ~95-98 on every line).
PER_STREAM_STEADY = 1.10
NOT_CONFIG = frozenset({"url", "model", "seed", "expect"})


@dataclass(frozen=True, slots=True)
class Line:
    """One run's row: aggregate tok/s per concurrency level and its trend."""

    label: str
    config: str  # what sets this run apart from the others (parameters, engine version)
    command: str
    server_url: str | None
    model: str | None
    aggregate_tok_s: dict[int, float]
    per_user_tok_s: float | None
    ratio: float | None  # agg(highest N) / agg(1)
    trend: str  # rising | flat | inconclusive
    trend_from: str  # "run" (the run's own verdict) or "computed" (the same rule, on its aggregates)
    per_user_by_level: dict[int, float] = field(default_factory=dict)  # median per-stream tok/s at each level
    marks: tuple[str, ...] = ()  # simulated, incomplete, invalid: a line must never pass for a clean real run


@dataclass(frozen=True, slots=True)
class Diff:
    lines: tuple[Line, ...]
    levels: tuple[int, ...]
    verdict: str

    @property
    def rising(self) -> tuple[Line, ...]:
        return tuple(line for line in self.lines if line.trend == "rising")


def label_for(doc: dict[str, Any], fallback: str) -> str:
    run_id = as_int(doc.get("run_id"))
    return f"#{run_id}" if run_id is not None else fallback


def diff_runs(docs: Sequence[dict[str, Any]], labels: Sequence[str] | None = None) -> Diff:
    """Lay out the runs and say which lines rise. Raises UsageError for fewer than two or other commands."""
    if len(docs) < 2:
        raise UsageError("diff needs at least two runs", "give two or more run ids, e.g. servecheck diff 3 4 5")
    for doc in docs:
        if fields.command(doc) not in DIFFABLE:
            raise UsageError(
                f"{label_for(doc, 'a run')} is a {fields.command(doc)} run; diff compares staircase and arms runs "
                "(or context runs with each other)",
                "pick staircase or arms runs, or only context runs, from `servecheck history`",
            )
    names = list(labels) if labels is not None else [label_for(d, f"run {i + 1}") for i, d in enumerate(docs)]
    configs = config_notes(docs)
    lines = tuple(line_of(doc, name, config) for doc, name, config in zip(docs, names, configs))
    levels = tuple(sorted({n for line in lines for n in line.aggregate_tok_s}))
    return Diff(lines=lines, levels=levels, verdict=verdict_across(lines))


def config_notes(docs: Sequence[dict[str, Any]]) -> list[str]:
    """Per run, the parameters and server facts whose values differ between the runs."""
    if len({fields.command(doc) for doc in docs}) > 1:
        return [fields.command(doc) for doc in docs]  # different experiments: their parameters do not compare
    facts = [_config_facts(doc) for doc in docs]
    keys = sorted({k for f in facts for k in f})
    varying = [k for k in keys if len({repr(f.get(k)) for f in facts}) > 1]
    return [", ".join(f"{k}={_short(f.get(k))}" for k in varying if k in f) or "—" for f in facts]


def _config_facts(doc: dict[str, Any]) -> dict[str, Any]:
    server = as_dict(doc.get("server"))
    params = as_dict(doc.get("params")).items()
    facts: dict[str, Any] = {k: v for k, v in params if k not in NOT_CONFIG and not isinstance(v, dict)}
    for key in ("engine", "version"):
        if server.get(key) is not None:
            facts[f"server {key}"] = server[key]
    return facts


def _short(value: Any) -> str:
    text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    return text if len(text) <= 40 else text[:39] + "…"


def line_of(doc: dict[str, Any], label: str, config: str = "—") -> Line:
    aggregates = _staircase_aggregates(doc) if fields.command(doc) == "staircase" else _arms_aggregates(doc)
    ratio = growth_ratio(aggregates)
    own = as_str(doc.get("trend"))
    if own in ("rising", "flat", "inconclusive"):
        trend, source = own, "run"
    else:
        trend, source = trend_of_levels(aggregates), "computed"
    return Line(
        label=label,
        config=config,
        command=fields.command(doc),
        server_url=fields.server_url(doc),
        model=fields.model_name(doc),
        aggregate_tok_s=aggregates,
        per_user_tok_s=_per_user(doc),
        ratio=ratio,
        trend=trend,
        trend_from=source,
        per_user_by_level=_per_user_by_level(doc),
        marks=marks_of(doc),
    )


def marks_of(doc: dict[str, Any]) -> tuple[str, ...]:
    flags = (("simulated", fields.is_simulated(doc)), ("incomplete", not fields.is_complete(doc)),
             ("invalid", doc.get("valid") is False))
    return tuple(name for name, on in flags if on)


def growth_ratio(aggregates: dict[int, float]) -> float | None:
    base = aggregates.get(1)
    if not base or len(aggregates) < 2:
        return None
    return aggregates[max(aggregates)] / base


def trend_of(ratio: float | None) -> str:
    """The one trend rule on a single agg(N)/agg(1)."""
    if ratio is None:
        return "inconclusive"
    return classify_trend({2: ratio})[0]


def trend_of_levels(aggregates: dict[int, float]) -> str:
    """The one trend rule on every level's agg(N)/agg(1)."""
    base = aggregates.get(1)
    if not base or len(aggregates) < 2:
        return "inconclusive"
    return classify_trend({n: a / base for n, a in aggregates.items() if n > 1})[0]


def _staircase_aggregates(doc: dict[str, Any]) -> dict[int, float]:
    out: dict[int, float] = {}
    for point in map(as_dict, as_list(doc.get("points"))):
        n, agg = as_int(point.get("n")), as_float(point.get("aggregate_tok_s"))
        if n is not None and agg is not None:
            out[n] = agg
    return out


def _arms_aggregates(doc: dict[str, Any]) -> dict[int, float]:
    """Each arm's own median aggregate when given, else the median over its cells."""
    out: dict[int, float] = {}
    for arm in map(as_dict, as_list(doc.get("arms"))):
        c, agg = as_int(arm.get("concurrency")), as_float(arm.get("aggregate_tok_s"))
        if c is not None and agg is not None:
            out[c] = agg
    cells: dict[int, list[float]] = {}
    for cell in map(as_dict, as_list(doc.get("cells"))):
        c, agg = as_int(cell.get("concurrency")), as_float(cell.get("aggregate_tok_s"))
        if c is not None and agg is not None and c not in out:
            cells.setdefault(c, []).append(agg)
    out.update({c: statistics.median(v) for c, v in cells.items()})
    return dict(sorted(out.items()))


def _per_user(doc: dict[str, Any]) -> float | None:
    """Median per-stream generation rate: tokens after the first over the decode time, per request."""
    rates = [as_float(as_dict(c).get("per_user_rate_tok_s")) for c in as_list(doc.get("cells"))]
    for point in map(as_dict, as_list(doc.get("points"))):
        rates.append(as_float(point.get("per_user_rate_tok_s")))
        for batch in map(as_dict, as_list(point.get("batches"))):
            rates += [fields.request_rate(as_dict(r)) for r in as_list(batch.get("requests"))]
    found = [r for r in rates if r is not None]
    return statistics.median(found) if found else None


def _per_user_by_level(doc: dict[str, Any]) -> dict[int, float]:
    """Median per-stream rate at each concurrency level: it falls with N on a batching server, so one
    median over all levels would describe none of them."""
    rates: dict[int, list[float]] = {}
    for cell in map(as_dict, as_list(doc.get("cells"))):
        c, rate = as_int(cell.get("concurrency")), as_float(cell.get("per_user_rate_tok_s"))
        if c is not None and rate is not None:
            rates.setdefault(c, []).append(rate)
    for point in map(as_dict, as_list(doc.get("points"))):
        n = as_int(point.get("n"))
        if n is None:
            continue
        for batch in map(as_dict, as_list(point.get("batches"))):
            found = (fields.request_rate(as_dict(r)) for r in as_list(batch.get("requests")))
            rates.setdefault(n, []).extend(r for r in found if r is not None)
    return {level: statistics.median(v) for level, v in sorted(rates.items()) if v}


def verdict_across(lines: Sequence[Line]) -> str:
    rising = [line.label for line in lines if line.trend == "rising"]
    flat = [line.label for line in lines if line.trend == "flat"]
    unknown = [line.label for line in lines if line.trend not in ("rising", "flat")]
    tail = f"; inconclusive (no N=1 point or one level only): {', '.join(unknown)}" if unknown else ""
    if not rising and flat:
        return "no configuration batches: all lines flat" + tail if not unknown else "no configuration batches: every decided line is flat" + tail
    if not rising:
        return "no verdict: no line can be judged" + tail
    if not flat and not unknown:
        return "every configuration batches: all lines rise"
    subject = f"only {rising[0]} rises" if len(rising) == 1 else f"{', '.join(rising)} rise"
    return f"{subject}; flat: {', '.join(flat) or 'none'}" + tail


def per_stream(line: Line) -> str:
    """`~98` when the per-stream rate holds across levels (seed 000's "~98 constant"), else `333→167`
    from the lowest to the highest level, so a falling per-user rate is never averaged away."""
    rates = line.per_user_by_level
    if not rates:
        return "—" if line.per_user_tok_s is None else f"~{line.per_user_tok_s:.0f}"
    low, high = min(rates.values()), max(rates.values())
    if high <= low * PER_STREAM_STEADY:
        return f"~{statistics.median(rates.values()):.0f}"
    return f"{rates[min(rates)]:.0f}→{rates[max(rates)]:.0f}"


# ---------------------------------------------------------------- context runs, by depth


@dataclass(frozen=True, slots=True)
class ContextLine:
    """One context run: its decode rate and drift-corrected ratio at each depth, as the run recorded them."""

    label: str
    config: str
    server_url: str | None
    model: str | None
    decode_tok_s: dict[int, float]
    ratio: dict[int, float]
    predicted_tok_s: dict[int, float]
    effect: str  # the run's own verdict: falls | flat | rises | inconclusive
    marks: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ContextDiff:
    lines: tuple[ContextLine, ...]
    depths: tuple[int, ...]

    def change(self, depth: int) -> float | None:
        """With two runs: the second's decode rate over the first's at this depth."""
        if len(self.lines) != 2:
            return None
        a, b = (line.decode_tok_s.get(depth) for line in self.lines)
        return None if not a or b is None else b / a


def is_context_diff(docs: Sequence[dict[str, Any]]) -> bool:
    return bool(docs) and all(fields.command(doc) == "context" for doc in docs)


def diff_context_runs(docs: Sequence[dict[str, Any]], labels: Sequence[str] | None = None) -> ContextDiff:
    """Context runs side by side by depth. Raises UsageError for fewer than two or a run of another command."""
    if len(docs) < 2:
        raise UsageError("diff needs at least two runs", "give two or more run ids, e.g. servecheck diff 3 4")
    for doc in docs:
        if fields.command(doc) != "context":
            raise UsageError(f"{label_for(doc, 'a run')} is a {fields.command(doc)} run; context runs compare only with context runs",
                             "pick context runs from `servecheck history --command context`")
    names = list(labels) if labels is not None else [label_for(d, f"run {i + 1}") for i, d in enumerate(docs)]
    lines = tuple(context_line(doc, name, config) for doc, name, config in zip(docs, names, config_notes(docs)))
    depths = tuple(sorted({d for line in lines for d in line.decode_tok_s}))
    return ContextDiff(lines, depths)


def context_line(doc: dict[str, Any], label: str, config: str = "—") -> ContextLine:
    decode: dict[int, float] = {}
    ratio: dict[int, float] = {}
    for point in map(as_dict, as_list(doc.get("points"))):
        depth = as_int(point.get("depth"))
        if depth is None:
            continue
        if (rate := as_float(point.get("decode_tok_s"))) is not None:
            decode[depth] = rate
        if (r := as_float(point.get("ratio"))) is not None:
            ratio[depth] = r
    predicted = {d: v for row in map(as_dict, as_list(doc.get("roofline")))
                 if (d := as_int(row.get("depth"))) is not None and (v := as_float(row.get("predicted_tok_s"))) is not None}
    return ContextLine(label, config, fields.server_url(doc), fields.model_name(doc), decode, ratio, predicted,
                       as_str(doc.get("effect")) or "inconclusive", marks_of(doc))
