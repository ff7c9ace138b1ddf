"""The shared intervals and run orders give, to the bit, what each command's own copy gave before they
became one (issue 42): the expected values in fixtures/pins/intervals_orders.json were computed by the
code at 58cc6f7, before anything moved, over a grid of inputs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from servecheck.analysis import arms as A, context as X, design, speculative as S, stats
from servecheck.experiments import interference as I

PINS: dict[str, Any] = json.loads((Path(__file__).parent / "fixtures" / "pins" / "intervals_orders.json").read_text())


def ulps(a: float, b: float) -> float:
    return abs(a - b) / math.ulp(max(abs(a), abs(b)))


@pytest.mark.parametrize("pin", PINS["median_interval"], ids=lambda p: f"n{p['n']}")
def test_median_interval(pin: dict[str, Any]) -> None:
    e = A.median_interval(pin["values"])
    assert (e.median, e.lo, e.hi, e.n) == (pin["median"], pin["lo"], pin["hi"], pin["n"])
    if e.n <= 53:
        assert e.level == pin["level"]
    else:
        # arms summed the binomial in integers, capacity in floats; both are exact up to 53 values (every
        # term and partial sum a dyadic fraction that fits a double) and one ulp or so apart beyond.
        assert ulps(e.level, pin["level"]) <= 4


def test_interval_level() -> None:
    assert [[n, A.interval_level(n)] for n, _ in PINS["interval_level"]] == PINS["interval_level"]


@pytest.mark.parametrize("pin", PINS["quantile_interval"], ids=lambda p: f"q{p['q']}-l{p['level']}-n{p['n']}")
def test_quantile_interval(pin: dict[str, Any]) -> None:
    iv = stats.quantile_interval(pin["values"], pin["q"], pin["level"])
    assert (iv.estimate, iv.lo, iv.hi, iv.n, iv.quantile, iv.level) == (
        pin["estimate"], pin["lo"], pin["hi"], pin["n"], pin["quantile"], pin["reached"])
    assert list(stats.interval_ranks(pin["n"], pin["q"], pin["level"])) == pin["ranks"]


def test_samples_needed_and_coverage() -> None:
    assert [[q, lv, stats.samples_needed(q, lv)] for q, lv, _ in PINS["samples_needed"]] == PINS["samples_needed"]
    assert [[n, q, lo, hi, stats.coverage(n, q, lo, hi)] for n, q, lo, hi, _ in PINS["coverage"]] == PINS["coverage"]


def test_normal_interval_of_steps() -> None:
    for pin in PINS["normal_interval"]:
        assert list(S._normal_interval(pin["steps"])) == pin["interval"], len(pin["steps"])


def test_t_interval_of_rates() -> None:
    """speculative's t interval wrote its half-width t * s / sqrt(n), the normal one z * sqrt(s^2 / n); one
    function spells it the second way, so the t interval's ends may move by an ulp or two (the mean not)."""
    for pin in PINS["t_interval"]:
        got = stats.mean_interval(pin["values"], stats.student_t_95)
        if pin["interval"] is None:
            assert got is None
            continue
        assert got is not None and got.mean == pin["interval"][0], len(pin["values"])
        assert ulps(got.lo, pin["interval"][1]) <= 4 and ulps(got.hi, pin["interval"][2]) <= 4, len(pin["values"])


def test_arms_rotation() -> None:
    for arms, rep, fixed, order in PINS["rotated_order"]:
        assert list(A.rotated_order(arms, rep, fixed=fixed)) == order, (arms, rep, fixed)
    for arms, reps, fixed, cells in PINS["schedule"]:
        assert [list(t) for t in A.schedule(arms, reps, fixed=fixed)] == cells, (arms, reps, fixed)


def test_context_plan() -> None:
    for depths, reps, plan in PINS["context_plan"]:
        assert X.plan_order(depths, reps) == plan, (depths, reps)


def test_interference_plan() -> None:
    for sizes, reps, plan in PINS["interference_plan"]:
        assert [list(t) for t in I.plan_order(sizes, reps)] == plan, (sizes, reps)


def test_speculative_sides() -> None:
    """speculative ran its sides as given on even reps, reversed on odd: for two, both designs agree."""
    for sides, rep, order in PINS["speculative_sides"]:
        assert list(design.rotation(sides, rep)) == order == list(design.mirrored(sides, rep)), (sides, rep)
