"""The shared intervals and run orders give, to the bit, what each command's own copy gave before they
became one (issue 42): the expected values in fixtures/pins/intervals_orders.json were computed by the
code at 58cc6f7, before anything moved, over a grid of inputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servecheck.analysis import arms as A, capacity as C, context as X, speculative as S
from servecheck.experiments import interference as I

PINS: dict[str, Any] = json.loads((Path(__file__).parent / "fixtures" / "pins" / "intervals_orders.json").read_text())


@pytest.mark.parametrize("pin", PINS["median_interval"], ids=lambda p: f"n{p['n']}")
def test_median_interval(pin: dict[str, Any]) -> None:
    e = A.median_interval(pin["values"])
    assert (e.median, e.lo, e.hi, e.n, e.level) == (pin["median"], pin["lo"], pin["hi"], pin["n"], pin["level"])


def test_interval_level() -> None:
    assert [[n, A.interval_level(n)] for n, _ in PINS["interval_level"]] == PINS["interval_level"]


@pytest.mark.parametrize("pin", PINS["quantile_interval"], ids=lambda p: f"q{p['q']}-l{p['level']}-n{p['n']}")
def test_quantile_interval(pin: dict[str, Any]) -> None:
    iv = C.quantile_interval(pin["values"], pin["q"], pin["level"])
    assert (iv.estimate, iv.lo, iv.hi, iv.n, iv.quantile, iv.level) == (
        pin["estimate"], pin["lo"], pin["hi"], pin["n"], pin["quantile"], pin["reached"])
    assert list(C.interval_ranks(pin["n"], pin["q"], pin["level"])) == pin["ranks"]


def test_samples_needed_and_coverage() -> None:
    assert [[q, lv, C.samples_needed(q, lv)] for q, lv, _ in PINS["samples_needed"]] == PINS["samples_needed"]
    assert [[n, q, lo, hi, C.coverage(n, q, lo, hi)] for n, q, lo, hi, _ in PINS["coverage"]] == PINS["coverage"]


def test_normal_interval_of_steps() -> None:
    for pin in PINS["normal_interval"]:
        assert list(S._normal_interval(pin["steps"])) == pin["interval"], len(pin["steps"])


def test_t_interval_of_rates() -> None:
    for pin in PINS["t_interval"]:
        got = S.mean_interval(pin["values"])
        assert (None if got is None else list(got)) == pin["interval"], len(pin["values"])


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
    for sides, rep, order in PINS["speculative_sides"]:
        assert [s for s in (sides if rep % 2 == 0 else reversed(sides))] == order, (sides, rep)
