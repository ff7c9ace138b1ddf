"""Runs side by side (`servecheck diff`, the report's side-by-side page): the record of staircase or
arms runs laid out by concurrency level, and what every side-by-side reads off a run to name it
(its label, what sets it apart, its marks). The judging is `analysis.across.diff_runs`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from servecheck.model.codec import JSON
from servecheck.model.reason import Reason
from servecheck.model.result import RunResult

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
    # the median of those when they hold across levels (`analysis.across.per_stream_steady`), else None
    steady_per_stream_tok_s: float | None = None
    marks: tuple[str, ...] = ()  # simulated, incomplete, invalid: a line must never pass for a clean real run
    verdict: str | None = None  # a staircase run's own verdict (staircase, cluster, partial, ...); None for arms


@dataclass(frozen=True, slots=True)
class Diff:
    lines: tuple[Line, ...]
    levels: tuple[int, ...]
    verdict: Reason  # which configurations batch (`analysis.across.verdict_across`)

    @property
    def rising(self) -> tuple[Line, ...]:
        return tuple(line for line in self.lines if line.trend == "rising")


def label_for(run: RunResult[Any], fallback: str) -> str:
    run_id = run.envelope.run_id
    return f"#{run_id}" if run_id is not None else fallback


def numbered_label(run: RunResult[Any], number: int) -> str:
    """The run's label among others: its id, else its place among them ("run 2", counted from 1)."""
    return label_for(run, f"run {number}")


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


def marks_of(run: RunResult[Any]) -> tuple[str, ...]:
    flags = (("simulated", run.simulated), ("incomplete", not run.complete), ("invalid", run.valid is False))
    return tuple(name for name, on in flags if on)
