"""The failure shapes measured on a busy machine, fed to the classifiers: where the answer is known
the exact verdict is asserted; where noise is real (a reference off by 3x, +-15% steps, a client
stall over the finishes) the verdict must come out right or `inconclusive`, never wrong, next to an
exact-answer test of the same shape. The ground truth of every case is the schedule the test
builds (a queue, a batch, K slots), never what the classifier said before.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servecheck.analysis import arms as A
from servecheck.analysis import staircase as sc
from servecheck.analysis import witness as W
from servecheck.model.client import ClientLateness
from servecheck.model.reason import Reason
from servecheck.model.records import NS_PER_S, ClientNoise, GaugeSample, RequestRecord, ServerGauges, ServerTimings
from factories import lateness_s, measured_batch, request_s

TOKENS = 256


def _record(i: int, end_s: float, *, start_s: float = 0.0, service_s: float | None = None) -> RequestRecord:
    """A request for TOKENS sent at start_s, its first token 50 ms later, no stream recorded."""
    server = None
    if service_s is not None:  # the server's own timings: prefill is a tenth of the service time
        server = ServerTimings(prompt_tokens=32, prompt_s=0.1 * service_s, generated_tokens=TOKENS,
                               decode_s=0.9 * service_s)
    return request_s(i, send_s=start_s, first_token_s=start_s + 0.05, end_s=end_s, tokens=TOKENS, server=server)


def _gauges(running: list[int], waiting: Sequence[int | None]) -> ServerGauges:
    samples = tuple(GaugeSample(int(0.2 * k * NS_PER_S), r, w) for k, (r, w) in enumerate(zip(running, waiting)))
    return ServerGauges("llama.cpp /metrics", 0.2, samples)


def _batch(n: int, finishes: list[float], rep: int = 0, *, gauges: ServerGauges | None = None,
           services: list[float] | None = None, noise: ClientNoise | None = None,
           lateness: ClientLateness | None = None) -> sc.MeasuredBatch:
    records = [_record(i, f, service_s=None if services is None else services[i]) for i, f in enumerate(finishes)]
    return measured_batch(n, records, rep=rep, gauges=gauges, noise=noise, lateness=lateness)


def _queue(n: int, step_s: float) -> list[float]:
    return [step_s * (k + 1) for k in range(n)]


# --- a slow or fast single reference, with even steps ------------------------------------------


@pytest.mark.parametrize(
    ("single_s", "finishes"),
    [
        # measured: N=1 took 7.34 s while the queue's steps were 5.2-7.0 s (0.70x the single time)
        pytest.param(7.34, [5.2, 11.0, 17.6, 24.6], id="slow-reference-0.70x"),
        # measured: steps 1.52-1.91x and 1.60-1.75x of a single request that ran fast
        pytest.param(2.18, [3.6, 7.45, 11.2, 14.7], id="fast-reference-1.5-1.9x"),
    ],
)
def test_even_steps_against_an_off_reference_are_a_staircase_named(single_s: float, finishes: list[float]) -> None:
    run = [_batch(1, [single_s]), _batch(2, finishes[:1] + [finishes[0] * 2]), _batch(4, finishes)]
    a = sc.analyse_staircase(run, tokens_requested=TOKENS)
    assert a.verdict == "staircase", a.verdict_reason
    assert any(f.code == "reference_disagrees" for f in a.warnings)
    assert a.trend != "rising"


def test_a_reference_off_by_more_than_the_band_is_inconclusive_not_a_guess() -> None:
    a = sc.analyse_staircase([_batch(1, [10.0]), _batch(4, _queue(4, 3.0))], tokens_requested=TOKENS)
    assert a.verdict == "inconclusive"


def test_the_reference_is_the_median_of_before_and_after() -> None:
    run = [_batch(1, [4.17]), _batch(4, _queue(4, 2.2)), _batch(1, [2.18], rep=1), _batch(1, [2.25], rep=2)]
    a = sc.analyse_staircase(run, tokens_requested=TOKENS)
    assert a.single_s == pytest.approx(2.25)
    assert a.single_times_s == (4.17, 2.18, 2.25)
    assert a.verdict == "staircase"
    spread = next(f for f in a.warnings if f.code == "reference_spread")
    assert isinstance(spread.message, Reason)
    assert spread.message.code == "staircase.reference_spread"
    assert spread.message["times_s"] == (4.17, 2.18, 2.25) and spread.message["slower"] is False


# --- a server slowing or speeding during the run (vLLM --max-num-seqs 1, measured) ------------


def test_a_slow_single_request_does_not_make_a_queue_rise() -> None:
    """Measured on vLLM --max-num-seqs 1: the one N=1 request decoded at 12.1 ms a token (3.1 s),
    the queue's requests faster; agg(N)/agg(1) read 1.39 and 1.29 and the old trend said rising."""
    run = [_batch(1, [3.1]), _batch(2, [2.2, 4.45]), _batch(4, [2.59, 4.68, 6.74, 9.61])]
    a = sc.analyse_staircase(run, tokens_requested=TOKENS)
    assert a.trend_ratios[2] == pytest.approx(1.39, abs=0.01)
    assert a.trend != "rising", a.trend_reason
    assert a.verdict == "staircase", a.verdict_reason  # steps 2.59, 2.09, 2.06, 2.87 s: one request each


def test_rising_must_hold_against_the_fastest_reference() -> None:
    # a batching server (4 together at 1.3x one request) measured against one slow and one fast N=1
    run = [_batch(1, [3.0]), _batch(4, [2.7, 2.72, 2.74, 2.75]), _batch(1, [1.6], rep=1)]
    a = sc.analyse_staircase(run, tokens_requested=TOKENS)
    # against the fastest single (1.6 s) the aggregate gains 4 x 1.6 / 2.75 = 2.3x: a real rise
    assert a.trend == "rising", a.trend_reason
    slow_gain = [_batch(1, [3.0]), _batch(4, [8.0, 8.01, 8.02, 8.05]), _batch(1, [1.6], rep=1)]
    b = sc.analyse_staircase(slow_gain, tokens_requested=TOKENS)
    # median reference 2.3 s: 4 x 2.3 / 8.05 = 1.14x; against the fastest 0.8x: not a rise
    assert b.trend != "rising"


# --- server witnesses --------------------------------------------------------------------------


def test_gauges_one_running_three_waiting_decide_an_ambiguous_queue() -> None:
    """Finish times with a gap in the dead band, but the server says one ran and three waited."""
    finishes = [2.0, 3.0, 5.0, 7.0]  # the gap before #2 is 0.5x the single time: ambiguous
    gauges = _gauges([1] * 30, [3] * 10 + [2] * 10 + [1] * 10)
    a = sc.analyse_staircase([_batch(1, [2.0]), _batch(4, finishes, gauges=gauges)], tokens_requested=TOKENS)
    top = a.points[-1]
    assert top.verdict == "staircase", top.reason
    assert top.evidence == ("server_gauges",)
    assert top.batches[0].verdict.times_verdict == "inconclusive"
    assert a.evidence == ("server_gauges",)


def test_gauges_contradicting_the_times_make_the_batch_inconclusive() -> None:
    # the finish times look like a cluster, but the server says one request ran at a time
    gauges = _gauges([1] * 10, [3] * 10)
    a = sc.analyse_staircase([_batch(1, [2.0]), _batch(4, [2.1, 2.12, 2.15, 2.2], gauges=gauges)],
                             tokens_requested=TOKENS)
    top = a.points[-1]
    assert top.verdict == "inconclusive"
    assert top.reason.code == "staircase.witness_disagrees" and top.reason["times_verdict"] == "cluster"
    assert "at most 1 running" in str(top.reason["witness"])


def test_gauges_that_agree_are_named_as_evidence() -> None:
    gauges = _gauges([4] * 10, [0] * 10)
    a = sc.analyse_staircase([_batch(1, [2.0]), _batch(4, [2.5, 2.52, 2.55, 2.6], gauges=gauges)],
                             tokens_requested=TOKENS)
    assert a.verdict == "cluster"
    assert a.evidence == ("completion_times", "server_gauges")


def test_server_timings_read_a_queue_and_a_cluster() -> None:
    queue = [_record(i, 2.0 * (i + 1), service_s=2.0) for i in range(4)]
    reading = W.timing_reading(queue, 4)
    assert reading is not None and reading.schedule == "staircase"
    batch = [_record(i, 2.6, service_s=2.55) for i in range(4)]
    reading = W.timing_reading(batch, 4)
    assert reading is not None and reading.schedule == "cluster"
    slots = [_record(i, 2.0 * (i // 2 + 1), service_s=2.0) for i in range(4)]
    reading = W.timing_reading(slots, 4)
    assert reading is not None and (reading.schedule, reading.slots) == ("partial", 2)


def test_server_timings_decide_when_the_times_are_ambiguous() -> None:
    finishes = [2.0, 3.0, 5.0, 7.0]
    services = [2.0, 1.0, 2.0, 2.0]  # unequal services: no timing reading, so nothing decides
    a = sc.analyse_staircase([_batch(1, [2.0]), _batch(4, finishes, services=services)], tokens_requested=TOKENS)
    assert a.verdict == "inconclusive"


def test_all_n_seen_running_is_a_batch_though_some_were_seen_waiting_first() -> None:
    """Requests released a few ms apart reach a batching scheduler one step apart: one reading shows
    one running and one waiting, a later one both running. That is a cluster, never a partial of N slots."""
    reading = W.gauge_reading(_gauges([1, 2, 2], [1, 0, 0]), 2)
    assert reading is not None and (reading.schedule, reading.slots) == ("cluster", 2)
    assert "being admitted" in str(reading.description)
    # n running but always with some waiting: another client's requests fill the gauge, no reading
    assert W.gauge_reading(_gauges([1, 2, 2], [1, 1, 2]), 2) is None
    # a server that never ran more than one at once is still a queue, whatever waited
    reading = W.gauge_reading(_gauges([1, 1, 1], [1, 1, 0]), 2)
    assert reading is not None and reading.schedule == "staircase"


def test_gauges_above_n_are_other_clients_and_no_witness() -> None:
    assert W.gauge_reading(_gauges([6] * 5, [0] * 5), 4) is None
    assert W.gauge_reading(_gauges([1, 1], [3, 3]), 4) is None  # too few readings


def test_an_inconclusive_point_says_the_machine_was_busy() -> None:
    noise = ClientNoise(cpus=2, load_avg_1m=1.9, busy_frac=0.97, steal_frac=0.0, loop_lag_p99_ms=1.0)
    run = [_batch(1, [2.0]), _batch(4, [2.0, 3.0, 5.0, 7.0], noise=noise)]
    a = sc.analyse_staircase(run, tokens_requested=TOKENS)
    assert a.points[-1].verdict == "inconclusive"
    reason = a.points[-1].reason
    assert reason.code == "joined" and reason["parts"][0] == a.points[-1].batches[0].verdict.reason
    assert "the machine was busy: load 1.9 on 2 cores" in str(reason["parts"][-1])  # analysis.witness's words


# --- repetition: the reps must agree, at least half of them definite --------------------------


def test_one_inconclusive_rep_and_one_staircase_decide() -> None:
    run = [_batch(1, [2.0]), _batch(4, [2.0, 3.0, 5.0, 7.0]), _batch(4, _queue(4, 2.0), rep=1)]
    a = sc.analyse_staircase(run, tokens_requested=TOKENS)
    assert a.points[-1].verdict == "staircase" and a.points[-1].reps_taken == 2
    reason = a.points[-1].reason
    assert reason.code == "staircase.reps_some"
    assert (reason["decided"], reason["reps"], reason["verdict"]) == (1, 2, "staircase")


def test_one_definite_rep_of_three_is_not_enough() -> None:
    ambiguous = [2.0, 3.0, 5.0, 7.0]
    run = [_batch(1, [2.0]), _batch(4, ambiguous), _batch(4, ambiguous, rep=1), _batch(4, _queue(4, 2.0), rep=2)]
    assert sc.analyse_staircase(run, tokens_requested=TOKENS).points[-1].verdict == "inconclusive"


def test_reps_naming_two_schedules_are_inconclusive() -> None:
    run = [_batch(1, [2.0]), _batch(4, [2.2, 2.21, 2.22, 2.23]), _batch(4, _queue(4, 2.0), rep=1)]
    assert sc.analyse_staircase(run, tokens_requested=TOKENS).points[-1].verdict == "inconclusive"


# --- arms labels: a claim needs its own evidence ------------------------------------------------


def test_a_generation_interval_straddling_one_with_a_rising_aggregate_is_not_pipelining() -> None:
    """Measured on --parallel 4 under load: aggregate x2.15 and generation stage x2.15, whose
    interval reached below 1; the old rule said pipelining."""
    label = A.label_arm(A.Estimate(2.15, 1.9, 2.4, 6), A.Estimate(2.15, 0.97, 2.6, 6))
    assert label == "inconclusive"


def test_none_needs_the_aggregate_shown_not_to_gain() -> None:
    assert A.label_arm(A.Estimate(1.01, 0.97, 1.06, 6), A.Estimate(1.0, 0.97, 1.03, 6)) == "none"
    assert A.label_arm(A.Estimate(1.04, 0.95, 1.25, 6), A.Estimate(1.0, 0.97, 1.03, 6)) == "inconclusive"


def test_the_servers_gauges_showing_one_at_a_time_are_evidence_for_none() -> None:
    """Measured on --parallel 1 under load: the 2-way aggregate interval reached past 1.10 (handoffs
    without a client round trip, and noise), so `none` was not shown by the aggregate alone; the
    server's gauges saw one request running at a time in every cell: nothing batched or overlapped."""
    noisy = A.Estimate(1.05, 0.97, 1.16, 12)
    flat_gen = A.Estimate(1.0, 0.96, 1.04, 12)
    assert A.label_arm(noisy, flat_gen) == "inconclusive"
    assert A.label_arm(noisy, flat_gen, peak_running=1) == "none"
    # a generation gain the gauges contradict is no claim either way
    assert A.label_arm(A.Estimate(1.5, 1.3, 1.7, 12), A.Estimate(1.5, 1.3, 1.7, 12), peak_running=1) == "inconclusive"
    # two running at once leaves the aggregate and generation rules to decide
    assert A.label_arm(noisy, flat_gen, peak_running=2) == "inconclusive"


def test_a_serial_server_that_speeds_up_warns() -> None:
    cells = [
        # the same 512 tokens in less time every rep: the serial arm speeds up 4x over the run
        A.Cell(rep=r, position=0, concurrency=1, wall_s=1.0 / (1 + r), tokens=512, decode_tokens=508,
               decoding_union_s=0.9 / (1 + r), decoding_sum_s=0.9 / (1 + r), per_user_rate_tok_s=100.0, ttft_s=0.1,
               start_s=10.0 * r)
        for r in range(4)
    ]
    messages = [str(w.message) for w in A.analyse_arms(cells).warnings]
    assert any("gained" in m and "faster" in m for m in messages), messages


@settings(max_examples=300, deadline=None)
@given(
    single=st.floats(0.5, 8.0),
    ref_factor=st.floats(0.3, 3.0),
    noise=st.lists(st.floats(-0.15, 0.15), min_size=4, max_size=4),
    running=st.sampled_from([None, 1]),
)
def test_a_queue_with_any_reference_and_noise_is_never_a_cluster_or_partial(single, ref_factor, noise, running):
    """A serial server: N=4 steps of one single time each (+-15%), measured against an N=1 reference
    that may be off by 0.3x-3x, with or without its gauges. Never anything but staircase or inconclusive."""
    t, ends = 0.0, []
    for x in noise:
        t += single * (1 + x)
        ends.append(t)
    gauges = None if running is None else _gauges([1] * 10, [3] * 5 + [1] * 5)
    run = [_batch(1, [single * ref_factor]), _batch(4, ends, gauges=gauges)]
    a = sc.analyse_staircase(run, tokens_requested=TOKENS)
    assert a.verdict in ("staircase", "inconclusive"), a.verdict_reason
    assert a.trend != "rising", a.trend_reason


@settings(max_examples=300, deadline=None)
@given(
    single=st.floats(0.5, 8.0),
    ref_factor=st.floats(0.7, 1.5),
    noise=st.lists(st.floats(-0.05, 0.05), min_size=4, max_size=4),
)
def test_a_queue_against_a_reference_inside_the_band_is_a_staircase(single, ref_factor, noise):
    """The shape above where the answer is known: steps within 5% of each other and a reference
    off by at most 0.7x-1.5x. The stopwatch alone (no gauges) must say staircase."""
    t, ends = 0.0, []
    for x in noise:
        t += single * (1 + x)
        ends.append(t)
    a = sc.analyse_staircase([_batch(1, [single * ref_factor]), _batch(4, ends)], tokens_requested=TOKENS)
    assert a.verdict == "staircase", a.verdict_reason
    assert "completion_times" in a.points[-1].batches[-1].verdict.evidence


@settings(max_examples=300, deadline=None)
@given(
    single=st.floats(0.5, 8.0),
    slow=st.floats(1.0, 3.5),
    ref_factor=st.floats(0.3, 3.0),
    noise=st.lists(st.floats(-0.05, 0.05), min_size=4, max_size=4),
)
def test_a_batch_with_any_reference_is_a_cluster(single, slow, ref_factor, noise):
    """Four finishes within 5% of each other are one group whatever the reference: a cluster."""
    ends = [single * slow * (1 + x) for x in noise]
    gauges = _gauges([4] * 10, [0] * 10)
    run = [_batch(1, [single * ref_factor]), _batch(4, ends, gauges=gauges)]
    a = sc.analyse_staircase(run, tokens_requested=TOKENS)
    assert a.verdict == "cluster", a.verdict_reason


def test_gauges_read_in_most_cells_speak_for_the_arm() -> None:
    """vLLM --max-num-seqs 1 under a busy-laptop load: some gauge reads timed out, so not every
    cell had readings, and the arm stayed inconclusive over 12 reps although every cell read showed
    one request running. Enough cells read (half, at least three) with none showing two is evidence;
    one cell that saw two running, or too few read, is not."""
    assert A.observed_peak([1, None, 1, 1, None, 1]) == 1
    assert A.observed_peak([1, None, 2, 1, None, 1]) == 2
    assert A.observed_peak([1, None, None, None, None, 1]) is None  # 2 of 6 read: too few
    assert A.observed_peak([1, 1, None]) is None  # fewer than three read
    noisy = A.Estimate(1.05, 0.76, 1.22, 12)
    flat_gen = A.Estimate(1.0, 0.96, 1.04, 12)
    label, reason = A.label_with_reason(noisy, flat_gen, 1, (4, 6))
    assert label == "none" and "4 of 6" in str(reason)


def test_two_gauge_reads_that_saw_a_queue_contradict_a_cluster() -> None:
    """vLLM --max-num-seqs 1 with its API server starved: four finishes together at 6.18 s, a
    "cluster", while the two /metrics reads that came back showed 1 running and 3 waiting. Too few
    reads to decide an ambiguous batch, enough to contradict a definite one: inconclusive, not cluster."""
    gauges = _gauges([1, 1], [3, 3])
    a = sc.analyse_staircase([_batch(1, [2.0]), _batch(4, [6.18, 6.18, 6.18, 6.18], gauges=gauges)],
                             tokens_requested=TOKENS)
    top = a.points[-1]
    assert top.verdict == "inconclusive", top.reason
    assert top.reason.code == "staircase.witness_disagrees" and top.reason["times_verdict"] == "cluster"
    assert "1 running" in str(top.reason["witness"])
    # the same two reads do not decide a batch whose times are ambiguous
    b = sc.analyse_staircase([_batch(1, [2.0]), _batch(4, [2.0, 3.1, 6.5, 6.6], gauges=gauges)],
                             tokens_requested=TOKENS)
    assert b.points[-1].evidence != ("server_gauges",)


# --- the client's own stalls (vLLM in another autogroup starved the client, measured) ----------


def _stalled(*stalls_s: tuple[float, float]) -> ClientNoise:
    return ClientNoise(cpus=2, load_avg_1m=3.1, loop_lag_p99_ms=12684.0, loop_lag_max_ms=12684.0,
                       stalls_ns=tuple((int(a * NS_PER_S), int(b * NS_PER_S)) for a, b in stalls_s))


def test_a_queue_read_at_the_end_of_a_client_stall_is_never_a_cluster() -> None:
    """Measured (CI, vLLM --max-num-seqs 1): N=1 2.08 s, N=2 both at 3.95 s, N=4 all four at
    7.71-7.73 s; the client's loop did not run from just after the release to the last finish."""
    run = [_batch(1, [2.08]),
           _batch(2, [3.9457, 3.9505], noise=_stalled((0.05, 3.94))),
           _batch(4, [7.7108, 7.7163, 7.7209, 7.7256], noise=_stalled((0.06, 7.70)))]
    a = sc.analyse_staircase(run, tokens_requested=TOKENS)
    assert a.verdict == "inconclusive", a.verdict_reason
    top = a.points[-1].batches[-1].verdict
    assert top.verdict == "inconclusive" and top.reason.code == "staircase.doubted"
    assert top.reason["looked"] == "cluster"
    assert top.reason["why"].code == "staircase.client_stalled"


def test_without_the_stall_record_the_same_times_read_as_a_cluster() -> None:
    """The control: the stall record, and nothing else, is what withholds the (wrong) cluster."""
    run = [_batch(1, [2.08]), _batch(2, [3.9457, 3.9505]), _batch(4, [7.7108, 7.7163, 7.7209, 7.7256])]
    assert sc.analyse_staircase(run, tokens_requested=TOKENS).points[-1].verdict == "cluster"


def _late(*windows_s: tuple[float, float], to_s: float = 30.0) -> ClientLateness:
    """The ticker's record (1 ms ticks, 0.5 ms floor) with late windows [armed, fired] in seconds, over
    the first 30 s unless `to_s` says less: longer than any batch here."""
    return lateness_s(*windows_s, to_s=to_s)


def test_the_ticker_judges_a_queue_read_as_the_client_caught_up() -> None:
    """The same measured queue with the ticker's record instead of the noise record: the client's
    lateness judge (analysis.client_timing) withholds the cluster, naming the client. The ticker, 1 ms
    fine, sees the catch-up too: its window runs until the loop fired on time again, after the reads."""
    run = [_batch(1, [2.08], lateness=_late()),
           _batch(2, [3.9457, 3.9505], lateness=_late((0.05, 3.951))),
           # lanes' records merge to the narrowest span: one worker's ended before the last finish was read
           _batch(4, [7.7108, 7.7163, 7.7209, 7.7256], lateness=_late((0.06, 7.726), to_s=7.72))]
    a = sc.analyse_staircase(run, tokens_requested=TOKENS)
    top = a.points[-1].batches[-1].verdict
    assert top.verdict == "inconclusive" and top.reason.code == "staircase.doubted"
    assert top.reason["looked"] == "cluster"
    late = top.reason["why"]
    assert late.code == "staircase.client_late" and late["worst_s"] == pytest.approx(7.67, abs=0.005)
    assert late["read"] == 4


def test_a_ticker_record_without_long_windows_leaves_the_cluster_standing() -> None:
    """The control: ticks late by 1-3 ms all through the batch (a busy machine, not a stalled reader)
    are far below 25% of the single time, so the finishes stand and the verdict is the times'."""
    jitter = _late(*[(t / 100, t / 100 + 0.003) for t in range(0, 780, 7)])
    run = [_batch(1, [2.08], lateness=_late()), _batch(2, [2.09, 2.1], lateness=jitter),
           _batch(4, [2.1, 2.11, 2.12, 2.13], lateness=jitter)]
    assert sc.analyse_staircase(run, tokens_requested=TOKENS).points[-1].verdict == "cluster"


def test_gauges_still_decide_a_stalled_batch() -> None:
    """A gauge read is what the server said, however late the client read it: three or more
    readings of 1 running and 3 waiting name the queue the stalled finish times cannot."""
    gauges = _gauges([1, 1, 1, 1], [3, 2, 2, 1])
    run = [_batch(1, [2.08]), _batch(4, [7.7108, 7.7163, 7.7209, 7.7256], gauges=gauges,
                                     noise=_stalled((0.06, 7.70)))]
    point = sc.analyse_staircase(run, tokens_requested=TOKENS).points[-1]
    assert point.verdict == "staircase", point.reason
    assert point.batches[-1].verdict.evidence == ("server_gauges",)


def test_server_timings_do_not_decide_a_stalled_batch() -> None:
    """Server queue time is client latency minus the server's own work: a stall inflates it. Four
    batched requests done at 2.0 s, two read before a 2 s stall and two after, look like two
    levels of queueing (a 'partial' of 2) to the timings; the stall voids that reading."""
    run = [_batch(1, [2.0]), _batch(4, [2.0, 2.01, 4.0, 4.01], services=[1.95] * 4, noise=_stalled((2.02, 3.99)))]
    top = sc.analyse_staircase(run, tokens_requested=TOKENS).points[-1]
    assert top.verdict == "inconclusive", top.reason
    assert not any(w.source == "server_timings" for w in top.batches[-1].verdict.witnesses)


def test_a_stall_no_finish_was_read_after_leaves_the_verdict_alone() -> None:
    """A 1 s stall early in a queue's first request, long before any finish: no finish time moved."""
    run = [_batch(1, [2.5]), _batch(4, _queue(4, 2.5), noise=_stalled((0.2, 1.2)))]
    assert sc.analyse_staircase(run, tokens_requested=TOKENS).points[-1].verdict == "staircase"


def test_a_stall_shorter_than_the_join_gap_leaves_the_verdict_alone() -> None:
    """A 0.2 s stall (8% of a 2.5 s single time) right before a cluster's finishes cannot have
    merged anything the grouping would have kept apart."""
    run = [_batch(1, [2.5]), _batch(4, [2.61, 2.62, 2.63, 2.64], noise=_stalled((2.4, 2.6)))]
    assert sc.analyse_staircase(run, tokens_requested=TOKENS).points[-1].verdict == "cluster"


@settings(max_examples=200, deadline=None)
@given(n=st.sampled_from([2, 3, 4]), single=st.floats(0.5, 5.0), start=st.floats(0.0, 1.0),
       stall=st.floats(0.5, 3.0))
def test_a_queue_whose_finishes_a_stall_gathers_is_never_called_a_cluster(
        n: int, single: float, start: float, stall: float) -> None:
    """A true queue; the client stalls from `start` x T1 for `stall` x (N - 1) x T1 and reads every
    finish that fell inside at the stall's end. Whatever that does, it is never a cluster."""
    true = _queue(n, single)
    a, b = start * single, start * single + stall * (n - 1) * single
    seen = sorted(b + 0.001 * k if a <= t <= b else t for k, t in enumerate(true))
    run = [_batch(1, [single]), _batch(n, seen, noise=_stalled((a, b)))]
    verdict = sc.analyse_staircase(run, tokens_requested=TOKENS).points[-1].verdict
    assert verdict in ("staircase", "inconclusive")
    # A finish the stall held is no time at all, so that batch cannot be decided from the times;
    # the exact answers of the same shape are the stall-free tests above and below.
    if any(a <= t <= b for t in true):
        assert verdict == "inconclusive"


def _window(index: int, first_s: float, end_s: float) -> RequestRecord:
    """A request that streamed 16 tokens, one an event, evenly spaced from first_s to end_s."""
    return request_s(index, first_token_s=first_s, end_s=end_s, events=16)


def test_windows_that_overlap_only_by_a_late_read_decide_nothing() -> None:
    """A queue of four 0.6 s requests whose second's first token was stamped 60 ms before the first's
    last: the campaign's serial server read by a client that woke late after every read (exp:30), once
    read `partial`. A late window of 70 ms over those stamps leaves the windows no evidence; without it
    they read an overlap of two."""
    records = [_window(0, 0.10, 0.70), _window(1, 0.64, 1.30), _window(2, 1.31, 1.90), _window(3, 1.91, 2.50)]
    read = sc.read_windows(records, 4, 0.64)
    assert read is not None and read.open_max == 2
    late = _late((0.63, 0.70))
    assert sc.read_windows(records, 4, 0.64, late) is None
    assert sc.read_windows(records, 4, 0.64, _late()) is not None  # a record with no late window vouches
