"""The prefix-cache verdict from hand-built sends: the timing first (only far beyond noise), the server's cache
counters corroborating, deciding only what the timing leaves open, and named where they contradict it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servecheck.analysis.cache import (
    TEMPLATE_HEAD_FRACTION,
    HIT_FRACTION,
    INERT_TTFT_RATIO,
    WORKING_TTFT_RATIO,
    CacheSend,
    analyse_prefix_cache,
)
from servecheck.model.codec import encode

P = 6000  # prompt tokens


def run(ttfts: Sequence[float | None], cached: list[int | None], control_ttft: float | None = 6.8,
        control_cached: int | None = 0, prompt: int | None = P) -> list[CacheSend]:
    sends = [CacheSend("repeat", t, c, prompt) for t, c in zip(ttfts, cached, strict=True)]
    return sends + [CacheSend("control", control_ttft, control_cached, prompt)]


CASES = [
    # (description, sends, verdict, signal)
    ("seed 000: 6.8 s every time, counter 0", run([6.8, 6.8, 6.8], [0, 0, 0]), "inert", "counters"),
    ("the local engine: 7.3 s then 0.19 s, cache_n rises", run([7.3, 0.19, 0.19], [0, 5999, 5999], 7.3, 1),
     "working", "timing"),
    ("counters show hits though the time did not drop (tiny model)", run([0.02, 0.02, 0.02], [0, 5999, 5999], 0.02, 1),
     "working", "counters"),
    ("BOS-only cache is flat", run([1.0, 1.0, 0.98], [0, 1, 1], 1.0, 1), "inert", "counters"),
    ("flat counters, repeats 0.6x of the first and of the control: not inert",
     run([1.0, 0.6, 0.6], [0, 0, 0], 1.0, 0), "unknown", "counters"),
    ("flat counters, cold first send, repeats as slow as the control: inert",
     run([2.0, 1.0, 1.0], [0, 0, 0], 1.0, 0), "inert", "counters"),
    ("no counters, much faster", run([7.3, 0.2, 0.21], [None, None, None], 7.2, None), "working", "timing"),
    ("no counters, same time", run([7.3, 7.2, 7.4], [None, None, None], 7.3, None), "unknown", "none"),
    ("no counters, 0.7x: noise could explain it", run([1.0, 0.7, 0.7], [None] * 3, 1.0, None), "unknown", "none"),
    ("no counters, faster than the first but not than the control (first was a cold start)",
     run([7.0, 0.5, 0.5], [None] * 3, 0.6, None), "unknown", "none"),
    ("flat counters but much faster: the timing decides, counters lie", run([7.3, 0.2, 0.2], [0, 0, 0], 7.3, 0),
     "working", "timing"),
    ("control also cached: shared prefix", run([7.3, 0.2, 0.2], [0, 5999, 5999], 0.2, 5999), "unknown", "counters"),
    ("mixed counters fall back to time", run([7.3, 0.2, 7.3, 7.3], [0, 5999, 0, 0], 7.3, 0), "unknown", "none"),
    ("mixed counters, time says working", run([7.3, 0.2, 0.2, 0.2], [0, 5999, 0, 5999], 7.3, 0), "working", "timing"),
    ("a failed send", run([7.3, None, 0.2], [0, None, 5999]), "unknown", "none"),
    ("a single repeat", run([7.3], [0]), "unknown", "none"),
    ("prompt length unknown: counters unusable, time decides", run([7.3, 0.2, 0.2], [0, 10, 10], 7.3, 0, None),
     "working", "timing"),
]


@pytest.mark.parametrize(("name", "sends", "verdict", "signal"), CASES, ids=[c[0] for c in CASES])
def test_verdicts(name, sends, verdict, signal):
    v = analyse_prefix_cache(sends)
    assert (v.verdict, v.signal) == (verdict, signal), v.reason
    assert v.reason


def _with_floor(ttfts: list[float], cached: list[int | None], control: float, floor: float) -> list[CacheSend]:
    return [*run(ttfts, cached, control, 0), CacheSend("floor", floor, 0, 32)]


def test_counters_that_claim_every_hit_on_repeats_as_slow_as_a_fresh_prompt_are_named_not_believed():
    """The lying-counters server: cache_n says all but one token was cached, yet the repeats took as
    long as a fresh prompt of equal length while a short prompt (what a hit costs) took 0.02x it."""
    v = analyse_prefix_cache(_with_floor([0.40, 0.41, 0.40], [5999, 5999, 5999], 0.40, 0.008))
    assert (v.verdict, v.signal, v.decided_by_witness) == ("inert", "timing", False), v.reason
    assert v.witness_contradicts is not None and v.witness_contradicts.code == "prefix_cache.counters_hit"
    assert v.witness_contradicts["lowest"] == pytest.approx(5999 / P)
    assert v.warm_cached_fraction == pytest.approx(5999 / P)
    assert v.reason.code == "prefix_cache.counters_contradict"
    assert v.reason["timing"].code == "prefix_cache.as_slow_as_control"
    assert v.record().witness_contradicts == v.witness_contradicts
    assert analyse_prefix_cache(_with_floor([0.40, 0.41, 0.40], [5999, 5999, 5999], 0.40, 0.008),
                                counters_decide=False) == v


def test_counters_that_agree_with_the_timing_corroborate_it():
    v = analyse_prefix_cache(_with_floor([0.40, 0.01, 0.01], [0, 5999, 5999], 0.40, 0.008))
    assert (v.verdict, v.signal, v.decided_by_witness, v.witness_contradicts) == ("working", "timing", False, None)
    assert v.reason.code == "prefix_cache.counters_agree" and v.reason["counters"].code == "prefix_cache.counters_hit"


def test_counters_break_a_tie_the_timing_leaves_open_and_say_so():
    """A tiny model: a hit saves nothing visible (the floor costs as much as the prompt), so the timing
    cannot tell; the counters decide, labelled, and --evidence stopwatch forbids it."""
    sends = _with_floor([0.02, 0.02, 0.02], [0, 5999, 5999], 0.02, 0.02)
    v = analyse_prefix_cache(sends)
    assert (v.verdict, v.signal, v.decided_by_witness) == ("working", "counters", True), v.reason
    assert v.reason.code == "prefix_cache.decided_by_counters"
    assert v.record().decided_by_witness is True
    stopwatch = analyse_prefix_cache(sends, counters_decide=False)
    assert (stopwatch.verdict, stopwatch.decided_by_witness) == ("unknown", False)
    assert stopwatch.reason.code == "prefix_cache.counters_undecided" and stopwatch.reason["held_back"] is True


def test_ratios_reported():
    v = analyse_prefix_cache(run([8.0, 2.0, 2.0], [0, 6000, 6000], 4.0, 0))
    assert v.warm_ttft_ratio == pytest.approx(0.25)
    assert v.control_ttft_ratio == pytest.approx(0.5)
    assert v.warm_cached_fraction == pytest.approx(1.0)
    thresholds = v.record().thresholds
    assert thresholds is not None and thresholds.working_ttft_ratio == WORKING_TTFT_RATIO
    assert encode(v.record(), nulls=True)["thresholds"]["working_ttft_ratio"] == WORKING_TTFT_RATIO


def test_threshold_edges():
    just_hit = int(HIT_FRACTION * P)
    assert analyse_prefix_cache(run([1.0, 1.0, 1.0], [0, just_hit, just_hit])).verdict == "working"
    assert analyse_prefix_cache(run([1.0, 1.0, 1.0], [0, just_hit - 1, just_hit])).verdict == "unknown"  # mixed
    flat = int(TEMPLATE_HEAD_FRACTION * P)
    assert analyse_prefix_cache(run([1.0, 1.0, 1.0], [0, flat, flat], 1.0)).verdict == "inert"
    working = run([1.0, WORKING_TTFT_RATIO * 0.99] * 1 + [0.4], [None] * 3, 1.0, None)
    assert analyse_prefix_cache(working).verdict == "working"
    unknown = run([1.0, WORKING_TTFT_RATIO, WORKING_TTFT_RATIO], [None] * 3, 1.0, None)
    assert analyse_prefix_cache(unknown).verdict == "unknown"
    assert INERT_TTFT_RATIO > WORKING_TTFT_RATIO


@given(
    st.lists(st.floats(0.001, 100.0), min_size=2, max_size=6),
    st.floats(0.001, 100.0),
    st.lists(st.one_of(st.none(), st.integers(0, P)), min_size=6, max_size=6),
)
def test_any_numbers_give_a_verdict_that_reads_ratios_and_holds_its_thresholds(ttfts, control, cached):
    """Any sends: the verdict is the same in any time unit (times doubled, an exact scaling), and a
    `working` verdict meets the threshold of the signal that decided it."""
    sends = run(ttfts, cached[: len(ttfts)], control, cached[-1])
    v = analyse_prefix_cache(sends)
    doubled = analyse_prefix_cache(run([2.0 * t for t in ttfts], cached[: len(ttfts)], 2.0 * control, cached[-1]))
    assert (doubled.verdict, doubled.signal) == (v.verdict, v.signal)
    assert v.reason
    if v.verdict == "working" and v.signal == "timing":
        assert v.warm_ttft_ratio is not None and v.warm_ttft_ratio < WORKING_TTFT_RATIO
    if v.verdict == "working" and v.signal == "counters":
        assert v.warm_cached_fraction is not None and v.warm_cached_fraction >= HIT_FRACTION


@pytest.mark.parametrize(
    ("cached", "prompt", "expected"),
    [
        (None, 64, False),  # the server reports no counter
        (0, 64, False),
        (1, 64, False),  # llama.cpp keeps the BOS token in the slot: every request "hits" it
        (2, 64, False),  # BOS + one token two nonces happen to share
        (4, 64, False),  # at the allowance
        (5, 64, True),
        (48, 64, True),  # most of the prompt came from the cache
        (30, 1000, False),  # 3% of a long prompt: a chat template's fixed head
        (51, 1000, True),
        (5, None, True),  # no prompt length: the token floor alone decides
    ],
)
def test_contamination_allowance(cached: int | None, prompt: int | None, expected: bool) -> None:
    from servecheck.analysis.cache import contaminated

    assert contaminated(cached, prompt) is expected


def test_cached_chat_template_head_is_not_contamination() -> None:
    """llama.cpp's chat route: 42 templated tokens for a 16-token prompt, 10 of them cached."""
    from servecheck.analysis.cache import record_contaminated
    from servecheck.model.records import RequestRecord, ServerTimings

    def rec(cached: int) -> RequestRecord:
        server = ServerTimings(prompt_tokens=42, cached_prompt_tokens=cached)
        return RequestRecord(index=0, nonce="n", status="ok", tokens_requested=8, send_ns=0, prompt_tokens=16,
                             server=server)

    assert record_contaminated(rec(10)) is False  # all inside the 26-token template
    assert record_contaminated(rec(36)) is True  # 10 of the prompt's own 16 tokens came from the cache


# --- the client's own lateness -------------------------------------------------------------


def _late(sends: list[CacheSend], kind: str, ms: float, nth: int = 0) -> list[CacheSend]:
    """`sends` with the nth send of `kind` read late by `ms`."""
    at = [i for i, s in enumerate(sends) if s.kind == kind][nth]
    return [replace(s, client_late_ms=ms) if i == at else s for i, s in enumerate(sends)]


def test_a_first_send_read_late_is_no_reference():
    """An inert cache (1.0 s every time, no counters) whose first send and control the client read 1.5 s
    late: the ratios alone call the repeats a hit (0.40x both); neither late send is a reference, so unknown."""
    sends = _late(_late(run([2.5, 1.0, 1.0], [None] * 3, 2.5, None), "repeat", 1500.0), "control", 1500.0)
    blind = analyse_prefix_cache([replace(s, client_late_ms=0.0) for s in sends])
    assert (blind.verdict, blind.warm_ttft_ratio) == ("working", 0.4)  # what the record prevents
    v = analyse_prefix_cache(sends)
    assert (v.verdict, v.signal) == ("unknown", "none")
    assert v.reason.code == "prefix_cache.reference_late"
    assert (v.reason["late_ms"], v.reason["first"], v.reason["control"]) == (1500.0, True, True)


def test_a_control_read_late_is_no_reference_either():
    """A cold first send (7.0 s) and repeats at 0.5 s, as slow as a fresh prompt truly is (0.6 s), but the
    control read 1.4 s late: against 2.0 s the repeats look like hits. At the control's true time they
    do not, so the late control is no reference and the verdict is unknown."""
    sends = _late(run([7.0, 0.5, 0.5], [None] * 3, 2.0, None), "control", 1400.0)
    # what the record prevents
    assert analyse_prefix_cache([replace(s, client_late_ms=0.0) for s in sends]).verdict == "working"
    v = analyse_prefix_cache(sends)
    assert v.verdict == "unknown" and v.reason.code == "prefix_cache.reference_late"
    assert (v.reason["first"], v.reason["control"]) == (False, True)


def test_a_late_send_that_cannot_change_the_verdict_stands():
    """A working cache (7.3 s, then 0.2 s) whose first send was read 300 ms late: at 7.0 s the repeats
    are hits all the same, so the verdict stands and says what was read late."""
    v = analyse_prefix_cache(_late(run([7.3, 0.2, 0.2], [None] * 3, 7.3, None), "repeat", 300.0))
    assert (v.verdict, v.signal) == ("working", "timing")
    assert v.reason.code == "prefix_cache.late_kept" and v.reason["late_ms"] == 300.0


def test_a_warm_repeat_read_late_is_left_out_and_the_rest_decide():
    """A working cache (7.3 s, then 0.2 s) with one warm repeat read 7 s late: that repeat is left out,
    the other still shows the hit."""
    sends = _late(run([7.3, 0.2, 7.2], [None] * 3, 7.3, None), "repeat", 7000.0, nth=2)
    v = analyse_prefix_cache(sends)
    assert (v.verdict, v.signal) == ("working", "timing"), v.reason
    assert v.warm_ttft_ratio == pytest.approx(0.2 / 7.3, rel=0.01)


def test_repeats_as_slow_as_the_first_send_beside_a_slow_control_are_inert_against_the_first():
    """No counters, the one control send slow (1.3x the repeats): the first send of the prompt is the
    reference, and a short prompt at 0.02x it shows a hit would have been visible."""
    sends = [*run([0.40, 0.41, 0.41], [None] * 3, 0.53, None, 2000), CacheSend("floor", 0.008, None, 32)]
    v = analyse_prefix_cache(sends)
    assert (v.verdict, v.signal) == ("inert", "timing"), v.reason
    assert v.reason.code == "prefix_cache.as_slow_as_first" and v.reason["no_counters"] is True
    assert v.reason["floor_first_ratio"] == pytest.approx(0.02)
    assert v.reason["control"] == pytest.approx(0.41 / 0.53)
