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
from servecheck.model.reason import Reason, twin


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
        user.append(twin(
            Reason("arms.user_rate", change=change, unchanged=unchanged),
            "leaves each user's generation rate about unchanged" if unchanged
            else f"costs each user {-change:.0%} of their generation rate" if change < 0
            else f"gives each user {change:+.0%} generation rate"))
    if arm.ttft_multiple is not None and with_ttft:
        m = arm.ttft_multiple.median
        n = round(m)
        user.append(twin(
            Reason("arms.ttft", multiple=m),
            f"cuts the time to first token to {m:.2f}x" if m < 0.9
            else "leaves the time to first token about unchanged" if m < 1.15
            else f"{ {2: 'doubles', 3: 'triples', 4: 'quadruples'}[n]} the time to first token"
            if n in (2, 3, 4) and abs(m - n) <= 0.1
            else f"nearly { {2: 'doubles', 3: 'triples', 4: 'quadruples'}[n]} the time to first token"
            if n in (2, 3, 4) and n - 0.35 <= m < n
            else f"multiplies the time to first token by {m:.1f}"))
    return twin(
        Reason("arms.headline", concurrency=arm.concurrency, gain=gain, user=tuple(user)),
        f"{arm.concurrency}-way concurrency "
        + (f"buys the operator {gain:+.0%} throughput" if gain >= 0 else f"costs the operator {-gain:.0%} throughput")
        + ("; it " + " and ".join(str(u) for u in user) if user else ""))


def refusal(bias: PositionBias, limit: float) -> Reason:
    """Why the headline is withheld: the arm whose throughput spread past the limit (`bias.method` says
    whether across the positions it held or from the drift along a fixed order)."""
    return twin(
        Reason("arms.withheld", concurrency=bias.concurrency, spread=bias.spread, method=bias.method, limit=limit),
        f"headline withheld: the {bias.concurrency}-way arm's throughput spreads {bias.spread:.1%} "
        + ("across the positions it occupied" if bias.method == "positions"
           else "from the drift it carried by always running in the same place (fixed order)")
        + f", above the {limit:.0%} limit")


def _warnings(
    cells: Sequence[Cell], results: Sequence[ArmResult], drift_: SerialDrift | None, deviants: Sequence[DeviantCell],
    *, late_kept: bool = False,
) -> list[Finding]:
    out = []
    if late_kept:
        untimed = [c for c in cells if _untimed_s(c) > 0]
        reps, late_ms = len(late_reps(cells)), max(_untimed_s(c) for c in untimed) * 1e3
        out.append(Finding(
            twin(Reason("arms.late_kept", reps=reps, late_ms=late_ms),
                 f"{len(late_reps(cells))} rep(s) had cells read late by the client or held by a hop (up to "
                 f"{max(_untimed_s(c) for c in untimed) * 1e3:.0f} ms), kept: every arm's label is the same whatever "
                 "those reads' true times were within that"),
            twin(Reason("arms.late_kept_fix"),
                 "the figures beside the labels carry that error; measure on a quieter machine for them"),
        ))
        cells = [c for c in cells if _untimed_s(c) == 0]
    if drift_ is not None and drift_.loss > DRIFT_LIMIT:
        out.append(
            Finding(
                twin(Reason("arms.drift_lost", loss=drift_.loss),
                     f"the serial arm lost {drift_.loss:.1%} of its throughput between the first and last reps"),
                twin(Reason("arms.drift_lost_fix"),
                     "let the machine settle (or cool) before measuring, or add reps so the rotation averages it out"),
            )
        )
    elif drift_ is not None and -drift_.loss > DRIFT_LIMIT:
        out.append(
            Finding(
                twin(Reason("arms.drift_gained", loss=drift_.loss),
                     f"the serial arm gained {-drift_.loss:.1%} throughput between the first and last reps: the server "
                     "or the machine got faster during the run"),
                twin(Reason("arms.drift_gained_fix"),
                     "a load that ended mid-run or a warming cache moves every ratio; rerun on a settled machine, "
                     "or add reps"),
            )
        )
    held = [c for c in cells if c.hop_held_ms > 0]
    if held:
        out.append(
            Finding(
                twin(Reason("arms.hop_held", reps=len({_rep_key(c) for c in held}), cells=len(held),
                            held_ms=max(c.hop_held_ms for c in held)),
                     f"{len({_rep_key(c) for c in held})} rep(s) left out: the streams of {len(held)} cell(s) "
                     "arrived in bursts coalesced in transit, which a hop that buffers the stream (a proxy, a gateway) "
                     f"may have held up to {max(c.hop_held_ms for c in held):.0f} ms, so their times are the hop's, "
                     "not the server's"),
                twin(Reason("arms.hop_held_fix"), "point servecheck at the server itself, not through the hop"),
            )
        )
    late = [c for c in cells if c.client_late_ms > 0]
    if late:
        out.append(
            Finding(
                twin(Reason("arms.client_late", reps=len({_rep_key(c) for c in late}),
                            late_ms=max(c.client_late_ms for c in late), cells=len(late)),
                     f"{len({_rep_key(c) for c in late})} rep(s) left out: the client itself was late by up to "
                     f"{max(c.client_late_ms for c in late):.0f} ms reading {len(late)} cell(s) of them (a busy "
                     "machine or a late reader), so their times are no evidence"),
                twin(Reason("arms.client_late_fix"),
                     "measure on a quieter machine, or raise --max-reps so the run repeats what it lost"),
            )
        )
    for d in deviants:
        cell = d.describe()
        out.append(
            Finding(
                twin(Reason("arms.output_length_trap", cell=cell), f"output-length trap: {cell}"),
                twin(Reason("arms.output_length_trap_fix"),
                     "its throughput uses the tokens it actually produced; never compare its wall clock"),
            )
        )
    paired = min((a.aggregate_speedup.n for a in results if a.aggregate_speedup is not None and a.concurrency != 1),
                 default=None)
    if paired is not None and paired < MIN_REPS_FOR_RISE:
        out.append(
            Finding(
                twin(Reason("arms.too_few_paired", reps=paired),
                     f"only {paired} rep(s) pair an arm with the serial arm: too few for an interval, so no arm is "
                     "labelled batching or pipelining"),
                twin(Reason("arms.too_few_paired_fix", needed=MIN_REPS_FOR_RISE),
                     f"use --reps {MIN_REPS_FOR_RISE} or more (a multiple of the arm count)"),
            )
        )
    for a in results:
        if a.label == "inconclusive":
            out.append(Finding(twin(Reason("arms.inconclusive", concurrency=a.concurrency, reason=a.label_reason),
                                     f"{a.concurrency}-way is inconclusive: {a.label_reason}"),
                                twin(Reason("arms.inconclusive_fix"), "add reps (--reps, --max-reps)")))
    failed = sum(c.failed for c in cells)
    if failed:
        out.append(Finding(twin(Reason("arms.failed", requests=failed), f"{failed} request(s) failed"),
                            twin(Reason("arms.failed_fix"),
                                 "see the cells; a failed request changes the work an arm did")))
    return out
