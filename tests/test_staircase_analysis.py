"""The staircase verdict logic against synthetic finish times whose truth the test controls."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servecheck.analysis import staircase as sc
from servecheck.analysis.stats import Summary, median, mode, value_range
from servecheck.model.reason import Reason
from servecheck.model.records import NS_PER_S, RequestRecord, ServerTimings
from factories import measured_batch, request_s

SEED_SINGLE_S = 5.51

# (finish times, single time, N, expected verdict, expected group sizes)
CASES = [
    pytest.param([5.5, 11.1, 16.8, 22.5], SEED_SINGLE_S, 4, "staircase", (1, 1, 1, 1), id="seed-000-n4"),
    pytest.param([5.4, 11.0], SEED_SINGLE_S, 2, "staircase", (1, 1), id="seed-000-n2"),
    pytest.param([5.5], SEED_SINGLE_S, 1, "baseline", (), id="n1-baseline"),
    pytest.param([5.9, 6.0, 6.05, 6.2], 5.5, 4, "cluster", (4,), id="cluster-few-percent"),
    # A batched server may take twice the single time and still finish together.
    pytest.param([11.0, 11.1, 11.2, 11.3], 5.5, 4, "cluster", (4,), id="cluster-slow-but-together"),
    pytest.param([6.0, 6.1, 12.1, 12.2], 5.5, 4, "partial", (2, 2), id="partial-2-slots"),
    pytest.param([6.0, 6.1, 6.1, 6.2, 12.1, 12.2, 12.2, 12.3], 5.5, 8, "partial", (4, 4), id="partial-4-slots-n8"),
    pytest.param([6.0, 6.1, 12.1], 5.5, 3, "partial", (2, 1), id="partial-remainder-group"),
    # Noisy staircase that stays inside the tolerances.
    pytest.param([5.2, 11.4, 16.3, 22.9], SEED_SINGLE_S, 4, "staircase", (1, 1, 1, 1), id="noisy-staircase"),
    # Borderline: one gap sits in the dead band between "same group" and "next group".
    pytest.param([5.5, 8.0, 16.8, 22.5], SEED_SINGLE_S, 4, "inconclusive", None, id="gap-in-dead-band"),
    # Separate finishes, but one step far from the single time.
    pytest.param([5.5, 9.0, 16.8, 22.5], SEED_SINGLE_S, 4, "inconclusive", None, id="uneven-steps"),
    # Evenly spaced but at half the single time: not a queue we can name.
    pytest.param([3.0, 6.0, 9.0, 12.0], 6.0, 4, "inconclusive", None, id="even-half-steps"),
    # No single gap is large, but the finishes drift a whole single time apart.
    pytest.param([5.5 + 0.6 * i for i in range(8)], 5.5, 8, "inconclusive", None, id="slow-drift"),
    # A queue (0.5 s per request) measured against a single run that stalled to 3.5 s: the
    # finishes sit 0.14 single times apart, yet two requests cannot finish in a seventh of one.
    pytest.param([0.5, 1.0], 3.5, 2, "inconclusive", None, id="single-time-inflated"),
    # Group sizes a fixed slot count cannot make.
    pytest.param([6.0, 12.0, 12.1, 12.2], 5.5, 4, "inconclusive", None, id="groups-1-then-3"),
    pytest.param([6.0, 6.1, 12.0, 18.0], 5.5, 4, "inconclusive", None, id="groups-2-1-1"),
    # Groups closer than one request could run.
    pytest.param([2.0, 2.1, 4.0, 4.1], 5.5, 4, "inconclusive", None, id="partial-steps-too-short"),
    pytest.param([5.5, 11.1], SEED_SINGLE_S, 4, "inconclusive", None, id="requests-missing"),
    pytest.param([5.5, 11.1, 16.8, 22.5], None, 4, "inconclusive", None, id="no-single-time"),
]


@pytest.mark.parametrize(("finish_s", "single_s", "n", "verdict", "sizes"), CASES)
def test_classify_batch(finish_s, single_s, n, verdict, sizes):
    got = sc.classify_batch(finish_s, single_s, n)
    assert got.verdict == verdict, got.reason
    assert got.reason
    if sizes is not None:
        assert got.group_sizes == sizes


def test_seed_deciding_numbers():
    got = sc.classify_batch([5.5, 11.1, 16.8, 22.5], SEED_SINGLE_S, 4)
    assert got.steps_s == pytest.approx((5.5, 5.6, 5.7, 5.7))
    assert got.step_ratios[0] == pytest.approx(5.5 / 5.51)
    assert got.spread_s == pytest.approx(17.0)
    assert got.first_over_single == pytest.approx(5.5 / 5.51)  # a queue's first request ran alone
    assert got.last_over_single == pytest.approx(22.5 / 5.51)
    assert got.max_gap_ratio == pytest.approx(5.7 / 5.51)


def test_finish_order_does_not_matter():
    assert sc.classify_batch([16.8, 5.5, 22.5, 11.1], SEED_SINGLE_S, 4).verdict == "staircase"


# --- the exact verdict under +-5% noise (the classifier's tolerances are wider) --------------

jitter = st.floats(min_value=-0.05, max_value=0.05)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(2, 8), single=st.floats(0.2, 30.0), noise=st.lists(jitter, min_size=8, max_size=8))
def test_noisy_queue_is_a_staircase(n, single, noise):
    finish = [single * (i + 1 + noise[i]) for i in range(n)]
    got = sc.classify_batch(finish, single, n)
    assert got.verdict == "staircase", got.reason
    assert got.evidence == ("completion_times",)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(2, 8), slow=st.floats(1.0, 3.0), single=st.floats(0.2, 30.0),
       noise=st.lists(jitter, min_size=8, max_size=8))
def test_noisy_batch_is_a_cluster(n, slow, single, noise):
    finish = [single * (slow + noise[i]) for i in range(n)]
    got = sc.classify_batch(finish, single, n)
    assert got.verdict == "cluster", got.reason
    assert got.evidence == ("completion_times",)


@settings(max_examples=200, deadline=None)
@given(
    slots=st.integers(2, 4),
    groups=st.integers(2, 3),
    slow=st.floats(1.0, 1.6),
    single=st.floats(0.2, 30.0),
    noise=st.lists(jitter, min_size=12, max_size=12),
)
def test_noisy_slots_are_partial(slots, groups, slow, single, noise):
    n = slots * groups
    finish = [single * slow * (i // slots + 1) + single * noise[i] for i in range(n)]
    got = sc.classify_batch(finish, single, n)
    assert got.verdict == "partial", got.reason
    assert got.group_sizes == (slots,) * groups


@settings(max_examples=300, deadline=None)
@given(finish=st.lists(st.floats(0.01, 100.0), min_size=2, max_size=8), single=st.floats(0.1, 50.0))
def test_any_input_gives_the_same_verdict_in_any_unit_and_order(finish, single):
    """The verdict reads ratios of the times, never their unit or the order they were listed in:
    the same batch in half-seconds (an exact scaling in floating point) and reversed says the same,
    and only a definite verdict carries the completion times as its evidence."""
    got = sc.classify_batch(finish, single, len(finish))
    again = sc.classify_batch([2.0 * f for f in reversed(finish)], 2.0 * single, len(finish))
    assert (again.verdict, again.group_sizes) == (got.verdict, got.group_sizes)
    assert got.reason
    assert (got.evidence == ("completion_times",)) == (got.verdict != "inconclusive")


# --- per-request checks ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tokens", "modal", "bad"),
    [
        ([512, 512, 512, 512], 512, []),
        ([512, 512, 490, 512], 512, []),  # 4.3% away: inside 5%
        ([512, 512, 480, 512], 512, [2]),  # 6.25% away
        ([512, 100, 512, 300], 512, [1, 3]),
        ([100, 200], 200, [0]),  # tie goes to the longer length
        ([], None, []),
    ],
)
def test_length_outliers(tokens, modal, bad):
    assert sc.length_outliers(tokens) == (modal, bad)


@pytest.mark.parametrize(
    ("skew_s", "single_s", "invalid"),
    [(0.0, 5.0, False), (0.25, 5.0, False), (0.26, 5.0, True), (1.0, None, False)],
)
def test_skew_rule(skew_s, single_s, invalid):
    assert sc.skew_invalid(skew_s, single_s) is invalid


@pytest.mark.parametrize(
    ("ratios", "trend"),
    [
        ({2: 1.004, 4: 0.98}, "flat"),  # seed 000: 93.4 and 91.2 vs 93.0
        ({2: 1.8, 4: 3.1}, "rising"),
        ({2: 1.1, 4: 1.2}, "inconclusive"),  # between flat and rising
        ({2: 0.7}, "inconclusive"),  # falls: not a shape we name
        ({}, "inconclusive"),
    ],
)
def test_trend(ratios, trend):
    got, reason = sc.classify_trend(ratios)
    assert got == trend
    assert reason


def test_stats_helpers():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([1.0, 2.0, 3.0, 10.0]) == 2.5
    assert value_range([3.0, 1.0, 2.0]) == (1.0, 3.0)
    assert mode([1, 2, 2, 3]) == 2
    s = Summary.of([90.0, 93.0, 91.0])
    assert (s.median, s.lo, s.hi, s.count) == (91.0, 90.0, 93.0, 3)
    with pytest.raises(ValueError):
        median([])


# --- a whole run from synthetic batches ------------------------------------------------------


def _record(i: int, end_s: float, tokens: int = 512, **kw) -> RequestRecord:
    """A request for 512 tokens, its first token at 100 ms and no stream recorded; `kw` as `request` takes them."""
    return request_s(i, first_token_s=0.1, end_s=end_s, tokens=tokens, tokens_requested=512, **kw)


def _batch(n: int, finishes: list[float], rep: int = 0, tokens=None, skew_s: float = 0.001, **kw) -> sc.MeasuredBatch:
    tokens = tokens or [512] * len(finishes)
    records = [_record(i, f, t, **kw) for i, (f, t) in enumerate(zip(finishes, tokens))]
    return measured_batch(n, records, rep=rep, dispatch_skew_ns=int(skew_s * NS_PER_S))


SERIAL_RUN = [
    _batch(1, [5.51]),
    _batch(2, [5.4, 11.0]),
    _batch(4, [5.5, 11.1, 16.8, 22.5]),
]


def test_seed_run():
    a = sc.analyse_staircase(SERIAL_RUN, tokens_requested=512)
    assert a.valid
    assert a.single_s == pytest.approx(5.51)
    assert [p.verdict for p in a.points] == ["baseline", "staircase", "staircase"]
    assert a.verdict == "staircase"
    assert a.points[2].aggregate_tok_s == pytest.approx(4 * 512 / 22.5)  # 91.0 tok/s, seed 000
    assert a.trend == "flat"
    assert a.trend_ratios[4] == pytest.approx((4 * 512 / 22.5) / (512 / 5.51))
    # 1.00x is below the rule the analysis judged by, and records: rising from 1.3x
    assert a.trend_rising_ratio == 1.3 and a.record().trend_rising_ratio == 1.3


def test_short_output_is_named_and_invalidates():
    run = [_batch(1, [1.0]), _batch(4, [0.5, 1.0, 1.0, 1.05], tokens=[200, 512, 512, 512])]
    a = sc.analyse_staircase(run, tokens_requested=512)
    assert not a.valid
    (finding,) = a.invalid
    assert finding.code == "output_length" and finding.requests is not None
    assert [(r.n, r.index) for r in finding.requests] == [(4, 0)]
    # The aggregate still counts the tokens actually produced.
    assert a.points[1].aggregate_tok_s == pytest.approx((200 + 3 * 512) / 1.05)


def test_skew_and_failures_invalidate():
    records = (_record(0, 1.0), _record(1, 2.0, status="error", error="boom"))
    failed = measured_batch(2, records, dispatch_skew_ns=0)
    run = [_batch(1, [1.0]), failed, _batch(4, [1.0, 1.0, 1.0, 1.0], skew_s=0.2)]
    a = sc.analyse_staircase(run, tokens_requested=512)
    codes = {f.code for f in a.invalid}
    assert codes == {"failed_requests", "dispatch_skew"}
    (failures,) = [f for f in a.invalid if f.code == "failed_requests"]
    assert failures.requests is not None
    assert [(r.n, r.index) for r in failures.requests] == [(2, 1)]
    assert a.points[1].verdict == "inconclusive"  # one of two finished


def test_contamination_is_named_as_a_warning():
    cached = ServerTimings(cached_prompt_tokens=48)
    run = [_batch(1, [1.0]), _batch(2, [1.0, 1.02], server=cached)]
    a = sc.analyse_staircase(run, tokens_requested=512)
    (w,) = [f for f in a.warnings if f.code == "prefix_cache_contamination"]
    assert w.requests is not None
    assert [r.index for r in w.requests] == [0, 1]
    assert a.verdict == "cluster"


def test_a_cached_bos_token_is_not_contamination():
    bos_only = ServerTimings(cached_prompt_tokens=1, prompt_tokens=64)
    run = [_batch(1, [1.0], server=bos_only), _batch(2, [1.0, 1.02], server=bos_only)]
    a = sc.analyse_staircase(run, tokens_requested=512)
    assert not [f for f in a.warnings if f.code == "prefix_cache_contamination"]


def test_queue_time_and_self_reported_sum():
    # Serial: each request decodes 1 s; the k-th one waited k-1 s; the server claims 512 tok/s each.
    timings = ServerTimings(prompt_s=0.05, decode_s=0.95, self_reported_tok_s=512 / 0.95)
    run = [_batch(1, [1.0], server=timings), _batch(4, [1.0, 2.0, 3.0, 4.0], server=timings)]
    a = sc.analyse_staircase(run, tokens_requested=512)
    top = a.points[1].batches[0]
    assert top.queue_s == pytest.approx((0.0, 1.0, 2.0, 3.0))
    assert top.self_reported_sum_tok_s == pytest.approx(4 * 512 / 0.95)
    assert top.aggregate_tok_s == pytest.approx(512.0)


def test_reps_give_median_and_range_and_disagreement_is_inconclusive():
    run = [
        _batch(1, [1.0], rep=0),
        _batch(1, [1.2], rep=1),
        _batch(1, [1.1], rep=2),
        _batch(2, [1.1, 1.15], rep=0),
        _batch(2, [1.1, 2.2], rep=1),
        _batch(2, [1.1, 1.12], rep=2),
    ]
    a = sc.analyse_staircase(run, tokens_requested=512)
    assert a.single_s == pytest.approx(1.1)
    base = a.points[0].aggregate
    assert base is not None
    assert base.median == pytest.approx(512 / 1.1) and base.lo == pytest.approx(512 / 1.2)
    assert a.points[1].verdict == "inconclusive"
    assert a.points[1].reason.code == "staircase.reps_disagree"
    assert a.points[1].reason["verdicts"] == ("cluster", "staircase", "cluster")
    assert a.points[1].finish_s == pytest.approx((1.1, 1.15))


def test_only_baseline_is_inconclusive():
    a = sc.analyse_staircase([_batch(1, [1.0])], tokens_requested=512)
    assert a.verdict == "inconclusive"
    assert a.trend == "inconclusive"


# --- a verdict is never named from evidence that cannot carry it ------------------------------


def test_unequal_lengths_on_a_serial_server_do_not_read_as_a_cluster():
    # A queue serving one 512-token request, then one of 40 tokens: two finishes 0.08 single
    # times apart, which the grouping alone would call a cluster.
    ends = [1.0, 1.0 + 40 / 512]
    run = [_batch(1, [1.0]), _batch(2, ends, tokens=[512, 40])]
    assert sc.classify_batch(ends, 1.0, 2).verdict == "cluster"  # what the times alone say
    a = sc.analyse_staircase(run, tokens_requested=512)
    assert a.points[1].verdict == "inconclusive"
    reason = a.points[1].reason
    assert reason.code == "staircase.doubted" and reason["looked"] == "cluster"
    assert reason["why"].code == "staircase.lengths_differ" and reason["why"]["off"] == ((1, 40),)
    assert a.verdict == "inconclusive" and not a.valid


def test_skewed_release_makes_the_batch_inconclusive():
    run = [_batch(1, [1.0]), _batch(2, [1.0, 2.0], skew_s=0.3)]
    a = sc.analyse_staircase(run, tokens_requested=512)
    assert a.points[1].verdict == "inconclusive"
    assert "staircase.not_together" in set(a.points[1].reason.codes())
    assert {f.code for f in a.invalid} == {"dispatch_skew"}


def test_a_single_request_of_the_wrong_length_is_no_reference():
    # The N=1 request stopped at 100 tokens; the batches produced 512 each.
    run = [_batch(1, [0.2], tokens=[100]), _batch(2, [1.0, 2.0]), _batch(4, [1.0, 2.0, 3.0, 4.0])]
    a = sc.analyse_staircase(run, tokens_requested=512)
    assert a.single_s is None
    assert [p.verdict for p in a.points] == ["baseline", "inconclusive", "inconclusive"]
    assert a.verdict == "inconclusive"


@pytest.mark.parametrize(
    ("points", "verdict"),
    [
        # two slots: N=2 together, N=4 in pairs
        ({2: [1.1, 1.1], 4: [1.1, 1.1, 2.2, 2.2]}, "partial"),
        # a queue at N=2 cannot batch four at N=4
        ({2: [1.0, 2.0], 4: [1.2, 1.2, 1.25, 1.25]}, "inconclusive"),
        # four together at N=4, yet pairs at N=8 would need two slots
        ({4: [1.2, 1.2, 1.2, 1.2], 8: [1.1, 1.1, 2.2, 2.2, 3.3, 3.3, 4.4, 4.4]}, "inconclusive"),
        # pairs at N=4 and a staircase at N=8: one slot or two?
        ({4: [1.1, 1.1, 2.2, 2.2], 8: [1.0 * (i + 1) for i in range(8)]}, "inconclusive"),
        ({2: [1.1, 1.1], 4: [1.2, 1.2, 1.25, 1.25]}, "cluster"),
    ],
)
def test_points_that_no_slot_count_explains_give_no_run_verdict(points, verdict):
    run = [_batch(1, [1.0])] + [_batch(n, ends) for n, ends in points.items()]
    a = sc.analyse_staircase(run, tokens_requested=512)
    assert a.verdict == verdict, a.verdict_reason
    if verdict == "inconclusive":
        assert a.verdict_reason.code == "staircase.points_disagree"


lengths = st.lists(st.sampled_from([512, 512, 512, 480, 300, 40]), min_size=7, max_size=7)


@settings(max_examples=200, deadline=None)
@given(tokens=lengths, noise=st.lists(jitter, min_size=7, max_size=7))
def test_a_queue_is_never_called_anything_but_a_staircase(tokens, noise):
    """A serial server with whatever output lengths: one request after another, each taking its
    own length's time; the run verdict is staircase or inconclusive, never cluster or partial."""
    per_token = 1.0 / 512
    run, k = [], 0
    for n in (1, 2, 4):
        ends, t = [], 0.0
        for i in range(n):
            t += tokens[k + i] * per_token * (1 + noise[k + i])
            ends.append(t)
        run.append(_batch(n, ends, tokens=tokens[k : k + n]))
        k += n
    a = sc.analyse_staircase(run, tokens_requested=512)
    assert a.verdict in {"staircase", "inconclusive"}, a.verdict_reason
    assert all(p.verdict in {"baseline", "staircase", "inconclusive"} for p in a.points)
    if all(t == 512 for t in tokens):  # the exact answer where the lengths are equal
        assert [p.verdict for p in a.points] == ["baseline", "staircase", "staircase"], a.verdict_reason


@settings(max_examples=200, deadline=None)
@given(tokens=lengths, slow=st.floats(1.0, 2.0), noise=st.lists(jitter, min_size=7, max_size=7))
def test_a_batch_is_never_called_anything_but_a_cluster(tokens, slow, noise):
    """Continuous batching with whatever output lengths: every request runs from the release and
    ends after its own length; the run verdict is cluster or inconclusive, never staircase."""
    per_token = 1.0 / 512
    run, k = [], 0
    for n in (1, 2, 4):
        step = per_token * (slow if n > 1 else 1.0)
        ends = [tokens[k + i] * step * (1 + noise[k + i]) for i in range(n)]
        run.append(_batch(n, ends, tokens=tokens[k : k + n]))
        k += n
    a = sc.analyse_staircase(run, tokens_requested=512)
    assert a.verdict in {"cluster", "inconclusive"}, a.verdict_reason
    if all(t == 512 for t in tokens):  # the exact answer where the lengths are equal
        assert a.verdict == "cluster", a.verdict_reason


@settings(max_examples=200, deadline=None)
@given(noise=st.lists(jitter, min_size=7, max_size=7))
def test_a_queue_of_equal_lengths_is_a_staircase(noise):
    """The shape above with every request 512 tokens long: the answer is known, so it is asserted."""
    run, k = [], 0
    for n in (1, 2, 4):
        ends = [sum((1 + noise[k + j]) for j in range(i + 1)) for i in range(n)]
        run.append(_batch(n, ends, tokens=[512] * n))
        k += n
    a = sc.analyse_staircase(run, tokens_requested=512)
    assert a.verdict == "staircase", a.verdict_reason
    assert [p.verdict for p in a.points] == ["baseline", "staircase", "staircase"]


@settings(max_examples=200, deadline=None)
@given(slow=st.floats(1.0, 2.0), noise=st.lists(jitter, min_size=7, max_size=7))
def test_a_batch_of_equal_lengths_is_a_cluster(slow, noise):
    run, k = [], 0
    for n in (1, 2, 4):
        step = slow if n > 1 else 1.0
        # noise in single-request units: every gap stays under the 0.15x that joins a group
        run.append(_batch(n, [step + noise[k + i] for i in range(n)], tokens=[512] * n))
        k += n
    a = sc.analyse_staircase(run, tokens_requested=512)
    assert a.verdict == "cluster", a.verdict_reason
    assert [p.verdict for p in a.points] == ["baseline", "cluster", "cluster"]


@pytest.mark.parametrize(
    ("cached", "named"),
    [(10, False), (26, False), (41, True)],  # the template head, all of the template, the prompt itself
)
def test_a_chat_template_head_in_the_cache_is_not_contamination(cached, named):
    """llama.cpp's chat route: a 16-token prompt is 42 tokens once templated; the shared template
    head may be cached, the nonce-led prompt text may not."""
    chat = ServerTimings(prompt_tokens=42, cached_prompt_tokens=cached)
    run = [_batch(1, [1.0], server=chat, prompt_tokens=16), _batch(2, [1.0, 1.02], server=chat, prompt_tokens=16)]
    a = sc.analyse_staircase(run, tokens_requested=512)
    found = [f for f in a.warnings if f.code == "prefix_cache_contamination"]
    assert bool(found) is named


def test_a_first_finish_that_leaves_room_withholds_flat_unless_the_point_is_a_queue():
    """vLLM --max-num-seqs 1, measured: N=2 finished at 5.33 / 7.39 s against a 3.87 s single, so
    the batch's own bound allows a 1.44x gain; the point's finishes and gauges are a queue, which
    cannot gain, so the trend is flat. The same bound on a point that is not a staircase withholds it."""
    ratios, bound = {2: 1.05, 4: 0.94}, {2: 1.44, 4: 1.0}
    got, reason = sc.classify_trend(ratios, own_bound=bound, verdicts={2: "staircase", 4: "staircase"})
    assert got == "flat", reason
    got, reason = sc.classify_trend(ratios, own_bound=bound, verdicts={2: "inconclusive", 4: "staircase"})
    assert got == "inconclusive" and reason.code == "staircase.flat_with_room" and reason["bound"] == 1.44
    got, _ = sc.classify_trend(ratios, own_bound=bound)
    assert got == "inconclusive"


def test_an_aggregate_the_client_cannot_resolve_to_two_percent_says_so():
    """Ground truth: a cluster at N=4 finishing at 0.20 s. A client timing error of 5 ms (2.5% of
    0.20 s) can move its aggregate by 2.5%: the figure is client-bound, the verdict (5 ms is within
    5% of a 0.2 s single request) stands. 2 ms (1%) resolves it."""
    from servecheck.model.client import Calibration, ClientCheck

    def check(n: int, error_ms: float) -> ClientCheck:
        c = Calibration(streams=n, gap_ms=10.0, events=40, stamp_delay_p50_ms=error_ms / 2, stamp_delay_p99_ms=error_ms,
                        stamp_delay_max_ms=error_ms, dispatch_skew_ms=0.0, loop_lag_p99_ms=None, loop_lag_max_ms=None)
        return ClientCheck(streams=n, tolerance_ms=10.0, basis="5% of the 200 ms warm-up request", tried=(c,))

    run = [_batch(1, [0.20]), _batch(4, [0.197, 0.198, 0.199, 0.200])]
    loose = sc.analyse_staircase(run, tokens_requested=512, client_checks=[check(1, 2.0), check(4, 5.0)])
    assert loose.points[-1].verdict == "cluster" and loose.valid
    assert abs(loose.aggregate_error_frac[4] - 0.025) < 1e-9 and abs(loose.aggregate_error_frac[1] - 0.01) < 1e-9
    finding = next(f for f in loose.warnings if f.code == "aggregate_client_bound")
    assert isinstance(finding.message, Reason)
    assert finding.message.code == "staircase.aggregate_client_bound"
    assert [n for n, _ in finding.message["loose"]] == [4] and "--workers" in str(finding.hint)
    tight = sc.analyse_staircase(run, tokens_requested=512, client_checks=[check(1, 2.0), check(4, 2.0)])
    assert not any(f.code == "aggregate_client_bound" for f in tight.warnings)


def test_a_client_bound_aggregate_is_marked_where_it_is_printed():
    from servecheck.model.bodies.staircase import Point
    from servecheck.report.lines.staircase import fmt_aggregate

    marked = Point(n=4, aggregate_tok_s=512.0, aggregate_client_error_frac=0.025, aggregate_client_bound=True)
    assert fmt_aggregate(marked) == "aggregate 512.0 tok/s CLIENT-BOUND +-2.5%"
    plain = Point(n=4, aggregate_tok_s=512.0, aggregate_client_error_frac=0.01, aggregate_client_bound=False)
    assert fmt_aggregate(plain) == "aggregate 512.0 tok/s"
