"""Reps the client read late or a hop held, pure: which reps they are, whether every arm's label stands
whatever those reads' true times were (then they stay in), and what an undecided arm says of the reps
left out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from servecheck.analysis.arms.checks import _arms, _rep_key
from servecheck.analysis.arms.labels import arm_result
from servecheck.analysis.arms.records import ArmResult, Cell
from servecheck.model.bodies.arms import Label
from servecheck.model.reason import Reason, joined


def _untimed_s(c: Cell) -> float:
    """How far the cell's times may be from the server's: the client's lateness or a hop's hold, s."""
    return (c.client_late_ms + c.hop_held_ms) / 1e3


def shifted(c: Cell, sign: int) -> Cell:
    """The cell with every span it was timed over moved by its whole untimed margin, `sign` x: the far
    end of what its late reads could have been (a read late at either end of a span moves it either way)."""
    d = sign * _untimed_s(c)
    if not d:
        return c
    union = max(c.decoding_union_s + d, 1e-9)
    rate = None if c.per_user_rate_tok_s is None else c.per_user_rate_tok_s * c.decoding_union_s / union
    return replace(c, wall_s=max(c.wall_s + d, 1e-9), decoding_union_s=union,
                   decoding_sum_s=max(c.decoding_sum_s + d, 1e-9), per_user_rate_tok_s=rate,
                   ttft_s=None if c.ttft_s is None else max(c.ttft_s + d, 0.0))


def labels_stand(cells: Sequence[Cell], baseline: int = 1, *, gauges_decide: bool = True) -> bool:
    """Whether every arm's label is the same for any time the late cells' reads could have had: the serial
    arm's late cells moved one way and the others' the other, both ways round, and all alike. Then the
    labels rest on nothing the client could not vouch for, and the late reps stay in."""
    arms = _arms(cells)

    def labels(serial: int, other: int) -> tuple[Label, ...]:
        moved = [shifted(c, serial if c.concurrency == baseline else other) for c in cells]
        return tuple(arm_result(moved, a, gauges_decide=gauges_decide).label for a in arms)

    seen = {labels(a, b) for a, b in ((0, 0), (1, -1), (-1, 1), (1, 1), (-1, -1))}
    return len(seen) == 1


def late_reps(cells: Sequence[Cell]) -> set[tuple[int, int]]:
    """The reps (run, rep) with a cell the client read late, or a hop may have held: a within-rep ratio
    needs both of its cells timed, so the whole rep is no evidence."""
    return {_rep_key(c) for c in cells if c.client_late_ms > 0 or c.hop_held_ms > 0}


def _client_named(arm: ArmResult, late: int) -> ArmResult:
    """An undecided arm whose evidence the client's own lateness thinned says so."""
    if not late or arm.label != "inconclusive":
        return arm
    left_out = Reason("arms.late_left_out", reps=late)
    return replace(arm, label_reason=joined((arm.label_reason, left_out)))

