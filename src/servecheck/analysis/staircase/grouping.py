"""How one batch's finish times group, pure: gaps against the single-request time split them into
groups, and the groups name the schedule (`classify_batch`: cluster, staircase, partial) or none."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from servecheck.analysis.rules import STAIRCASE_STEP_TOL
from servecheck.analysis.staircase.records import DEFINITE_VERDICTS, BatchVerdict
from servecheck.model.bodies.staircase import Evidence, Verdict
from servecheck.model.reason import Reason, joined

# --- grouping finish times -------------------------------------------------------------------
# Gaps are measured against the single-request time T1. Inside a group, finishes differ only by
# jitter and staggered prefill: a few percent of T1. Between groups the next group needs at least
# one full decode of the output, i.e. about one T1. A gap below SMALL_GAP_FRAC x T1 joins a group,
# one above LARGE_GAP_FRAC x T1 starts a new one; the wide dead band in between is where noise or
# an unknown schedule could fool us, so a gap there makes the batch inconclusive, never a guess.
SMALL_GAP_FRAC = 0.15
LARGE_GAP_FRAC = 0.5
# One group is a cluster only if its whole spread is small too: many small gaps can add up to a
# slow drift that is neither batching nor a queue (a quarter of T1 is far beyond prefill stagger).
CLUSTER_SPREAD_FRAC = 0.25
# Staircase: each step (release -> first finish, then finish -> finish) within STAIRCASE_STEP_TOL
# (analysis.rules, +-25%) of T1.
# Evenly spaced: (largest step - smallest step) / mean step at most this. A queue of equal requests
# is even to a few percent on a quiet machine; a schedule that is not even is not one we know how
# to name. A staircase's finishes are already separated by gaps of more than half a single time
# (no batching shows that), so its evenness test may allow a busy machine's swing of +-20%.
EVEN_STEP_SPREAD = 0.3
STAIRCASE_EVEN_SPREAD = 0.4
# A staircase whose steps are even with each other and with its own first finish (in a queue the
# first request runs alone: that finish is itself a single-request time) stays a staircase when
# its mean step lies within this band of the N=1 reference; the disagreement is then named.
# Measured on a loaded 2-core machine: steps 0.70x a stalled reference and 1.5-1.9x a fast one.
# Steps at half the reference or less are no queue we can name against it.
REFERENCE_STEP_LO = 0.6
REFERENCE_STEP_HI = 2.0
# Partial: a group of K batched requests cannot finish faster than one request alone, so each
# group's step is at least most of T1; shorter steps mean something we do not understand.
PARTIAL_MIN_STEP_FRAC = 0.75
# Cluster: the same bound for one group. N requests done together well before one request alone
# means the N=1 time is no fair reference (a stall during the single run inflates it, and a
# queue's finishes then sit closer than any gap threshold), not that batching is faster than alone.
CLUSTER_MIN_LAST_FRAC = 0.75


@dataclass(frozen=True, slots=True)
class Grouping:
    groups: tuple[tuple[float, ...], ...]
    ambiguous: tuple[tuple[int, float], ...]  # (index of the later finish, gap ratio) in the dead band
    uncertainty_ratio: float = 0.0  # how far a gap may be off (clocks of several machines), / single time


def group_finishes(finish_s: Sequence[float], single_s: float, uncertainty_s: float = 0.0) -> Grouping:
    """Split sorted finish times into groups at gaps larger than LARGE_GAP_FRAC x single time.

    `uncertainty_s` is how far any gap may be off (finishes read on several machines' clocks,
    `BatchResult.clock_uncertainty_ns`): a gap splits groups only if it is beyond the threshold
    by more than that, and one that might lie on either side of a threshold is ambiguous, so a gap
    the clocks cannot resolve is never a group boundary."""
    u = uncertainty_s / single_s
    groups: list[list[float]] = []
    ambiguous: list[tuple[int, float]] = []
    for i, t in enumerate(finish_s):
        gap_ratio = (t - finish_s[i - 1]) / single_s if i else float("inf")
        if gap_ratio - u > LARGE_GAP_FRAC:
            groups.append([t])
            continue
        if gap_ratio + u >= SMALL_GAP_FRAC:
            ambiguous.append((i, gap_ratio))
        groups[-1].append(t)
    return Grouping(groups=tuple(tuple(g) for g in groups), ambiguous=tuple(ambiguous), uncertainty_ratio=u)


def group_steps(groups: Sequence[Sequence[float]]) -> list[float]:
    """Time from release to the first group, then between consecutive groups (by group means)."""
    centres = [sum(g) / len(g) for g in groups]
    return [c - prev for prev, c in zip([0.0, *centres], centres)]


def _even(steps: Sequence[float], limit: float = EVEN_STEP_SPREAD) -> bool:
    mean = sum(steps) / len(steps)
    return mean > 0 and (max(steps) - min(steps)) / mean <= limit


def _consistent_sizes(sizes: Sequence[int]) -> bool:
    """K slots give groups of K, the last one holding the remainder."""
    head = sizes[:-1]
    return all(s == head[0] for s in head) and sizes[-1] <= head[0]


def classify_batch(finish_s: Sequence[float], single_s: float | None, n: int,
                   uncertainty_s: float = 0.0) -> BatchVerdict:
    """Classify one batch of `n` requests from its finish times (seconds from release), each gap
    known to +-`uncertainty_s` (0: one machine's clock)."""
    if n == 1:
        return BatchVerdict(n=1, verdict="baseline", single_s=single_s,
                            reason=Reason("staircase.baseline"))
    if single_s is None or single_s <= 0:
        return BatchVerdict(
            n=n,
            verdict="inconclusive",
            reason=Reason("staircase.no_reference"),
        )
    if len(finish_s) < n:
        return BatchVerdict(
            n=n, verdict="inconclusive", single_s=single_s,
            reason=Reason("staircase.unfinished", finished=len(finish_s), n=n),
        )
    ordered = sorted(finish_s)
    grouping = group_finishes(ordered, single_s, uncertainty_s)
    gaps = [b - a for a, b in zip(ordered, ordered[1:])]
    steps = group_steps(grouping.groups)
    spread = ordered[-1] - ordered[0]
    base = BatchVerdict(
        n=n,
        verdict="inconclusive",
        reason=joined(()),  # decided below
        single_s=single_s,
        group_sizes=tuple(len(g) for g in grouping.groups),
        steps_s=tuple(steps),
        step_ratios=tuple(s / single_s for s in steps),
        spread_s=spread,
        spread_ratio=spread / single_s,
        first_over_single=ordered[0] / single_s,
        last_over_single=ordered[-1] / single_s,
        max_gap_ratio=max(gaps) / single_s,
    )
    verdict, reason = _decide(base, grouping, single_s)
    off_reference = verdict == "staircase" and any(abs(r - 1.0) > STAIRCASE_STEP_TOL for r in base.step_ratios)
    evidence: tuple[Evidence, ...] = ("completion_times",) if verdict in DEFINITE_VERDICTS else ()
    slots = base.group_sizes[0] if verdict == "partial" else None
    return replace(base, verdict=verdict, reason=reason, evidence=evidence, reference_disagrees=off_reference,
                   slots=slots)


def _decide(v: BatchVerdict, grouping: Grouping, single_s: float) -> tuple[Verdict, Reason]:
    if grouping.ambiguous:
        i, gap_ratio = grouping.ambiguous[0]
        return "inconclusive", Reason("staircase.gap_ambiguous", index=i, gap_ratio=gap_ratio,
                   uncertainty_ratio=grouping.uncertainty_ratio, small=SMALL_GAP_FRAC, large=LARGE_GAP_FRAC)
    k = len(grouping.groups)
    if k == 1:
        return _decide_cluster(v)
    if k == v.n:
        return _decide_staircase(v)
    return _decide_partial(v, grouping, single_s)


def _decide_cluster(v: BatchVerdict) -> tuple[Verdict, Reason]:
    assert v.spread_ratio is not None and v.last_over_single is not None
    if v.last_over_single < CLUSTER_MIN_LAST_FRAC:
        return "inconclusive", Reason("staircase.cluster_too_soon", n=v.n, last_over_single=v.last_over_single,
                   min_last=CLUSTER_MIN_LAST_FRAC)
    if v.spread_ratio <= CLUSTER_SPREAD_FRAC:
        return "cluster", Reason("staircase.cluster", n=v.n, spread_ratio=v.spread_ratio)
    return "inconclusive", (
        Reason("staircase.cluster_drift", spread_ratio=v.spread_ratio, max_spread=CLUSTER_SPREAD_FRAC))


def _decide_staircase(v: BatchVerdict) -> tuple[Verdict, Reason]:
    lo, hi = min(v.step_ratios), max(v.step_ratios)
    if not _even(v.steps_s, STAIRCASE_EVEN_SPREAD):
        return "inconclusive", (
            Reason("staircase.steps_uneven", n=v.n, step_ratios=v.step_ratios, even=STAIRCASE_EVEN_SPREAD))
    if all(abs(r - 1.0) <= STAIRCASE_STEP_TOL for r in v.step_ratios):
        return "staircase", Reason("staircase.queue", n=v.n, lo=lo, hi=hi)
    mean = sum(v.step_ratios) / len(v.step_ratios)
    if REFERENCE_STEP_LO <= mean <= REFERENCE_STEP_HI:
        first = v.steps_s[0]
        return "staircase", Reason("staircase.queue_off_reference", n=v.n, first_s=first, lo=lo, hi=hi)
    return "inconclusive", (
        Reason("staircase.steps_off", n=v.n, lo=lo, hi=hi, tol=STAIRCASE_STEP_TOL, ref_lo=REFERENCE_STEP_LO,
               ref_hi=REFERENCE_STEP_HI))


def _decide_partial(v: BatchVerdict, grouping: Grouping, single_s: float) -> tuple[Verdict, Reason]:
    sizes = v.group_sizes
    if not _consistent_sizes(sizes):
        return "inconclusive", Reason("staircase.groups_unslotted", sizes=sizes)
    wide = [g for g in grouping.groups if (g[-1] - g[0]) / single_s > CLUSTER_SPREAD_FRAC]
    if wide:
        return "inconclusive", Reason("staircase.group_drift")
    short = [r for r in v.step_ratios if r < PARTIAL_MIN_STEP_FRAC]
    if short:
        return "inconclusive", (
            Reason("staircase.group_step_short", step_ratio=short[0], min_step=PARTIAL_MIN_STEP_FRAC))
    if not _even(v.steps_s):
        return "inconclusive", Reason("staircase.groups_uneven", sizes=sizes)
    return "partial", Reason("staircase.partial", sizes=sizes)
