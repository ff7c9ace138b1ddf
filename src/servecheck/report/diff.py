"""Several staircase or arms runs side by side, in the shape of seed 000 section 3: aggregate
throughput per concurrency level, one row per run, and which configuration's line rises; and
context runs side by side by depth: decode rate and ratio to the shallowest depth per run."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from servecheck.analysis.across import growth_ratio, per_stream_steady, request_rate, trend_of, trend_of_levels, verdict_across
from servecheck.analysis.staircase import RISING_RATIO
from servecheck.errors import UsageError
from servecheck.model.bodies.arms import ArmsBody
from servecheck.model.bodies.context import ContextBody
from servecheck.model.bodies.staircase import StaircaseBody
from servecheck.model.codec import JSON
from servecheck.model.result import RunResult

__all__ = ["RISING_RATIO", "growth_ratio", "trend_of", "trend_of_levels"]
DIFFABLE = ("staircase", "arms")
# Parameters that change from run to run without changing what is measured: a fresh prompt seed
# per run would otherwise be the "difference" named for every pair of runs.
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


def label_for(run: RunResult[Any], fallback: str) -> str:
    run_id = run.envelope.run_id
    return f"#{run_id}" if run_id is not None else fallback


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
    names = list(labels) if labels is not None else [label_for(r, f"run {i + 1}") for i, r in enumerate(runs)]
    configs = config_notes(runs)
    lines = tuple(line_of(run, name, config) for run, name, config in zip(runs, names, configs))
    levels = tuple(sorted({n for line in lines for n in line.aggregate_tok_s}))
    return Diff(lines=lines, levels=levels, verdict=verdict_across([(line.label, line.trend) for line in lines]))


def config_notes(runs: Sequence[RunResult[Any]]) -> list[str]:
    """Per run, the parameters and server facts whose values differ between the runs."""
    if len({run.command for run in runs}) > 1:
        return [run.command for run in runs]  # different experiments: their parameters do not compare
    facts = [_config_facts(run) for run in runs]
    keys = sorted({k for f in facts for k in f})
    varying = [k for k in keys if len({repr(f.get(k)) for f in facts}) > 1]
    return [", ".join(f"{k}={_short(f.get(k))}" for k in varying if k in f) or "—" for f in facts]


def _config_facts(run: RunResult[Any]) -> dict[str, JSON]:
    facts = {k: v for k, v in run.envelope.params.items() if k not in NOT_CONFIG and not isinstance(v, dict)}
    server = run.server
    if server is not None:
        for key, value in (("engine", server.engine), ("version", server.version)):
            if value is not None:
                facts[f"server {key}"] = value
    return facts


def _short(value: JSON) -> str:
    text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    return text if len(text) <= 40 else text[:39] + "…"


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
        per_user_by_level={level: statistics.median(v) for level, v in sorted(by_level.items()) if v},
        marks=marks_of(run),
    )


def marks_of(run: RunResult[Any]) -> tuple[str, ...]:
    flags = (("simulated", run.simulated), ("incomplete", not run.complete), ("invalid", run.valid is False))
    return tuple(name for name, on in flags if on)


def _staircase_aggregates(body: StaircaseBody) -> dict[int, float]:
    return {p.n: p.aggregate_tok_s for p in body.points if p.n is not None and p.aggregate_tok_s is not None}


def _arms_aggregates(body: ArmsBody) -> dict[int, float]:
    """Each arm's own median aggregate when given, else the median over its cells."""
    out = {a.concurrency: a.aggregate_tok_s for a in body.arms if a.concurrency is not None and a.aggregate_tok_s is not None}
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


def per_stream(line: Line) -> str:
    """`~98` when the per-stream rate holds across levels (seed 000's "~98 constant"), else `333→167`
    from the lowest to the highest level, so a falling per-user rate is never averaged away."""
    rates = line.per_user_by_level
    if not rates:
        return "—" if line.per_user_tok_s is None else f"~{line.per_user_tok_s:.0f}"
    if per_stream_steady(rates.values()):
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


def is_context_diff(runs: Sequence[RunResult[Any]]) -> bool:
    return bool(runs) and all(run.command == "context" for run in runs)


def diff_context_runs(runs: Sequence[RunResult[Any]], labels: Sequence[str] | None = None) -> ContextDiff:
    """Context runs side by side by depth. Raises UsageError for fewer than two or a run of another command."""
    if len(runs) < 2:
        raise UsageError("diff needs at least two runs", "give two or more run ids, e.g. servecheck diff 3 4")
    for run in runs:
        if run.command != "context":
            raise UsageError(f"{label_for(run, 'a run')} is a {run.command} run; context runs compare only with context runs",
                             "pick context runs from `servecheck history --command context`")
    names = list(labels) if labels is not None else [label_for(r, f"run {i + 1}") for i, r in enumerate(runs)]
    lines = tuple(context_line(run, name, config) for run, name, config in zip(runs, names, config_notes(runs)))
    depths = tuple(sorted({d for line in lines for d in line.decode_tok_s}))
    return ContextDiff(lines, depths)


def context_line(run: RunResult[Any], label: str, config: str = "—") -> ContextLine:
    body: ContextBody = run.body
    decode = {p.depth: p.decode_tok_s for p in body.points if p.depth is not None and p.decode_tok_s is not None}
    ratio = {p.depth: p.ratio for p in body.points if p.depth is not None and p.ratio is not None}
    predicted = {r.depth: r.predicted_tok_s for r in body.roofline or () if r.depth is not None and r.predicted_tok_s is not None}
    return ContextLine(label, config, run.url, run.model, decode, ratio, predicted, body.effect or "inconclusive", marks_of(run))


# ---------------------------------------------------------------- speculative runs, by N and prompt kind


@dataclass(frozen=True, slots=True)
class SpeculativeLine:
    """One speculative run: tokens per step and per-stream rate at each (N, prompt kind), as the run recorded them."""

    label: str
    config: str
    server_url: str | None
    model: str | None
    tokens_per_step: dict[tuple[int, str], float]
    per_stream_tok_s: dict[tuple[int, str], float]
    pays: dict[tuple[int, str], str]
    verdict: str  # the run's own
    marks: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SpeculativeDiff:
    lines: tuple[SpeculativeLine, ...]
    keys: tuple[tuple[int, str], ...]  # (N, prompt kind), in order


def is_speculative_diff(runs: Sequence[RunResult[Any]]) -> bool:
    return bool(runs) and all(run.command == "speculative" for run in runs)


def diff_speculative_runs(runs: Sequence[RunResult[Any]], labels: Sequence[str] | None = None) -> SpeculativeDiff:
    """Speculative runs side by side. Raises UsageError for fewer than two or a run of another command."""
    if len(runs) < 2:
        raise UsageError("diff needs at least two runs", "give two or more run ids, e.g. servecheck diff 3 4")
    for run in runs:
        if run.command != "speculative":
            raise UsageError(f"{label_for(run, 'a run')} is a {run.command} run; speculative runs compare only with "
                             "speculative runs", "pick speculative runs from `servecheck history --command speculative`")
    names = list(labels) if labels is not None else [label_for(r, f"run {i + 1}") for i, r in enumerate(runs)]
    lines = tuple(speculative_line(run, name, config) for run, name, config in zip(runs, names, config_notes(runs)))
    keys = sorted({k for line in lines for k in (*line.tokens_per_step, *line.per_stream_tok_s)}, key=lambda k: (k[1], k[0]))
    return SpeculativeDiff(lines, tuple(keys))


def speculative_line(run: RunResult[Any], label: str, config: str = "—") -> SpeculativeLine:
    points = [p for p in run.body.points if p.n is not None and p.prompt_kind]
    tps = {(p.n, p.prompt_kind): p.tokens_per_step for p in points if p.tokens_per_step is not None}
    rate = {(p.n, p.prompt_kind): p.per_stream_tok_s for p in points if p.per_stream_tok_s is not None}
    pays = {(p.n, p.prompt_kind): p.pays for p in points if p.pays}
    return SpeculativeLine(label, config, run.url, run.model, tps, rate, pays, run.body.verdict or "inconclusive", marks_of(run))


# ---------------------------------------------------------------- interference runs, by prompt size


@dataclass(frozen=True, slots=True)
class InterferenceLine:
    """One interference run: the victims' longest gap and the intruder's TTFT at each prompt size, as recorded."""

    label: str
    config: str
    server_url: str | None
    model: str | None
    max_gap_s: dict[int, float]
    ttft_s: dict[int, float]
    lost_s: dict[int, float]
    verdict: str  # the run's own
    chunk_tokens: float | None
    marks: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class InterferenceDiff:
    lines: tuple[InterferenceLine, ...]
    sizes: tuple[int, ...]


def is_interference_diff(runs: Sequence[RunResult[Any]]) -> bool:
    return bool(runs) and all(run.command == "interference" for run in runs)


def diff_interference_runs(runs: Sequence[RunResult[Any]], labels: Sequence[str] | None = None) -> InterferenceDiff:
    """Interference runs side by side by prompt size. Raises UsageError for fewer than two or another command."""
    if len(runs) < 2:
        raise UsageError("diff needs at least two runs", "give two or more run ids, e.g. servecheck diff 3 4")
    for run in runs:
        if run.command != "interference":
            raise UsageError(f"{label_for(run, 'a run')} is a {run.command} run; interference runs compare only with "
                             "interference runs", "pick interference runs from `servecheck history --command interference`")
    names = list(labels) if labels is not None else [label_for(r, f"run {i + 1}") for i, r in enumerate(runs)]
    lines = tuple(interference_line(run, name, config) for run, name, config in zip(runs, names, config_notes(runs)))
    return InterferenceDiff(lines, tuple(sorted({s for line in lines for s in (*line.max_gap_s, *line.ttft_s)})))


def interference_line(run: RunResult[Any], label: str, config: str = "—") -> InterferenceLine:
    points = [p for p in run.body.points if p.prompt_tokens is not None and p.valid]
    gap = {p.prompt_tokens: p.victim_max_gap_s for p in points if p.victim_max_gap_s is not None}
    ttft = {p.prompt_tokens: p.intruder_ttft_s for p in points if p.intruder_ttft_s is not None}
    lost = {p.prompt_tokens: p.victim_lost_s for p in points if p.victim_lost_s is not None}
    return InterferenceLine(label, config, run.url, run.model, gap, ttft, lost, run.body.verdict or "inconclusive",
                            run.body.chunk_tokens, marks_of(run))
