"""The speculative experiment's repetition against fake drivers on a virtual clock (no network, no sleeps):
with a baseline, only a point whose pays / costs the analysis leaves undecided is measured again, one
target + baseline pair at a time, until it decides or reaches --max-reps.

The ground truth is each fake server's step time, request by request: the target steps every 10 ms (100
tok/s a stream), the baseline every 5 ms (200 tok/s) but for the requests a test makes slow."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Iterator
from dataclasses import replace

from servecheck.analysis import speculative as sp
from servecheck.analysis.rules import FIGURE_FRAC
from servecheck.experiments.speculative import MAX_REPS_FACTOR, SpeculativeResult, run_speculative
from servecheck.load.fake import FakeDriver, FakeServer, Law, flat
from servecheck.report.lines.speculative import header_lines

TOKENS = 32
TARGET = FakeServer(token_s=flat(0.010))


def scripted(steps_s: Iterator[float]) -> Law:
    """Each request's step time in turn, the warm-up first (the law is read once a request)."""
    return lambda n: next(steps_s)


def run(baseline: FakeServer, *, reps: int, max_reps: int | None = None,
        target: FakeServer = TARGET) -> SpeculativeResult:
    async def go() -> SpeculativeResult:
        async with FakeDriver(target) as driver:
            return await run_speculative(driver, ns=(1,), tokens=TOKENS, reps=reps, rng=random.Random(3),
                                         open_baseline=lambda: FakeDriver(baseline), max_reps=max_reps)
    return asyncio.run(go())


def by_kind(result: SpeculativeResult) -> dict[str, sp.SpecPointAnalysis]:
    return {p.kind: p for p in result.points()}


def reps_run(result: SpeculativeResult, kind: str) -> list[tuple[int, str]]:
    return [(b.rep, b.side) for b in result.batches if b.kind == kind]


def test_only_the_undecided_point_is_measured_again_until_it_decides() -> None:
    """One slow baseline stream (the first of the predictable prompts: 154 tok/s against 200) leaves two
    streams a side without a baseline interval clear of zero; a third pair decides `costs`. The prose
    point's streams agree from the start: it decides at its planned reps and is not repeated."""
    baseline = FakeServer(token_s=scripted(itertools.chain([0.005, 0.0065], itertools.repeat(0.005))))
    result = run(baseline, reps=2)
    points = by_kind(result)

    planned = replace(result, batches=tuple(b for b in result.batches if b.rep < 2))
    first = planned.point(1, "predictable").paid
    # the interval reaches zero
    assert first is not None and first.verdict == "inconclusive" and first.interval is None, first
    assert sp.pays_undecided(planned.point(1, "predictable"))

    pred = points["predictable"]
    assert pred.paid is not None and pred.paid.verdict == "costs"
    assert pred.extra_reps == 1 and pred.estimate.streams == 3
    assert pred.paid.interval is not None and pred.paid.interval[1] < 1 - FIGURE_FRAC  # what decided it
    assert pred.paid.reason.code == "speculative.repeated"
    assert (pred.paid.reason["extra_reps"], pred.paid.reason["still_open"]) == (1, False)
    # the extra rep keeps the alternation: the target first on even reps
    assert reps_run(result, "predictable") == [(0, "target"), (0, "baseline"), (1, "baseline"), (1, "target"),
                                              (2, "target"), (2, "baseline")]

    prose = points["unpredictable"]
    assert prose.paid is not None and prose.paid.verdict == "costs" and prose.extra_reps == 0
    assert len(reps_run(result, "unpredictable")) == 4

    doc = result.body()
    assert doc.max_reps == MAX_REPS_FACTOR * 2 and [p.extra_reps for p in doc.points] == [1, 0]
    assert header_lines(doc)[-1].endswith("2 rep(s) per N and prompt kind, up to 4 while pays / costs is undecided "
                                          "(1 point(s) measured again)")


def test_a_point_that_never_decides_stops_at_the_bound() -> None:
    """A baseline that alternates 100 and 200 tok/s a stream against a target at 143: the ratio's interval
    straddles 0.98..1.02 however many reps; each point stops at twice the planned reps (the default) and
    says so."""
    target = FakeServer(token_s=flat(0.007))
    baseline = FakeServer(token_s=scripted(itertools.chain([0.005], itertools.cycle([0.010, 0.005]))))
    result = run(baseline, reps=2, target=target)
    assert result.max_reps == MAX_REPS_FACTOR * 2
    for kind, point in by_kind(result).items():
        assert point.paid is not None and point.paid.verdict == "inconclusive", kind
        assert point.extra_reps == MAX_REPS_FACTOR * 2 - 2
        assert len(reps_run(result, kind)) == 2 * MAX_REPS_FACTOR * 2  # target and baseline, every rep
        assert point.paid.reason.code == "speculative.repeated"
        assert (point.paid.reason["extra_reps"], point.paid.reason["still_open"]) == (2, True)


def test_max_reps_bounds_the_repetition_and_at_the_planned_reps_turns_it_off() -> None:
    def alternating() -> FakeServer:
        return FakeServer(token_s=scripted(itertools.chain([0.005], itertools.cycle([0.010, 0.005]))))

    three = run(alternating(), reps=2, max_reps=3, target=FakeServer(token_s=flat(0.007)))
    assert [p.extra_reps for p in three.points()] == [1, 1] and three.max_reps == 3
    off = run(alternating(), reps=2, max_reps=2, target=FakeServer(token_s=flat(0.007)))
    assert [p.extra_reps for p in off.points()] == [0, 0] and len(off.batches) == 8
    # undecided at the planned reps and not repeated: the reason asks for more --reps, no extra rep is named
    assert all(p.paid is not None and p.paid.reason.code in ("speculative.pays_open", "speculative.baseline_zero",
                                                            "speculative.too_few_streams")
               for p in off.points())
    below = run(alternating(), reps=2, max_reps=1, target=FakeServer(token_s=flat(0.007)))
    assert below.max_reps == 2 and len(below.batches) == 8  # never below the planned reps


def test_without_a_baseline_nothing_is_repeated() -> None:
    async def go() -> SpeculativeResult:
        async with FakeDriver(TARGET) as driver:
            return await run_speculative(driver, ns=(1,), tokens=TOKENS, reps=2, rng=random.Random(3), max_reps=8)
    result = asyncio.run(go())
    assert result.max_reps is None and len(result.batches) == 4
    assert all(p.paid is None and p.extra_reps == 0 for p in result.points())
    assert [p.extra_reps for p in result.body().points] == [None, None]
