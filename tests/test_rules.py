"""The shared limits of analysis.rules: one drift rule for every command that measures a reference twice."""

from __future__ import annotations

import pytest

from servecheck.analysis import rules
from servecheck.model import client, records
from servecheck.model.bodies import arms as arms_body


@pytest.mark.parametrize(("change", "drift"), [
    (0.0, False), (0.05, False), (-0.05, False), (0.0501, True), (-0.0501, True), (0.2, True), (-1.0, True),
])
def test_drift_is_a_change_beyond_five_percent_either_way(change: float, drift: bool) -> None:
    assert rules.drifted(change) is drift


def test_the_limits_lower_layers_need_are_the_same_objects() -> None:
    assert rules.OUTPUT_LENGTH_TOLERANCE is records.OUTPUT_LENGTH_TOLERANCE
    assert rules.FIGURE_FRAC is client.FIGURE_FRAC
    assert rules.INTERVAL_LEVEL is arms_body.INTERVAL_LEVEL
