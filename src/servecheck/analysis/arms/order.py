"""The rotated design, pure: which arm runs in which position of each rep, and when that balances."""

from __future__ import annotations

from collections.abc import Sequence

from servecheck.analysis.design import rotation


def rotated_order(arms: Sequence[int], rep: int, *, fixed: bool = False) -> tuple[int, ...]:
    """The arm order of one rep: cyclic rotation by rep, so each arm takes each position in turn."""
    return tuple(arms) if fixed else rotation(arms, rep)


def schedule(arms: Sequence[int], reps: int, *, fixed: bool = False) -> list[tuple[int, int, int]]:
    """(rep, position, concurrency) for every cell, in the order they run."""
    return [(rep, pos, c) for rep in range(reps) for pos, c in enumerate(rotated_order(arms, rep, fixed=fixed))]


def balanced(n_arms: int, reps: int) -> bool:
    """Each arm occupies each position equally often exactly when reps is a multiple of the arm count."""
    return n_arms > 0 and reps % n_arms == 0

