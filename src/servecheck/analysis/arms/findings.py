"""The run's findings, pure: the headline (what concurrency buys the operator and costs each user) or the
reason it is withheld, and the warnings, each naming what happened (late or held reps, drift, a deviant
cell, too few reps, an undecided arm, failed requests) and what to do about it. Reasons, not words: the
sentences are `model.words.arms`'."""

from __future__ import annotations

from collections.abc import Sequence

from servecheck.analysis.arms.checks import _rep_key
from servecheck.analysis.arms.late import _untimed_s, late_reps
from servecheck.analysis.arms.records import (
    MIN_REPS_FOR_RISE,
    ArmResult,
    Cell,
    DeviantCell,
    SerialDrift,
    PositionBias,
    Finding,
)
from servecheck.analysis.rules import DRIFT_LIMIT, FIGURE_FRAC
from servecheck.model.reason import Reason

# How the headline reads a time-to-first-token multiple: below TTFT_CUT it cuts the TTFT, below
# TTFT_UNCHANGED_HI it leaves it about unchanged (a 15% swing in one request's wait is within what one
# queued prefill more or less does at these sizes), beyond it the multiple is named.
TTFT_CUT = 0.9
TTFT_UNCHANGED_HI = 1.15


def ttft_reading(multiple: float) -> str:
    """"cut", "unchanged" or "more": what a TTFT multiple claims, decided here, worded in the book."""
    return "cut" if multiple < TTFT_CUT else "unchanged" if multiple < TTFT_UNCHANGED_HI else "more"


def headline(arm: ArmResult, *, with_ttft: bool = True) -> Reason | None:
    """The two-sided headline: what the operator gains and what each user pays (without the TTFT when
    the client cannot resolve the TTFT: `with_ttft` False)."""
    if arm.aggregate_speedup is None:
        return None
    gain = arm.aggregate_speedup.median - 1.0
    change = arm.per_user_rate_change
    user = []
    if change is not None:
        unchanged = abs(change) < FIGURE_FRAC
        user.append(Reason("arms.user_rate", change=change, unchanged=unchanged))
    if arm.ttft_multiple is not None and with_ttft:
        multiple = arm.ttft_multiple.median
        user.append(Reason("arms.ttft", multiple=multiple, reading=ttft_reading(multiple)))
    return Reason("arms.headline", concurrency=arm.concurrency, gain=gain, user=tuple(user))


def refusal(bias: PositionBias, limit: float) -> Reason:
    """Why the headline is withheld: the arm whose throughput spread past the limit (`bias.method` says
    whether across the positions it held or from the drift along a fixed order)."""
    return Reason("arms.withheld", concurrency=bias.concurrency, spread=bias.spread, method=bias.method, limit=limit)


def _warnings(
    cells: Sequence[Cell], results: Sequence[ArmResult], drift_: SerialDrift | None, deviants: Sequence[DeviantCell],
    *, late_kept: bool = False,
) -> list[Finding]:
    out = []
    if late_kept:
        untimed = [c for c in cells if _untimed_s(c) > 0]
        reps, late_ms = len(late_reps(cells)), max(_untimed_s(c) for c in untimed) * 1e3
        out.append(Finding(
            Reason("arms.late_kept", reps=reps, late_ms=late_ms),
            Reason("arms.late_kept_fix"),
        ))
        cells = [c for c in cells if _untimed_s(c) == 0]
    if drift_ is not None and drift_.loss > DRIFT_LIMIT:
        out.append(
            Finding(
                Reason("arms.drift_lost", loss=drift_.loss),
                Reason("arms.drift_lost_fix"),
            )
        )
    elif drift_ is not None and -drift_.loss > DRIFT_LIMIT:
        out.append(
            Finding(
                Reason("arms.drift_gained", loss=drift_.loss),
                Reason("arms.drift_gained_fix"),
            )
        )
    held = [c for c in cells if c.hop_held_ms > 0]
    if held:
        out.append(
            Finding(
                Reason("arms.hop_held", reps=len({_rep_key(c) for c in held}), cells=len(held),
                            held_ms=max(c.hop_held_ms for c in held)),
                Reason("arms.hop_held_fix"),
            )
        )
    late = [c for c in cells if c.client_late_ms > 0]
    if late:
        out.append(
            Finding(
                Reason("arms.client_late", reps=len({_rep_key(c) for c in late}),
                            late_ms=max(c.client_late_ms for c in late), cells=len(late)),
                Reason("arms.client_late_fix"),
            )
        )
    for d in deviants:
        cell = d.describe()
        out.append(
            Finding(
                Reason("arms.output_length_trap", cell=cell),
                Reason("arms.output_length_trap_fix"),
            )
        )
    paired = min((a.aggregate_speedup.n for a in results if a.aggregate_speedup is not None and a.concurrency != 1),
                 default=None)
    if paired is not None and paired < MIN_REPS_FOR_RISE:
        out.append(
            Finding(
                Reason("arms.too_few_paired", reps=paired),
                Reason("arms.too_few_paired_fix", needed=MIN_REPS_FOR_RISE),
            )
        )
    for a in results:
        if a.label == "inconclusive":
            out.append(Finding(Reason("arms.inconclusive", concurrency=a.concurrency, reason=a.label_reason),
                                Reason("arms.inconclusive_fix")))
    failed = sum(c.failed for c in cells)
    if failed:
        out.append(Finding(Reason("arms.failed", requests=failed),
                            Reason("arms.failed_fix")))
    return out
