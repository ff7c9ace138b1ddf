"""The pure analysis behind `servecheck capacity`, with hand-built numbers: order-statistic intervals,
verdicts per N, the search, the answer, marginals, drift and non-monotone curves."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from servecheck.analysis.arms import median_interval
from servecheck.analysis.capacity import (
    Criteria,
    ProbeSample,
    analyse_capacity,
    assess,
    held,
    limit_of,
    next_n,
    probe_from_records,
    steady_records,
)
from servecheck.analysis.rules import DRIFT_LIMIT
from servecheck.analysis.stats import coverage, interval_ranks, quantile_interval, samples_needed
from servecheck.model.reason import Reason
from servecheck.model.records import NS_PER_S, RequestRecord, RequestStatus, ServerTimings
from servecheck.model.words.capacity import ordinal
from factories import request_ns
from written import as_reason

MS = 1_000_000


def sample(n: int, rates: list[float], ttfts: list[float] | None = None, agg: float | None = None,
           failure: str | None = None) -> ProbeSample:
    ttfts = ttfts if ttfts is not None else [0.01] * len(rates)
    return ProbeSample(n=n, rates_tok_s=tuple(rates), ttfts_s=tuple(ttfts), aggregate_tok_s=agg, window_s=(0.0, 1.0),
                       requests=len(rates) + n, discarded=n, failed=1 if failure else 0,
                       failure=failure)  # type: ignore[arg-type]  # the server's words as text, passed on as given


# ---------------------------------------------------------------- intervals


@pytest.mark.parametrize("n", range(1, 41))
def test_median_interval_agrees_with_arms(n: int) -> None:
    values = [float((i * 7) % 13 + i) for i in range(n)]
    mine, theirs = quantile_interval(values, 0.5), median_interval(values)
    assert (mine.lo, mine.hi, mine.estimate) == (theirs.lo, theirs.hi, theirs.median)
    assert mine.level == pytest.approx(theirs.level)


@pytest.mark.parametrize(("q", "needed"), [(0.5, 6), (0.1, 31), (0.9, 31), (0.25, 11)])
def test_samples_needed_for_95_percent(q: float, needed: int) -> None:
    assert samples_needed(q) == needed
    assert interval_ranks(needed, q)[2] >= 0.95 > interval_ranks(needed - 1, q)[2]


@pytest.mark.parametrize(("n", "q", "lo", "hi", "level"), [
    (6, 0.5, 1, 6, 62 / 64),  # the whole range of six covers the median 96.9% of the time
    (4, 0.5, 1, 4, 14 / 16),  # four values cannot reach 95%: [min, max] at 87.5%, said so
    (1, 0.5, 1, 1, 0.0),
])
def test_interval_level_is_the_exact_binomial_coverage(n: int, q: float, lo: int, hi: int, level: float) -> None:
    iv = quantile_interval([float(i) for i in range(1, n + 1)], q)
    assert (iv.lo, iv.hi) == (float(lo), float(hi))
    assert iv.level == pytest.approx(level)
    if n > 1:
        assert coverage(n, q, lo, hi) == pytest.approx(level)


def test_low_percentile_interval_sits_in_the_low_tail() -> None:
    iv = quantile_interval([float(i) for i in range(1, 101)], 0.1)
    assert iv.level >= 0.95 and iv.lo < iv.estimate < iv.hi
    assert 3 <= iv.lo <= 10 <= iv.hi <= 18


# ---------------------------------------------------------------- one N


FLOOR = Criteria(min_user_rate_tok_s=50.0, max_ttft_s=0.5)


@pytest.mark.parametrize(("rates", "ttfts", "status", "rate_status", "ttft_status"), [
    ([60, 61, 62, 63, 64, 65], [0.1] * 6, "pass", "pass", "pass"),
    ([40, 41, 42, 43, 44, 45], [0.1] * 6, "fail", "fail", "pass"),
    ([45, 48, 50, 52, 55, 58], [0.1] * 6, "uncertain", "uncertain", "pass"),
    ([60, 61, 62, 63, 64, 65], [0.6] * 6, "fail", "pass", "fail"),
    ([60, 61, 62, 63, 64, 65], [0.1, 0.2, 0.4, 0.6, 0.7, 0.8], "uncertain", "pass", "uncertain"),
    ([60, 61, 62, 63, 64], [0.1] * 5, "uncertain", "uncertain", "uncertain"),  # five samples: below 95%
])
def test_a_verdict_needs_the_whole_interval_on_one_side(rates, ttfts, status, rate_status, ttft_status) -> None:
    p = assess(2, [sample(2, rates, ttfts)], FLOOR)
    assert (p.status, p.rate_status, p.ttft_status) == (status, rate_status, ttft_status)


def test_too_few_samples_say_so() -> None:
    p = assess(2, [sample(2, [60, 61, 62])], FLOOR)
    assert p.status == "uncertain" and p.reason.code == "capacity.interval_short"
    assert (p.reason["samples"], p.reason["needed"]) == (3, 0.95) and p.reason["level"] < 0.95


def test_remeasures_pool_their_samples() -> None:
    p = assess(4, [sample(4, [60, 61, 62]), sample(4, [63, 64, 65])], FLOOR)
    assert p.status == "pass" and p.probes == 2 and p.rate is not None and p.rate.n == 6


def test_failed_requests_fail_the_n_with_the_reason() -> None:
    p = assess(8, [sample(8, [60] * 6, failure="2 of 24 requests failed (error: HTTP 503: busy)")], FLOOR)
    assert p.status == "fail" and p.rate_status == "fail"
    assert p.reason == "2 of 24 requests failed (error: HTTP 503: busy)"


def test_percentile_reads_as_share_of_users_served() -> None:
    c = Criteria(10.0, 1.0, percentile=90)
    assert (c.rate_quantile, c.ttft_quantile) == pytest.approx((0.1, 0.9))
    assert c.samples_needed() == 31 and c.measured_per_lane(1) == 31 and c.measured_per_lane(64) == 2
    assert Criteria(10.0).measured_per_lane(1) == 6


# ---------------------------------------------------------------- the search


def search(truth_rate, criteria: Criteria, max_n: int) -> tuple[list[int], dict[int, list[ProbeSample]]]:
    probes: dict[int, list[ProbeSample]] = {}
    order = []
    while (n := next_n({k: assess(k, v, criteria).status for k, v in probes.items()}, max_n)) is not None:
        order.append(n)
        r = truth_rate(n)
        probes[n] = [sample(n, [r * (1 + d) for d in (-0.002, -0.001, 0, 0, 0.001, 0.002)], agg=r * n)]
    return order, probes


def step_law(base_s: float, per_seq_s: float):
    return lambda n: 1.0 / (base_s + per_seq_s * n)


@pytest.mark.parametrize("capacity", [0, 1, 2, 3, 5, 6, 7, 12, 31, 33, 63, 64])
def test_search_finds_the_analytic_capacity(capacity: int) -> None:
    # step = 4 ms + 1 ms x active: the floor sits halfway (in N) between capacity and capacity + 1
    law = step_law(0.004, 0.001)
    floor = law(capacity + 0.5)
    order, probes = search(law, Criteria(floor), max_n=64)
    a = analyse_capacity(probes, Criteria(floor), max_n=64)
    assert a.max_concurrency == capacity
    assert a.limit == ("max_n" if capacity == 64 else "user_rate")
    assert len(order) == len(set(order)) and len(order) <= 2 * math.ceil(math.log2(64)) + 1
    assert all(p.status == "pass" for p in a.points if p.n <= capacity)
    assert capacity == 64 or any(p.n == capacity + 1 and p.status == "fail" for p in a.points)


def test_doubling_is_capped_at_max_n() -> None:
    order, _ = search(lambda n: 100.0, Criteria(10.0), max_n=5)
    assert order == [1, 2, 4, 5]


@pytest.mark.parametrize(("statuses", "expected_held", "expected_limit"), [
    ({1: "fail"}, 0, "user_rate"),
    ({1: "uncertain"}, None, "undetermined"),
    ({1: "pass", 2: "pass", 4: "uncertain", 3: "pass"}, 3, "undetermined"),
    ({1: "pass", 2: "pass", 4: "fail", 3: "fail"}, 2, "user_rate"),
    ({1: "pass", 2: "pass"}, 2, "undetermined"),  # interrupted: 4 was never probed
    ({1: "pass", 2: "pass", 3: "pass"}, 3, "max_n"),
])
def test_held_and_limit(statuses, expected_held, expected_limit) -> None:
    rates: dict[str, list[float]] = {"pass": [60.0] * 6, "fail": [40.0] * 6, "uncertain": [45, 48, 50, 52, 55, 58]}
    points = [assess(n, [sample(n, rates[s])], FLOOR) for n, s in statuses.items()]
    assert held(points) == expected_held
    assert limit_of(points, held(points), max_n=3 if expected_limit == "max_n" else 64) == expected_limit


def test_a_ttft_failure_names_ttft() -> None:
    probes = {1: [sample(1, [60.0] * 6)], 2: [sample(2, [59.0] * 6, [0.9] * 6)]}
    a = analyse_capacity(probes, FLOOR, max_n=64)
    assert (a.max_concurrency, a.limit) == (1, "ttft")
    assert a.answer == ("holds 1 user at >= 50 tok/s each and a first token within 0.5 s (median); "
                        "the 2nd makes users wait 0.90 s for a first token")


# ---------------------------------------------------------------- the answer


def test_answer_line_in_the_issue_shape() -> None:
    probes = {n: [sample(n, [r] * 6, agg=r * n)]
              for n, r in ((1, 80.0), (2, 70.0), (4, 50.0), (8, 30.0), (6, 45.5), (5, 48.0))}
    a = analyse_capacity(probes, Criteria(47.0), max_n=64)
    assert a.answer == "holds 5 users at >= 47 tok/s each (median); the 6th drops each to 45.5 tok/s"
    assert (a.max_concurrency, a.limit, a.determined) == (5, "user_rate", True)


def test_a_floor_above_one_user_alone_is_zero_users_said_plainly() -> None:
    a = analyse_capacity({1: [sample(1, [30.0] * 6, agg=30.0)]}, Criteria(47.0), max_n=64)
    assert (a.max_concurrency, a.limit) == (0, "user_rate")
    assert a.answer == "holds 0 users: one user alone gets 30.0 tok/s (median), below the 47 tok/s floor"


def test_nothing_shown_is_null_and_undetermined() -> None:
    a = analyse_capacity({1: [sample(1, [45, 46, 47, 48, 49, 50])]}, Criteria(47.0), max_n=64)
    assert (a.max_concurrency, a.limit) == (None, "undetermined") and a.answer.code == "capacity.alone_undetermined"
    assert a.answer["why"].code == "capacity.rate_side" and a.answer["why"]["status"] == "uncertain"


def test_max_n_says_at_least() -> None:
    probes = {n: [sample(n, [100.0] * 6, agg=100.0 * n)] for n in (1, 2, 4)}
    a = analyse_capacity(probes, Criteria(47.0), max_n=4)
    assert (a.max_concurrency, a.limit) == (4, "max_n") and a.answer.code == "capacity.holds_up_to_max_n"
    assert (a.answer["held"], a.answer["max_n"]) == (4, 4)


# ---------------------------------------------------------------- what each user buys


def test_marginals_and_the_least_valuable_user() -> None:
    # seed 003's shape: the 2nd user buys +9%, the 4th buys a lot more
    aggs = {1: 100.0, 2: 109.0, 4: 139.0}
    probes = {n: [sample(n, [aggs[n] / n] * 6, agg=aggs[n])] for n in aggs}
    a = analyse_capacity(probes, Criteria(1.0), max_n=4)
    by_n = {m.n: m for m in a.marginals}
    assert by_n[2].gain_tok_s_per_user == pytest.approx(9.0) and by_n[2].aggregate_gain == pytest.approx(0.09)
    assert by_n[2].per_user_change == pytest.approx(-0.455)
    assert by_n[4].gain_tok_s_per_user == pytest.approx(15.0) and by_n[4].prev_n == 2
    assert a.least is not None and a.least.n == 2
    text = a.least.record().text
    assert isinstance(text, Reason) and text.code == "capacity.least_marginal"
    assert (text["prev_n"], text["n"]) == (1, 2) and text["gain_tok_s_per_user"] == pytest.approx(9.0)
    assert a.point_records()[1].marginal_gain_tok_s_per_user == pytest.approx(9.0)


@pytest.mark.parametrize(("end", "warned"), [(100.0, False), (103.0, False), (90.0, True), (110.0, True)])
def test_drift_is_warned_in_both_directions(end: float, warned: bool) -> None:
    probes = {1: [sample(1, [100.0] * 6, agg=100.0)], 2: [sample(2, [90.0] * 6, agg=180.0)]}
    a = analyse_capacity(probes, Criteria(10.0), max_n=2, baseline_end=sample(1, [end] * 6, agg=end))
    assert a.drift is not None and a.drift.change == pytest.approx(end / 100 - 1)
    assert any(isinstance(w.message, Reason) and w.message.code == "capacity.drift" for w in a.warnings) is warned
    assert DRIFT_LIMIT == 0.05


def test_non_monotone_curves_are_reported() -> None:
    probes = {1: [sample(1, [60.0] * 6)], 2: [sample(2, [40.0] * 6)], 3: [sample(3, [70.0] * 6)]}
    a = analyse_capacity(probes, FLOOR, max_n=3)
    kinds = {(x.kind, x.n_low, x.n_high) for x in a.non_monotone}
    assert ("status", 2, 3) in kinds and ("per_user_rate", 2, 3) in kinds and ("per_user_rate", 1, 3) in kinds
    assert a.max_concurrency == 1  # 3 passed, but not with every smaller N passing
    assert any(isinstance(w.message, Reason) and w.message.code == "capacity.non_monotone" for w in a.warnings)


@pytest.mark.parametrize(("n", "word"), [(1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"), (12, "12th"),
                                         (21, "21st"), (22, "22nd"), (113, "113th")])
def test_ordinal(n: int, word: str) -> None:
    assert ordinal(n) == word


# ---------------------------------------------------------------- a probe from request records


def record(index: int, send_ms: int, ttft_ms: int, tokens: int, step_ms: int,
           status: RequestStatus = "ok") -> RequestRecord:
    """A request for `tokens` sent at send_ms whose tokens, one an event, arrive every step_ms from ttft_ms
    after it; whole milliseconds, kept exactly."""
    first = (send_ms + ttft_ms) * MS
    times = tuple(first + i * step_ms * MS for i in range(tokens))
    return request_ns(index, send_ns=send_ms * MS, token_ns=times, tokens=tokens, status=status)


def closed_loop(n: int, per_lane: int, ttft_ms: int, tokens: int, step_ms: int) -> list[RequestRecord]:
    """n lanes in step, each sending its next request 1 ms after its last one ended."""
    out, index = [], 0
    for lane in range(n):
        t = lane  # the barrier releases them within a millisecond or so
        for _ in range(per_lane):
            r = record(index, t, ttft_ms, tokens, step_ms)
            out.append(r)
            index += 1
            t = (r.end_ns or 0) // MS + 1
    return sorted(out, key=lambda r: r.index)


def test_probe_discards_each_lanes_first_request_and_the_drain() -> None:
    records = closed_loop(n=2, per_lane=4, ttft_ms=20, tokens=11, step_ms=10)  # 120 ms per request
    s = probe_from_records(records, n=2, tokens_asked=11)
    assert s.discarded == 2 and s.requests == 8
    # lane 1's last request ends 1 ms after lane 0's: the window closes at lane 0's last end
    assert s.measured == 5
    assert all(r == pytest.approx(100.0) for r in s.rates_tok_s)  # 10 tokens in 100 ms
    assert all(t == pytest.approx(0.020) for t in s.ttfts_s)
    assert s.window_s is not None and records[4].end_ns is not None
    assert s.window_s[0] == pytest.approx(records[4].end_ns / NS_PER_S, abs=0.002)
    # two lanes, 11 tokens every 121 ms each
    assert s.aggregate_tok_s == pytest.approx(2 * 11 / 0.121, rel=0.08)
    assert s.failure is None and s.length_off == ()


def test_probe_names_failures_and_length_off() -> None:
    records = closed_loop(n=1, per_lane=4, ttft_ms=20, tokens=11, step_ms=10)
    records[2] = record(2, records[2].send_ns // MS, 20, 8, 10)  # stopped early: 8 of 11 tokens
    records[3] = RequestRecord(index=3, nonce="n3", status="error", tokens_requested=11, send_ns=records[3].send_ns,
                               http_status=503, error="HTTP 503: busy")
    s = probe_from_records(records, n=1, tokens_asked=11)
    assert s.failed == 1 and s.failure == "1 of 4 requests failed (error: HTTP 503: busy)"
    assert s.failure is not None and s.failure.code == "capacity.requests_failed"
    assert len(s.length_off) == 1 and s.length_off[0].code == "capacity.request_off_length"
    assert (s.length_off[0]["tokens"], s.length_off[0]["asked"]) == (8, 11)


def test_a_request_the_client_read_late_leaves_the_samples_and_is_named() -> None:
    """One steady request the client read 300 ms late: left out of the rates and TTFTs and named with
    how late; an N it leaves undecided says why. The control: the same records without the record of
    lateness keep all five."""
    records = closed_loop(n=2, per_lane=4, ttft_ms=20, tokens=11, step_ms=10)
    steady = steady_records(records, 2)[0][0]
    with_late = probe_from_records(records, n=2, tokens_asked=11, late={steady.index: 300.0})
    assert with_late.measured == 4 and len(with_late.ttfts_s) == 5  # its TTFT is judged by its own rule
    assert tuple(map(str, with_late.client_late)) == (f"request {steady.index} ({steady.nonce}): 300 ms",)
    assert probe_from_records(records, n=2, tokens_asked=11).measured == 5
    point = assess(2, [replace(with_late, rates_tok_s=())], Criteria(min_user_rate_tok_s=50.0))
    assert point.status == "uncertain" and "capacity.late_left_out" in set(point.reason.codes())


def test_the_warnings_name_what_was_left_out_each_with_its_fix() -> None:
    """A request off the asked length, one the prefix cache served and one a hop may have held are named
    in the warnings; an N whose interval is short of the level is named too, with why it is undecided."""
    records = closed_loop(n=1, per_lane=8, ttft_ms=20, tokens=11, step_ms=10)
    records[2] = record(2, records[2].send_ns // MS, 20, 8, 10)  # stopped early: 8 of 11 tokens
    records[3] = replace(records[3], server=ServerTimings(prompt_tokens=64, cached_prompt_tokens=60))
    one = probe_from_records(records, n=1, tokens_asked=11, held={records[4].index: 200.0})
    assert [r.code for r in one.contaminated] == ["capacity.request_cached"]
    assert [(r.code, r["held_ms"]) for r in one.hop_held] == [("capacity.request_held", 200.0)]
    two = replace(sample(2, [60.0, 61.0, 62.0]), hop_held=one.hop_held)  # held, its rate unknown: left out
    a = analyse_capacity({1: [one], 2: [two]}, Criteria(50.0), max_n=2)
    point = a.points[1]
    assert point.status == "uncertain" and point.reason.code == "joined"
    assert list(point.reason.codes()) == ["joined", "capacity.interval_short", "capacity.held_left_out"]
    said = {w.message.code: w for w in a.warnings if isinstance(w.message, Reason)}
    assert set(said) == {"capacity.length_trap", "capacity.contaminated", "capacity.hop_held",
                         "capacity.intervals_short"}
    assert as_reason(said["capacity.length_trap"].message)["requests"] == 1
    assert as_reason(said["capacity.intervals_short"].message)["ns"] == (2,)
    assert all(isinstance(w.hint, Reason) and w.hint.code == f"{code}_fix" for code, w in said.items())


def test_one_user_alone_failing_or_waiting_too_long_says_which() -> None:
    alone = sample(1, [60.0] * 6, failure="1 of 7 requests failed (error: HTTP 503: busy)")
    failed = analyse_capacity({1: [alone]}, FLOOR, max_n=4)
    assert failed.max_concurrency == 0 and failed.answer.code == "capacity.holds_none"
    assert failed.answer["alone"].code == "capacity.alone_fails"
    slow = analyse_capacity({1: [sample(1, [60.0] * 6, [0.9] * 6)]}, FLOOR, max_n=4)
    assert (slow.max_concurrency, slow.limit) == (0, "ttft")
    assert slow.answer == ("holds 0 users: one user alone waits 0.90 s for a first token (median), above the "
                           "0.5 s ceiling")
