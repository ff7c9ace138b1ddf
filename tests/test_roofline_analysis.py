"""The roofline arithmetic against the seed's worked numbers (seed 000 section 4) and hand-built cases."""

from __future__ import annotations

import math

import pytest

from servecheck.analysis import roofline as rl
from servecheck.analysis.roofline import Span

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
    step = rl.StepBytes(shared_bytes=1000, per_sequence_bytes=10, routed_expert_bytes=8000, expert_count=8, expert_used=2)
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
