"""The demo's design: the staircase test (N = 1, 2, 4) against one engine allowed one request at a
time and allowed four, what each configuration must show, and when a run has shown it."""

from __future__ import annotations

import random

from servecheck.experiments.staircase import OnPoint, StaircaseResult, run_staircase
from servecheck.load.protocol import Driver
from servecheck.model.bodies.demo import DEMO_NS

# (slots, the verdict the server must show): one slot queues, four slots batch four requests.
EXPECTED: tuple[tuple[int, str], ...] = ((1, "staircase"), (4, "cluster"))
# A noisy machine may blur a point into `inconclusive`: the staircase run measures such a point
# again, up to this many reps (a verdict then needs its reps to agree, at least half of them
# definite), and names the N=1 reference's spread; the whole run is never simply repeated until
# it agrees, which would prove nothing.
MAX_REPS = 3


async def run_demo_staircase(
    driver: Driver, *, tokens: int, prompt_tokens: int, rng: random.Random, on_point: OnPoint | None = None
) -> StaircaseResult:
    """One rep of every N, an undecided point measured again up to MAX_REPS."""
    return await run_staircase(
        driver, ns=DEMO_NS, tokens=tokens, prompt_tokens=prompt_tokens, reps=1, max_reps=MAX_REPS, rng=rng,
        on_point=on_point,
    )


def as_expected(verdict: str | None, expected: str, *, valid: bool | None, complete: bool | None = True) -> bool:
    """A configuration has shown what it must only with the expected verdict from a valid, finished run:
    a right word from an invalid or interrupted run proves nothing."""
    return bool(verdict == expected and valid and complete)
