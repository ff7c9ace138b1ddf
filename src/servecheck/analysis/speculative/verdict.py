"""Whether speculation is on, pure: the mean tokens per step over a point's steps with its interval, the
point's verdict from that interval, and the run's across its prompt kinds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servecheck.analysis.speculative.grouping import Grouping
from servecheck.analysis.stats import mean_interval, normal_95
from servecheck.analysis.transit import MIN_STEPS
from servecheck.model.bodies.speculative import SpecVerdict
from servecheck.model.reason import Reason, Text


# The mean tokens per step over every step of a point (every stream and rep at one N and kind) has a
# two-sided 95% normal interval (`stats.mean_interval` with `normal_95`): a point pools many steps.
# Tokens per step clearly above 1: the interval's lower end at least 1.15. The smallest speculation
# worth a flag (a draft accepted one step in six) clears it; grouping errors on a single-token stream
# (a slow write split off, a stall that bunched steps) stay below a few percent.
SPECULATING_LO = 1.15
# Clearly 1 per step: the interval's upper end at most 1.1.
NOT_SPECULATING_HI = 1.1


@dataclass(frozen=True, slots=True)
class Estimate:
    """Mean tokens per step over a point's steps, its interval, the verdict and why."""

    tokens_per_step: float | None
    interval: tuple[float, float] | None
    steps: int
    streams: int
    grouped: int  # streams that could be grouped
    verdict: SpecVerdict
    reason: Reason
    problems: tuple[Text, ...] = ()  # why a stream could not be grouped (Grouping.problem), each once


def estimate(groupings: Sequence[Grouping]) -> Estimate:
    """Pool the steps of every grouped stream: mean, a normal 95% interval, and the verdict."""
    ok = [g for g in groupings if g.ok]
    problems = tuple(dict.fromkeys(g.problem for g in groupings if g.problem))
    steps = [s for g in ok for s in g.steps]
    if len(steps) < MIN_STEPS:
        first = problems[0] if problems else None
        return Estimate(None, None, len(steps), len(groupings), len(ok), "inconclusive",
                        Reason("speculative.no_estimate", problem=first), problems)
    mean, lo, hi = _normal_interval(steps)
    wide = [s for g in ok for s in (g.steps_stream_wide or g.steps)]
    _, wide_lo, wide_hi = _normal_interval(wide)
    lo, hi = min(lo, wide_lo), max(hi, wide_hi)  # a group read either way: the verdict must hold for both
    verdict, reason = judge(lo, hi)
    if wide != steps:
        reason = Reason("speculative.both_readings", verdict_reason=reason, mean=mean,
                             wide_mean=sum(wide) / len(wide))
    return Estimate(mean, (lo, hi), len(steps), len(groupings), len(ok), verdict, reason, problems)


def _normal_interval(steps: Sequence[int]) -> tuple[float, float, float]:
    iv = mean_interval(steps, normal_95)
    assert iv is not None  # MIN_STEPS or more
    return iv.mean, iv.lo, iv.hi


def judge(lo: float, hi: float) -> tuple[SpecVerdict, Reason]:
    """The verdict from the interval of the mean tokens per step."""
    if lo >= SPECULATING_LO:
        return "speculating", Reason("speculative.speculating", lo=lo, hi=hi, bound=SPECULATING_LO)
    if hi <= NOT_SPECULATING_HI:
        return "not_speculating", Reason("speculative.not_speculating", lo=lo, hi=hi, bound=NOT_SPECULATING_HI)
    return "inconclusive", Reason("speculative.steps_open", lo=lo, hi=hi, speculating_lo=SPECULATING_LO,
                                       not_speculating_hi=NOT_SPECULATING_HI)


def run_verdict(estimates: Sequence[Estimate], kinds: Sequence[str] | None = None) -> tuple[SpecVerdict, Reason]:
    """Speculating on evidence that holds across a prompt kind's points: at least one point of the kind
    speculating, at least half of its points decided, and none of them reading one token per step (a
    draft may fail on open-ended text and still be on, so the kinds are judged apart). Not speculating
    when every point reads 1 per step; else inconclusive. `kinds` names each estimate's prompt kind
    (None: one kind)."""
    if not estimates:
        return "inconclusive", Reason("speculative.no_point")
    labels = list(kinds) if kinds is not None else [""] * len(estimates)
    disagree: Reason | None = None
    for kind in dict.fromkeys(labels):
        mine = [e for e, k in zip(estimates, labels) if k == kind]
        decided = [e for e in mine if e.verdict != "inconclusive"]
        said = sum(e.verdict == "speculating" for e in decided)
        if said and said == len(decided) and 2 * len(decided) >= len(mine):
            return "speculating", Reason("speculative.speculating_run", speculating=said, points=len(mine),
                                              kind=kind)
        if said:
            disagree = Reason("speculative.points_disagree", kind=kind, speculating=said,
                                   one=len(decided) - said, undecided=len(mine) - len(decided))
    if all(e.verdict == "not_speculating" for e in estimates):
        return "not_speculating", Reason("speculative.not_speculating_run")
    if disagree is not None:
        return "inconclusive", disagree
    open_ = [e.reason for e in estimates if e.verdict == "inconclusive"]
    return "inconclusive", open_[0]
