"""What analysis reads off a saved run for its reports (`analysis.readings`): each figure against the
numbers the test put in, and one rule where the terminal and the HTML used to choose apart."""

from __future__ import annotations

import pytest

import samples
from servecheck.analysis.arms import interval_level
from servecheck.analysis.readings import arms_interval_level, read_report
from servecheck.model.bodies.arms import Arm
from servecheck.model.result import from_doc


def test_the_interval_level_is_the_fewest_reps_beyond_the_serial_arm_with_an_interval() -> None:
    arms = [Arm(concurrency=1, cells=2, aggregate_speedup_interval=(1.0, 1.0)),  # the serial arm: no ratio of its own
            Arm(concurrency=2, cells=9, aggregate_speedup_interval=(1.1, 1.3)),
            Arm(concurrency=4, cells=5, aggregate_speedup_interval=(1.2, 1.6)),
            Arm(concurrency=8, cells=3),  # no interval: states nothing
            Arm(concurrency=16, cells=0, aggregate_speedup_interval=(1.0, 2.0))]  # no reps: states nothing
    assert arms_interval_level(arms) == interval_level(5)
    assert interval_level(5) < interval_level(9)
    assert arms_interval_level(arms[:1]) is None


def test_an_arm_without_its_own_medians_reads_the_median_of_its_cells() -> None:
    doc = samples.arms()
    doc["arms"][1]["aggregate_tok_s"] = 70.0  # recorded: kept as recorded
    reading = read_report([from_doc(doc)]).runs[0].arms
    assert reading.aggregate_tok_s[2] == 70.0
    assert reading.aggregate_tok_s[4] == pytest.approx(64.0 * 1.39)  # both reps' cells say 88.96
    assert reading.ttft_s[4] == pytest.approx(0.29)


def test_a_staircase_point_reads_the_median_stream_rate_and_whether_the_sum_misleads() -> None:
    doc = samples.staircase(serial=True)
    point = doc["points"][2]
    batch = point["batches"][0]
    batch["self_reported_sum_tok_s"], batch["aggregate_tok_s"], batch["self_reported_misleading"] = 256.0, 64.0, True
    (read,) = read_report([from_doc(doc)]).runs
    four = read.staircase[2]
    assert ((four.self_reported_sum_tok_s, four.true_aggregate_tok_s, four.self_reported_misleading)
            == (256.0, 64.0, True))
    # each serial request streams 64 tokens after its first, 0.05 s into its 1 s turn: the same rate for all four
    req = batch["requests"][0]
    assert four.per_user_rate_tok_s == pytest.approx(req["tokens"] / (req["end_s"] - req["first_token_s"]), rel=0.05)
    assert read.staircase[0].self_reported_misleading is None  # no sum recorded at N=1


def test_two_staircase_runs_are_read_side_by_side_and_one_is_not() -> None:
    flat, rising = from_doc(samples.staircase(serial=True)), from_doc(samples.staircase(serial=False))
    both = read_report([flat, rising])
    assert both.side_by_side is not None
    assert [line.trend for line in both.side_by_side.lines] == ["flat", "rising"]
    assert read_report([flat]).side_by_side is None


@pytest.mark.parametrize(
    ("held", "limit", "word", "code"),
    [
        (None, "undetermined", "undetermined", None),
        (8, "undetermined", "holds >= 8 (undetermined)", "run.holds_at_least"),
        (4, "ttft", "holds 4 (ttft)", "run.holds"),
    ],
)
def test_a_capacity_run_is_named_by_what_it_held(held: int | None, limit: str, word: str, code: str | None) -> None:
    from servecheck.analysis.run_verdict import run_verdict
    from servecheck.model.bodies.capacity import CapacityBody
    from servecheck.model.reason import Reason
    from servecheck.model.result import measured

    said = run_verdict(measured("capacity", CapacityBody(max_concurrency=held, limit=limit)))  # type: ignore[arg-type]  # a str for a Limit
    assert said == word
    assert (said.code if isinstance(said, Reason) else None) == code
