"""Several staircase or arms runs side by side, in the shape of seed 000 section 3 (the record
`analysis.across.diff_runs` builds, formatted here); and context, speculative and interference runs
side by side, as each run recorded them: context runs by depth, speculative runs by N and prompt kind,
interference runs by prompt size; check runs claim by claim."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from servecheck.errors import UsageError
from servecheck.model.bodies.context import ContextBody
from servecheck.model.result import RunResult
from servecheck.model.sidebyside import Line, config_notes, label_for, marks_of


def per_stream(line: Line) -> str:
    """`~98` when the per-stream rate holds across levels (seed 000's "~98 constant"), else `333→167`
    from the lowest to the highest level, so a falling per-user rate is never averaged away."""
    rates = line.per_user_by_level
    if not rates:
        return "—" if line.per_user_tok_s is None else f"~{line.per_user_tok_s:.0f}"
    if line.steady_per_stream_tok_s is not None:
        return f"~{line.steady_per_stream_tok_s:.0f}"
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
            raise UsageError(f"{label_for(run, 'a run')} is a {run.command} run; "
                             "context runs compare only with context runs",
                             "pick context runs from `servecheck history --command context`")
    names = list(labels) if labels is not None else [label_for(r, f"run {i + 1}") for i, r in enumerate(runs)]
    lines = tuple(context_line(run, name, config) for run, name, config in zip(runs, names, config_notes(runs)))
    depths = tuple(sorted({d for line in lines for d in line.decode_tok_s}))
    return ContextDiff(lines, depths)


def context_line(run: RunResult[Any], label: str, config: str = "—") -> ContextLine:
    body: ContextBody = run.body
    decode = {p.depth: p.decode_tok_s for p in body.points if p.depth is not None and p.decode_tok_s is not None}
    ratio = {p.depth: p.ratio for p in body.points if p.depth is not None and p.ratio is not None}
    predicted = {r.depth: r.predicted_tok_s for r in body.roofline or ()
                 if r.depth is not None and r.predicted_tok_s is not None}
    return ContextLine(label, config, run.url, run.model, decode, ratio, predicted, body.effect or "inconclusive",
                       marks_of(run))


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
                             "speculative runs",
                             "pick speculative runs from `servecheck history --command speculative`")
    names = list(labels) if labels is not None else [label_for(r, f"run {i + 1}") for i, r in enumerate(runs)]
    lines = tuple(speculative_line(run, name, config) for run, name, config in zip(runs, names, config_notes(runs)))
    keys = sorted({k for line in lines for k in (*line.tokens_per_step, *line.per_stream_tok_s)},
                  key=lambda k: (k[1], k[0]))
    return SpeculativeDiff(lines, tuple(keys))


def speculative_line(run: RunResult[Any], label: str, config: str = "—") -> SpeculativeLine:
    points = [p for p in run.body.points if p.n is not None and p.prompt_kind]
    tps = {(p.n, p.prompt_kind): p.tokens_per_step for p in points if p.tokens_per_step is not None}
    rate = {(p.n, p.prompt_kind): p.per_stream_tok_s for p in points if p.per_stream_tok_s is not None}
    pays = {(p.n, p.prompt_kind): p.pays for p in points if p.pays}
    return SpeculativeLine(label, config, run.url, run.model, tps, rate, pays, run.body.verdict or "inconclusive",
                           marks_of(run))


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
                             "interference runs",
                             "pick interference runs from `servecheck history --command interference`")
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


# ---------------------------------------------------------------- check runs, claim by claim


@dataclass(frozen=True, slots=True)
class CheckLine:
    """One check: each card's verdict and figure, and each request field's verdict, as the run recorded them."""

    label: str
    config: str
    server_url: str | None
    model: str | None
    verdicts: dict[str, str]  # claim -> verdict; request fields as `request_params.FIELD`
    figures: dict[str, str]
    marks: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CheckDiff:
    lines: tuple[CheckLine, ...]
    claims: tuple[str, ...]  # the cards in the order the check asks them, each card's fields after it

    def changed(self, claim: str) -> bool:
        """The runs say different verdicts for this claim (a run without the card counts as saying nothing)."""
        return len({line.verdicts.get(claim) for line in self.lines}) > 1


def is_check_diff(runs: Sequence[RunResult[Any]]) -> bool:
    return bool(runs) and all(run.command == "check" for run in runs)


def diff_check_runs(runs: Sequence[RunResult[Any]], labels: Sequence[str] | None = None) -> CheckDiff:
    """Checks side by side, claim by claim (two versions of a server, two configurations). Raises UsageError
    for fewer than two or a run of another command."""
    if len(runs) < 2:
        raise UsageError("diff needs at least two runs", "give two or more run ids, e.g. servecheck diff 3 4")
    for run in runs:
        if run.command != "check":
            raise UsageError(f"{label_for(run, 'a run')} is a {run.command} run; checks compare only with checks",
                             "pick checks from `servecheck history --command check`")
    names = list(labels) if labels is not None else [label_for(r, f"run {i + 1}") for i, r in enumerate(runs)]
    lines = tuple(check_line(run, name, config) for run, name, config in zip(runs, names, config_notes(runs)))
    claims = list(dict.fromkeys(c for line in lines for c in line.verdicts))
    return CheckDiff(lines, tuple(claims))


def check_line(run: RunResult[Any], label: str, config: str = "—") -> CheckLine:
    verdicts: dict[str, str] = {}
    figures: dict[str, str] = {}
    for card in run.body.cards:
        if card.claim is None:
            continue
        verdicts[card.claim] = card.verdict or "—"
        figures[card.claim] = card.figure or card.reason or ""
        for probe in card.params or ():
            key = f"{card.claim}.{probe.name}"
            verdicts[key] = probe.verdict or "—"
            figures[key] = probe.figure or probe.reason or ""
    return CheckLine(label, config, run.url, run.model, verdicts, figures, marks_of(run))
