"""The roofline arithmetic against the seed's worked numbers (seed 000 section 4) and hand-built cases."""

from __future__ import annotations

import math
from typing import Any

import pytest

from servecheck.analysis import roofline as rl
from servecheck.analysis.roofline import Span
from servecheck.model.bodies.roofline import Ceiling
from servecheck.model.reason import Reason

SEED_BYTES = 1.849e9
SEED_BW = Span(265.0, 315.0)


def test_seed_achieved_bandwidth() -> None:
    assert rl.achieved_gb_s(97.83, SEED_BYTES) == pytest.approx(181.0, abs=0.5)


def test_seed_utilization_range() -> None:
    util = rl.utilization(rl.achieved_gb_s(97.83, SEED_BYTES), SEED_BW)
    assert round(util.lo, 2) == 0.57
    assert round(util.hi, 2) == 0.68


def test_seed_gate_closes() -> None:
    util = rl.utilization(rl.achieved_gb_s(97.83, SEED_BYTES), SEED_BW)
    assert rl.gate_verdict(util, 0.55) == "close"


def test_seed_target_back_solve() -> None:
    check = rl.back_solve(125.0, SEED_BYTES, SEED_BW, rl.TYPICAL_CEILING["moe"])
    assert check.required_gb_s == pytest.approx(231.0, abs=0.5)
    assert round(check.required_utilization.lo, 2) == 0.73
    assert round(check.required_utilization.hi, 2) == 0.87
    assert check.within_reach is False
    assert check.partly_within_reach is False


def test_seed_decomposition() -> None:
    d = rl.decompose("new", 1.849e9, 97.83, "llama.cpp", 2.80e9, 41.5)
    assert d.bytes_ratio == pytest.approx(1.51, abs=0.01)
    assert rl.achieved_gb_s(41.5, 2.80e9) == pytest.approx(116, abs=0.5)
    assert d.utilization_ratio == pytest.approx(1.56, abs=0.01)
    assert 2.35 <= d.product <= 2.38
    assert d.measured_ratio == pytest.approx(2.36, abs=0.01)
    assert d.product == pytest.approx(d.measured_ratio, abs=0.01)
    assert d.bytes_share is not None and d.utilization_share is not None
    assert d.bytes_share + d.utilization_share == pytest.approx(1.0)
    assert d.bytes_share == pytest.approx(math.log(2.80 / 1.849) / math.log(97.83 / 41.5))


@pytest.mark.parametrize(
    ("lo", "hi", "threshold", "expected"),
    [
        (0.57, 0.68, 0.55, "close"),
        (0.55, 0.60, 0.55, "close"),
        (0.30, 0.50, 0.55, "open"),
        (0.50, 0.60, 0.55, "straddle"),
        (0.30, 0.549, 0.55, "open"),
        (0.30, 0.55, 0.55, "straddle"),
    ],
)
def test_gate_table(lo: float, hi: float, threshold: float, expected: str) -> None:
    assert rl.gate_verdict(Span(lo, hi), threshold) == expected


def test_headroom_is_ceiling_over_utilization() -> None:
    h = rl.headroom(Span(0.5, 0.6), Span(0.6, 0.65), "typical MoE")
    assert h.factor.lo == pytest.approx(1.0)
    assert h.factor.hi == pytest.approx(1.3)


@pytest.mark.parametrize(
    ("e", "k", "b", "expected"),
    [
        (8, 2, 1, 2.0),
        (8, 2, 2, 8 * (1 - 0.75**2)),
        (128, 8, 4, 128 * (1 - (120 / 128) ** 4)),
        (8, 8, 3, 8.0),
        (0, 0, 4, 0.0),
    ],
)
def test_expected_distinct_experts(e: int, k: int, b: int, expected: float) -> None:
    got = rl.expected_distinct_experts(e, k, b)
    assert got == pytest.approx(expected)
    if e:
        assert got <= min(b * k, e) + 1e-9


def test_batch_step_bytes_dense_once_experts_partial_kv_per_sequence() -> None:
    step = rl.StepBytes(shared_bytes=1000, per_sequence_bytes=10, routed_expert_bytes=8000, expert_count=8,
                        expert_used=2)
    assert rl.step_bytes(step, 1) == pytest.approx(1000 + 2000 + 10)
    # b=2: 8(1-0.75^2) = 3.5 experts of 8 -> 3500 bytes, KV twice
    assert rl.step_bytes(step, 2) == pytest.approx(1000 + 3500 + 20)


def test_batch_ceiling_dense_scales_with_batch() -> None:
    step = rl.StepBytes(shared_bytes=10**9, per_sequence_bytes=0, routed_expert_bytes=0, expert_count=0, expert_used=0)
    rows = rl.batch_ceilings(step, [1, 4], Span.point(50.0))
    assert rows[0].ceiling_tok_s.lo == pytest.approx(50.0)
    assert rows[1].ceiling_tok_s.lo == pytest.approx(200.0)
    assert rows[0].distinct_experts is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1.849GB", 1_849_000_000),
        ("2.80GB", 2_800_000_000),
        ("21GiB", 21 * 2**30),
        ("4096", 4096),
        ("512 MiB", 512 * 2**20),
        ("1.5kb", 1500),
    ],
)
def test_parse_bytes(text: str, expected: int) -> None:
    assert rl.parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "GB", "1.8XB", "-1GB", "nanGB", "0GB", "abc", "0.1B", "infGB"])
def test_parse_bytes_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        rl.parse_bytes(text)


# ---------------------------------------------------------------- the whole roofline, its validity and its notes


def test_analyse_the_seed() -> None:
    r = rl.analyse_roofline(1_849_000_000, "moe", 97.83, SEED_BW, rl.TYPICAL_CEILING["moe"], target_tok_s=125.0)
    assert r.achieved_gb_s == pytest.approx(181.0, abs=0.5)
    assert (round(r.utilization.lo, 2), round(r.utilization.hi, 2)) == (0.57, 0.68)
    assert r.gate == "close" and r.valid and r.batch is None
    name = r.headroom.ceiling_name
    assert isinstance(name, Reason) and name.code == "roofline.typical_ceiling"
    assert (name["kind"], name["lo"], name["hi"]) == ("moe", 0.60, 0.65)
    assert r.speed_of_light.ceiling_name == rl.SPEED_OF_LIGHT
    assert r.target is not None and r.target.within_reach is False
    assert r.ceiling_record() == Ceiling(name="typical moe ceiling 0.60-0.65", utilization=(0.60, 0.65))
    assert r.headroom_record().speed_of_light_tok_s == pytest.approx((265e9 / 1.849e9, 315e9 / 1.849e9))
    target = r.target_record()
    assert target is not None and target.required_utilization == pytest.approx((0.734, 0.872), abs=0.001)


def test_analyse_batch_rows_carry_what_a_run_measured() -> None:
    r = rl.analyse_roofline(10**9, "dense", 50.0, Span.point(100.0), rl.TYPICAL_CEILING["dense"], batches=[1, 4],
                   measured={4: 100.0})
    assert r.batch is not None
    one, four = r.batch
    assert one.ceiling.ceiling_tok_s.as_list() == pytest.approx([50.0, 50.0])  # batch 1: the measured rate itself
    assert one.measured_tok_s is None and one.measured_over_ceiling is None
    assert four.measured_over_ceiling is not None and four.measured_over_ceiling.lo == pytest.approx(0.5)
    rows = r.batch_records()
    assert (rows is not None and rows[1].measured_over_ceiling == pytest.approx((0.5, 0.5))
            and rows[0].measured_over_ceiling is None)


@pytest.mark.parametrize(
    ("lo", "hi", "valid"),
    [
        (0.57, 0.68, True),
        (0.95, 1.13, True),  # straddles 100%: a note, not an invalid run
        (1.0, 1.2, True),
        (1.01, 1.2, False),  # achieved above measured over the whole range: physically impossible
    ],
)
def test_plausible_utilization(lo: float, hi: float, valid: bool) -> None:
    assert rl.plausible(Span(lo, hi)) is valid
    assert rl.analyse_roofline(10**9, "dense", hi * 100, Span(100.0, hi / lo * 100), Span(0.85, 0.95)).valid is valid


NO_CAVEAT = {"audited": True, "kv_counted": True, "kind_given": True, "batched": False}


@pytest.mark.parametrize(
    ("util", "flags", "code", "values"),
    [
        (Span(0.95, 1.13), {}, "roofline.above_bandwidth", {"limit": 1.0}),
        (Span(0.10, 0.12), {}, "roofline.low_utilization", {"limit": 0.15}),
        (Span(0.5, 0.6), {"audited": False, "kind_given": False}, "roofline.kind_assumed_dense", {}),
        (Span(0.5, 0.6), {"audited": False, "batched": True}, "roofline.batch_unaudited", {}),
        (Span(0.5, 0.6), {"kv_counted": False}, "roofline.kv_not_counted", {}),
        (Span(0.5, 0.6), {"stream_tokens": 20, "asked_tokens": 40}, "roofline.short_stream",
         {"tokens": 20, "asked": 40}),
    ],
)
def test_each_sanity_note(util: Span, flags: dict[str, Any], code: str, values: dict[str, Any]) -> None:
    (note,) = rl.sanity_notes(util, **{**NO_CAVEAT, **flags})
    assert note.code == code and {name: note[name] for name in values} == values


@pytest.mark.parametrize(
    "flags",
    [
        {},
        {"audited": False, "kv_counted": False},  # --bytes-per-token with --kind: nothing to say about the KV cache
        {"batched": True},  # batching with an audit: the split is known
        {"stream_tokens": 39, "asked_tokens": 40},  # within 95% of the asked length
        {"stream_tokens": 20, "asked_tokens": None},
    ],
)
def test_no_sanity_note_without_its_cause(flags: dict[str, Any]) -> None:
    assert rl.sanity_notes(Span(0.5, 0.6), **{**NO_CAVEAT, **flags}) == []
