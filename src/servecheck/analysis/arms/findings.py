"""The run's warnings, pure: each names what happened (late or held reps, drift, a deviant cell, too few
reps, an undecided arm, failed requests) and what to do about it."""

from __future__ import annotations

from collections.abc import Sequence

from servecheck.analysis.arms.checks import _rep_key
from servecheck.analysis.arms.late import _untimed_s, late_reps
from servecheck.analysis.arms.records import MIN_REPS_FOR_RISE, ArmResult, Cell, DeviantCell, Drift, Warning_
from servecheck.analysis.rules import DRIFT_LIMIT


def _warnings(
    cells: Sequence[Cell], results: Sequence[ArmResult], drift_: Drift | None, deviants: Sequence[DeviantCell],
    *, late_kept: bool = False,
) -> list[Warning_]:
    out = []
    if late_kept:
        untimed = [c for c in cells if _untimed_s(c) > 0]
        out.append(Warning_(
            f"{len(late_reps(cells))} rep(s) had cells read late by the client or held by a hop (up to "
            f"{max(_untimed_s(c) for c in untimed) * 1e3:.0f} ms), kept: every arm's label is the same whatever "
            "those reads' true times were within that",
            "the figures beside the labels carry that error; measure on a quieter machine for them",
        ))
        cells = [c for c in cells if _untimed_s(c) == 0]
    if drift_ is not None and drift_.loss > DRIFT_LIMIT:
        out.append(
            Warning_(
                f"the serial arm lost {drift_.loss:.1%} of its throughput between the first and last reps",
                "let the machine settle (or cool) before measuring, or add reps so the rotation averages it out",
            )
        )
    elif drift_ is not None and -drift_.loss > DRIFT_LIMIT:
        out.append(
            Warning_(
                f"the serial arm gained {-drift_.loss:.1%} throughput between the first and last reps: the server or "
                "the machine got faster during the run",
                "a load that ended mid-run or a warming cache moves every ratio; rerun on a settled machine, "
                "or add reps",
            )
        )
    held = [c for c in cells if c.hop_held_ms > 0]
    if held:
        out.append(
            Warning_(
                f"{len({_rep_key(c) for c in held})} rep(s) left out: the streams of {len(held)} cell(s) arrived in "
                "bursts coalesced in transit, which a hop that buffers the stream (a proxy, a gateway) may have held "
                f"up to {max(c.hop_held_ms for c in held):.0f} ms, so their times are the hop's, not the server's",
                "point servecheck at the server itself, not through the hop",
            )
        )
    late = [c for c in cells if c.client_late_ms > 0]
    if late:
        out.append(
            Warning_(
                f"{len({_rep_key(c) for c in late})} rep(s) left out: the client itself was late by up to "
                f"{max(c.client_late_ms for c in late):.0f} ms reading {len(late)} cell(s) of them (a busy machine or "
                "a late reader), so their times are no evidence",
                "measure on a quieter machine, or raise --max-reps so the run repeats what it lost",
            )
        )
    for d in deviants:
        out.append(
            Warning_(
                f"output-length trap: {d.describe()}",
                "its throughput uses the tokens it actually produced; never compare its wall clock",
            )
        )
    paired = min((a.aggregate_speedup.n for a in results if a.aggregate_speedup is not None and a.concurrency != 1),
                 default=None)
    if paired is not None and paired < MIN_REPS_FOR_RISE:
        out.append(
            Warning_(
                f"only {paired} rep(s) pair an arm with the serial arm: too few for an interval, so no arm is "
                "labelled batching or pipelining",
                f"use --reps {MIN_REPS_FOR_RISE} or more (a multiple of the arm count)",
            )
        )
    for a in results:
        if a.label == "inconclusive":
            out.append(Warning_(f"{a.concurrency}-way is inconclusive: {a.label_reason}",
                                "add reps (--reps, --max-reps)"))
    failed = sum(c.failed for c in cells)
    if failed:
        out.append(Warning_(f"{failed} request(s) failed",
                            "see the cells; a failed request changes the work an arm did"))
    return out

