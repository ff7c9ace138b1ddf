"""The counterbalanced run orders: which of a command's arms, depths or sizes runs when in each rep,
so that a machine's drift over the run weighs on every one of them alike."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def rotation(items: Sequence[T], rep: int) -> tuple[T, ...]:
    """The order of one rep: `items` rotated left by rep, so over len(items) reps each takes each
    position once (a Latin square). arms, interference and speculative's target/baseline order."""
    if not items:
        return ()
    k = rep % len(items)
    return tuple(items[k:]) + tuple(items[:k])


def mirrored(items: Sequence[T], rep: int) -> tuple[T, ...]:
    """`items` as given on even reps, reversed on odd ones: over two reps a steady drift adds the
    same to every item's mean position. context orders its depths so; for two items it is `rotation`."""
    return tuple(items) if rep % 2 == 0 else tuple(items[::-1])
