"""Unit tests for the pure arms analysis, on hand-built cells with known answers."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from servecheck.analysis import arms as A
from servecheck.analysis.arms import findings as AF
from servecheck.model.codec import encode
from servecheck.model.reason import Reason
from servecheck.model.records import RequestRecord, ServerTimings
from factories import request_s
from written import as_reason

# --- helpers -------------------------------------------------------------------------------


def said(result: A.ArmsAnalysis) -> set[str]:
    """The reason codes of the result's warnings: each message's, and those of the reasons inside it."""
    return {code for w in result.warnings if isinstance(w.message, Reason) for code in w.message.codes()}


def make_cell(
    rep: int,
    position: int,
    concurrency: int,
    *,
    agg: float,
    gen: float,
    per_user: float,
    ttft: float,
    tokens: int = 720,
    requests: int = 4,
    run: int = 0,
) -> A.Cell:
    """A cell whose aggregate, generation-stage rate and per-user rate are exactly the given ones."""
    decode_tokens = tokens - requests
    union = decode_tokens / gen
    return A.Cell(
        rep=rep,
        position=position,
        concurrency=concurrency,
        wall_s=tokens / agg,
        tokens=tokens,
        decode_tokens=decode_tokens,
        decoding_union_s=union,
        decoding_sum_s=union * gen / per_user,
        per_user_rate_tok_s=per_user,
        ttft_s=ttft,
        start_s=10.0 * (rep * 3 + position),
        run=run,
    )


def wobble(rep: int, concurrency: int) -> float:
    """Deterministic noise so intervals have width: the whole rep moves +-2%, each arm +-0.2% within it."""
    return (1.0 + 0.01 * (((rep * 7) % 5) - 2)) * (1.0 + 0.002 * (((rep + concurrency) % 3) - 1))


# The seed's figures: serial 100 tok/s; 2-way +9% aggregate but the generation stage at 0.94x;
# 4-way +39% aggregate, generation stage 1.39x, each user at 35% of the serial rate, TTFT x2.8.
SEED_ARMS = {
    1: dict(agg=100.0, gen=100.0, per_user=100.0, ttft=0.20),
    2: dict(agg=109.0, gen=94.0, per_user=47.0, ttft=0.40),
    4: dict(agg=139.0, gen=139.0, per_user=35.0, ttft=0.56),
}


def seed_cells(reps: int = 10, *, fixed: bool = False) -> list[A.Cell]:
    cells = []
    for rep, pos, c in A.schedule([1, 2, 4], reps, fixed=fixed):
        w = wobble(rep, c)
        f = SEED_ARMS[c]
        cells.append(
            make_cell(rep, pos, c, agg=f["agg"] * w, gen=f["gen"] * w, per_user=f["per_user"] * w, ttft=f["ttft"] / w)
        )
    return cells


def rec(index: int, send_s: float, first_s: float, n_tokens: int, step_s: float, *,
        cached: int | None = None) -> RequestRecord:
    """A request for n_tokens with a 64-token prompt whose token events, one a token, arrive every `step_s`
    after the first; with `cached` the server said that many prompt tokens came from its cache."""
    return request_s(index, send_s=send_s, first_token_s=first_s, events=n_tokens, step_s=step_s, prompt_tokens=64,
                   server=None if cached is None else ServerTimings(cached_prompt_tokens=cached, prompt_tokens=64))


# --- the seed's worked example -------------------------------------------------------------


def test_seed_worked_figures() -> None:
    result = A.analyse_arms(seed_cells())
    two, four = result.arm(2), result.arm(4)
    assert four.aggregate_speedup is not None and two.aggregate_speedup is not None
    assert four.aggregate_speedup.median == pytest.approx(1.39, abs=0.01)
    assert two.aggregate_speedup.median == pytest.approx(1.09, abs=0.01)
    assert four.per_user_rate_change == pytest.approx(-0.65, abs=0.01)
    assert two.efficiency == pytest.approx(0.55, abs=0.01)
    assert four.efficiency == pytest.approx(0.35, abs=0.01)
    assert four.generation_gain is not None and two.generation_gain is not None
    assert four.generation_gain.median == pytest.approx(1.39, abs=0.01)
    assert two.generation_gain.median == pytest.approx(0.94, abs=0.01)
    assert four.ttft_multiple is not None and four.ttft_multiple.median == pytest.approx(2.8, abs=0.05)
    assert (result.arm(1).label, two.label, four.label) == ("none", "pipelining", "batching")
    assert not result.headline_refused
    assert result.headline == (
        "4-way concurrency buys the operator +39% throughput; it costs each user 65% of their "
        "generation rate and nearly triples the time to first token"
    )


def test_seed_generation_gain_equals_per_user_rate_times_mean_decoding() -> None:
    four = A.analyse_arms(seed_cells()).arm(4)
    one = A.analyse_arms(seed_cells()).arm(1)
    assert four.mean_decoding is not None and four.per_user_rate_tok_s and one.per_user_rate_tok_s
    equivalent = four.per_user_rate_tok_s * four.mean_decoding / one.per_user_rate_tok_s
    assert four.generation_gain is not None
    assert equivalent == pytest.approx(four.generation_gain.median, rel=0.02)


def test_json_shape_uses_ratios_and_signed_fractions() -> None:
    analysis = A.analyse_arms(seed_cells())
    four = encode(analysis.arm(4).record(), nulls=True)
    assert set(four) >= {"concurrency", "aggregate_speedup", "generation_gain", "per_user_rate_change", "ttft_multiple",
                         "efficiency", "label"}
    assert four["aggregate_speedup"] > 1 and four["per_user_rate_change"] < 0 and 0 < four["efficiency"] < 1
    assert analysis.headline_refused is False and analysis.deviant_cells == ()


# --- the queue trap ------------------------------------------------------------------------


def queue_cells() -> tuple[A.Cell, A.Cell]:
    """Four requests of 11 tokens at 100 tok/s each. Serial: sent one after another. Queue: all sent
    at once, but the server runs them one at a time, each at the solo rate once its turn comes: the
    same timeline, so the right answer is exactly 1x."""
    serial = [rec(i, i * 0.2, i * 0.2 + 0.1, 11, 0.01) for i in range(4)]
    queued = [rec(i, 0.0, i * 0.2 + 0.1, 11, 0.01) for i in range(4)]
    s = A.cell_from_records(serial, rep=0, position=0, concurrency=1, release_ns=0)
    q = A.cell_from_records(queued, rep=0, position=1, concurrency=4, release_ns=0)
    return s, q


def test_queue_trap_naive_formula_says_4x_right_one_says_1x() -> None:
    s, q = queue_cells()
    assert s.per_user_rate_tok_s == pytest.approx(100.0) and q.per_user_rate_tok_s == pytest.approx(100.0)
    assert q.per_user_rate_tok_s is not None and s.per_user_rate_tok_s is not None
    naive = q.per_user_rate_tok_s * q.concurrency / s.per_user_rate_tok_s
    assert naive == pytest.approx(4.0)
    assert q.generation_tok_s is not None and s.generation_tok_s is not None
    assert q.generation_tok_s / s.generation_tok_s == pytest.approx(1.0)
    assert q.mean_decoding == pytest.approx(1.0)


def test_queue_is_labelled_none() -> None:
    cells = []
    for rep in range(4):
        s, q = queue_cells()
        cells += [replace(s, rep=rep), replace(q, rep=rep)]
    result = A.analyse_arms(cells)
    assert result.arm(4).label == "none"
    gain = result.arm(4).generation_gain
    assert gain is not None
    assert gain.median == pytest.approx(1.0, abs=0.02)


def test_cell_from_records_counts_tokens_wall_and_ttft() -> None:
    s, q = queue_cells()
    assert s.tokens == 44 and s.decode_tokens == 40
    assert s.wall_s == pytest.approx(0.8)  # the last request's last token
    assert s.ttft_s == pytest.approx(0.1)
    assert q.ttft_s == pytest.approx(0.4)  # median of 0.1, 0.3, 0.5, 0.7
    assert s.decoding_union_s == pytest.approx(0.4) and q.decoding_union_s == pytest.approx(0.4)


# --- building blocks -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("intervals", "expected"),
    [
        ([], 0),
        ([(0, 10)], 10),
        ([(0, 10), (5, 15)], 15),
        ([(0, 10), (20, 30)], 20),
        ([(0, 30), (5, 10), (12, 14)], 30),
        ([(20, 30), (0, 10), (10, 20)], 30),
        ([(5, 5), (7, 3)], 0),
    ],
)
def test_union_length(intervals: list[tuple[int, int]], expected: int) -> None:
    assert A.union_length_ns(intervals) == expected


@pytest.mark.parametrize("reps", [3, 6, 12])
def test_rotation_balances_positions(reps: int) -> None:
    sched = A.schedule([1, 2, 4], reps)
    counts = Counter((c, pos) for _, pos, c in sched)
    assert set(counts.values()) == {reps // 3}
    assert len(counts) == 9
    assert all(sorted(c for r, _, c in sched if r == rep) == [1, 2, 4] for rep in range(reps))


def test_fixed_order_keeps_positions() -> None:
    assert {(c, pos) for _, pos, c in A.schedule([1, 2, 4], 5, fixed=True)} == {(1, 0), (2, 1), (4, 2)}


@pytest.mark.parametrize(("n_arms", "reps", "ok"), [(3, 12, True), (3, 10, False), (2, 4, True), (3, 1, False)])
def test_balanced(n_arms: int, reps: int, ok: bool) -> None:
    assert A.balanced(n_arms, reps) is ok


@pytest.mark.parametrize(
    ("agg", "gen", "label"),
    [
        ((1.39, 1.30, 1.45), (1.39, 1.30, 1.45), "batching"),
        ((1.09, 1.06, 1.12), (0.94, 0.90, 0.97), "pipelining"),
        # a generation interval straddling the rise threshold: neither its gain nor its absence is shown
        ((1.09, 1.06, 1.12), (1.04, 0.98, 1.10), "inconclusive"),
        ((2.15, 1.90, 2.40), (2.15, 0.97, 2.60), "inconclusive"),  # measured: 4-way on --parallel 4, busy
        ((1.02, 0.99, 1.05), (1.00, 0.97, 1.03), "none"),
        ((1.03, 1.01, 1.05), (1.00, 0.97, 1.03), "none"),  # interval above 1, but under MIN_RISE
        ((1.30, 0.95, 1.60), (1.30, 0.95, 1.60), "inconclusive"),  # too noisy to call either way
        ((1.04, 0.99, 1.12), (1.00, 0.97, 1.03), "inconclusive"),  # no rise shown, nor its absence
        ((0.90, 0.85, 0.95), (1.20, 1.10, 1.30), "none"),  # the operator gets nothing
    ],
)
def test_label_arm(agg: tuple[float, float, float], gen: tuple[float, float, float], label: str) -> None:
    assert A.label_arm(A.Estimate(*agg, 10), A.Estimate(*gen, 10)) == label


def test_median_interval_brackets_median() -> None:
    values = [1.1, 1.3, 1.2, 1.25, 1.15, 1.4]
    a = A.median_interval(values)
    assert a == A.median_interval(list(reversed(values)))
    assert a.lo <= a.median <= a.hi and a.lo >= min(values) and a.hi <= max(values)
    assert A.median_interval([2.0]) == A.Estimate(2.0, 2.0, 2.0, 1, 0.0)


@pytest.mark.parametrize(
    ("n", "k", "level"),
    [
        (2, 1, 0.5),  # [min, max] of two covers the median half the time
        (3, 1, 0.75),
        (5, 1, 0.9375),
        (6, 1, 0.96875),  # the first n that reaches 95%
        (9, 2, 0.9609375),
        (12, 3, 0.96142578125),  # [x(3), x(10)]
        (20, 6, 0.9586105346679688),
    ],
)
def test_order_statistic_interval_and_its_exact_level(n: int, k: int, level: float) -> None:
    """Coverage of [x(k), x(n+1-k)] is 1 - 2 P(Binomial(n, 1/2) < k): the textbook table."""
    est = A.median_interval([float(i) for i in range(1, n + 1)])
    assert (est.lo, est.hi) == (float(k), float(n + 1 - k))
    assert est.level == pytest.approx(level)


def test_interval_level_of_the_arms_estimates() -> None:
    four = A.analyse_arms(seed_cells(3)).arm(4).aggregate_speedup
    assert four is not None and four.level == pytest.approx(0.75) == A.interval_level(3)
    four = A.analyse_arms(seed_cells(12)).arm(4).aggregate_speedup
    assert four is not None and four.level > 0.95 and A.interval_level(0) == 0.0


@pytest.mark.parametrize(
    ("multiple", "words"),
    [
        (2.8, "nearly triples the time to first token"),
        (3.05, "triples the time to first token"),
        (2.0, "doubles the time to first token"),
        (1.05, "leaves the time to first token about unchanged"),
        (2.4, "multiplies the time to first token by 2.4"),
        (0.5, "cuts the time to first token to 0.50x"),
    ],
)
def test_ttft_words(multiple: float, words: str) -> None:
    assert str(Reason("arms.ttft", multiple=multiple, reading=AF.ttft_reading(multiple))) == words


@pytest.mark.parametrize(("multiple", "reading"), [
    (0.5, "cut"), (0.8999, "cut"), (0.9, "unchanged"), (1.1499, "unchanged"), (1.15, "more"), (3.0, "more"),
])
def test_the_analysis_decides_what_a_ttft_multiple_claims(multiple: float, reading: str) -> None:
    assert AF.ttft_reading(multiple) == reading


# --- checks --------------------------------------------------------------------------------


def test_position_bias_refusal_names_arm_and_spread() -> None:
    cells = []
    for rep, pos, c in A.schedule([1, 2, 4], 6):
        f = SEED_ARMS[c]
        penalty = 0.8 if (c == 4 and pos == 2) else 1.0  # 4-way loses 20% whenever it runs last
        cells.append(make_cell(rep, pos, c, agg=f["agg"] * penalty, gen=f["gen"], per_user=f["per_user"],
                               ttft=f["ttft"]))
    result = A.analyse_arms(cells)
    assert result.headline_refused and result.headline is None
    assert result.position_bias is not None and result.position_bias.concurrency == 4
    assert result.position_bias.spread == pytest.approx(0.25, abs=0.03)
    assert result.refusal is not None and result.refusal.code == "arms.withheld"
    assert result.refusal["concurrency"] == 4 and result.refusal["spread"] == pytest.approx(0.25, abs=0.03)
    assert result.refusal["method"] == "positions" and result.refusal["limit"] == A.DEFAULT_BIAS_LIMIT


def test_position_bias_limit_is_configurable() -> None:
    cells = []
    for rep, pos, c in A.schedule([1, 2, 4], 6):
        f = SEED_ARMS[c]
        penalty = 0.93 if (c == 2 and pos == 0) else 1.0
        cells.append(make_cell(rep, pos, c, agg=f["agg"] * penalty, gen=f["gen"], per_user=f["per_user"],
                               ttft=f["ttft"]))
    assert not A.analyse_arms(cells).headline_refused
    assert A.analyse_arms(cells, bias_limit=0.05).headline_refused


def test_balanced_seed_run_has_small_spread() -> None:
    bias = A.position_bias(seed_cells(12))
    assert bias is not None and bias.method == "positions" and bias.spread < 0.03


def drifting_cells(*, fixed: bool, loss_per_cell: float, reps: int = 6) -> list[A.Cell]:
    cells = []
    for k, (rep, pos, c) in enumerate(A.schedule([1, 2, 4], reps, fixed=fixed)):
        f = SEED_ARMS[c]
        slow = (1.0 - loss_per_cell) ** k
        cells.append(make_cell(rep, pos, c, agg=f["agg"] * slow, gen=f["gen"] * slow, per_user=f["per_user"] * slow,
                               ttft=f["ttft"]))
    return cells


def test_fixed_order_under_drift_is_refused() -> None:
    result = A.analyse_arms(drifting_cells(fixed=True, loss_per_cell=0.06))
    assert result.position_bias is not None and result.position_bias.method == "drift"
    assert result.position_bias.concurrency == 4
    assert result.headline_refused
    assert result.drift is not None and result.drift.loss > 0.3


def test_fixed_order_without_drift_is_not_refused() -> None:
    result = A.analyse_arms(drifting_cells(fixed=True, loss_per_cell=0.0))
    assert not result.headline_refused
    assert result.position_bias is not None and result.position_bias.spread == pytest.approx(0.0, abs=1e-9)


def test_rotated_order_under_drift_keeps_estimates() -> None:
    result = A.analyse_arms(drifting_cells(fixed=False, loss_per_cell=0.02))
    four = result.arm(4)
    assert four.aggregate_speedup is not None
    assert four.aggregate_speedup.median == pytest.approx(1.39, rel=0.06)
    assert "arms.drift_lost" in said(result)


def test_deviant_cell_named_and_throughput_uses_tokens_produced() -> None:
    cells = seed_cells(3)
    odd = cells[4]
    cells[4] = replace(odd, tokens=933)
    result = A.analyse_arms(cells)
    assert [(d.rep, d.concurrency, d.tokens, d.modal_tokens) for d in result.deviant_cells] == [
        (odd.rep, odd.concurrency, 933, 720)
    ]
    assert cells[4].aggregate_tok_s == pytest.approx(933 / odd.wall_s)
    assert {"arms.output_length_trap", "arms.deviant_cell"} <= said(result)


def test_deviant_cells_use_each_runs_own_mode() -> None:
    a = [make_cell(r, 0, 1, agg=100, gen=100, per_user=100, ttft=0.1, tokens=720, run=0) for r in range(3)]
    b = [make_cell(r, 0, 1, agg=100, gen=100, per_user=100, ttft=0.1, tokens=180, run=1) for r in range(3)]
    assert A.deviant_cells(a + b) == []


def test_pooled_runs_pair_reps_within_their_run() -> None:
    run0 = seed_cells(3)
    run1 = [replace(c, run=1) for c in seed_cells(3)]
    assert len(A.within_rep_ratios(run0 + run1, 4, "aggregate_tok_s")) == 6


def test_analyse_needs_serial_arm() -> None:
    with pytest.raises(ValueError):
        A.analyse_arms([make_cell(0, 0, 2, agg=1, gen=1, per_user=1, ttft=1)])


def test_cached_prompt_suspects_named_beyond_allowance() -> None:
    records = [(0, 4, rec(0, 0, 0.1, 4, 0.01, cached=1)), (1, 2, rec(3, 0, 0.1, 4, 0.01, cached=40)),
               (0, 1, rec(1, 0, 0.1, 4, 0.01))]
    named = A.cached_prompt_suspects(records)
    assert [(r.code, r["rep"], r["concurrency"], r["request"], r["cached"]) for r in named] == [
        ("arms.cached_prompt", 1, 2, 3, 40)]


@pytest.mark.parametrize(
    ("speedup", "rate", "ttft", "text"),
    [
        (1.39, 0.35, 2.8,
         "4-way concurrency buys the operator +39% throughput; it costs each user 65% of their generation rate and "
         "nearly triples the time to first token"),
        (1.01, 1.005, 2.0,
         "4-way concurrency buys the operator +1% throughput; it leaves each user's generation rate about unchanged "
         "and doubles the time to first token"),
        (0.9, 1.2, 1.0,
         "4-way concurrency costs the operator 10% throughput; it gives each user +20% generation rate and leaves the "
         "time to first token about unchanged"),
    ],
)
def test_headline_words(speedup: float, rate: float, ttft: float, text: str) -> None:
    est = lambda m: A.Estimate(m, m, m, 3)  # noqa: E731
    arm = A.ArmResult(4, 3, None, None, None, None, None, est(speedup), est(speedup), est(rate), est(ttft), "none")
    assert A.headline(arm) == text


# --- too few reps for an interval ----------------------------------------------------------


@pytest.mark.parametrize("reps", [1, 2])
def test_too_few_reps_label_nothing_and_say_why(reps: int) -> None:
    """One rep gives a zero-width 'interval' and two give [min, max]: neither can show a rise."""
    result = A.analyse_arms(seed_cells(reps))
    assert [a.label for a in result.arms] == ["none", "inconclusive", "inconclusive"]
    assert "arms.too_few_paired" in said(result)


def test_three_reps_are_enough_to_label() -> None:
    result = A.analyse_arms(seed_cells(3))
    assert (result.arm(2).label, result.arm(4).label) == ("pipelining", "batching")
    assert not {"arms.too_few_paired", "arms.too_few_reps"} & said(result)


def test_an_arm_without_its_evidence_says_which_is_missing() -> None:
    label, reason = A.label_with_reason(None, None)
    assert (label, str(reason)) == ("inconclusive", "no rep pairs this arm with the serial arm")
    label, reason = A.label_with_reason(A.Estimate(1.39, 1.30, 1.45, 3), None)
    assert label == "inconclusive" and reason.code == "arms.generation_unmeasured"
    assert reason["aggregate"]["median"] == 1.39


def test_label_arm_needs_enough_reps() -> None:
    assert A.label_arm(A.Estimate(1.39, 1.39, 1.39, 1), A.Estimate(1.39, 1.39, 1.39, 1)) == "inconclusive"
    assert A.label_arm(A.Estimate(1.39, 1.30, 1.45, 3), A.Estimate(1.39, 1.30, 1.45, 3)) == "batching"


# --- pooled runs keep their own clocks -----------------------------------------------------


def two_steady_runs(*, fixed: bool) -> list[A.Cell]:
    """Two runs without any drift, the second 20% slower throughout (another day, another load) and
    started a little later on its own clock: sorting their cells together by time fakes a trend."""
    first = seed_cells(6, fixed=fixed)
    second = [
        replace(c, run=1, wall_s=c.wall_s / 0.8, decoding_union_s=c.decoding_union_s / 0.8, start_s=c.start_s + 5.0)
        for c in seed_cells(6, fixed=fixed)
    ]
    return first + second


def test_drift_is_measured_within_each_run() -> None:
    result = A.analyse_arms(two_steady_runs(fixed=False))
    assert result.drift is not None and abs(result.drift.loss) < 0.05
    assert "arms.drift_lost" not in said(result)


def test_fixed_order_drift_bias_ignores_the_level_between_runs() -> None:
    result = A.analyse_arms(two_steady_runs(fixed=True))
    assert result.position_bias is not None and result.position_bias.method == "drift"
    assert result.position_bias.spread < 0.02 and not result.headline_refused


def test_drift_names_the_run_that_lost_most() -> None:
    steady = seed_cells(6)
    heating = [replace(c, run=1) for c in drifting_cells(fixed=False, loss_per_cell=0.02)]
    d = A.analyse_arms(steady + heating).drift
    assert d is not None and d.run == 1 and d.loss > 0.2 and d.record().run == 1


def test_a_noisy_generation_gain_is_inconclusive_not_pipelining() -> None:
    """The aggregate clearly rises; the generation stage's median is up too, but its interval reaches
    below 1: neither batching nor pipelining is shown, so the arm is inconclusive and says why."""
    cells = []
    for rep, pos, c in A.schedule([1, 2], 6):
        swing = 1.0 if c == 1 else (0.9, 1.6, 1.3, 0.95, 1.5, 1.35)[rep]
        cells.append(make_cell(rep, pos, c, agg=100.0 if c == 1 else 150.0, gen=100.0 * swing, per_user=100.0,
                               ttft=0.2))
    result = A.analyse_arms(cells)
    two = result.arm(2)
    assert two.label == "inconclusive" and two.generation_gain is not None and two.generation_gain.median > A.MIN_RISE
    assert isinstance(two.label_reason, Reason)
    assert two.label_reason.code == "arms.unsure_generation" and two.label_reason["rise"] == A.MIN_RISE
    assert any(as_reason(w.message).code == "arms.inconclusive" and as_reason(w.message)["concurrency"] == 2
               for w in result.warnings)
    clean = A.analyse_arms(seed_cells())  # 0.94x: the generation stage is shown not to gain, clean pipelining
    assert clean.arm(2).label == "pipelining" and "arms.inconclusive" not in said(clean)


# --- --evidence stopwatch: the gauges never decide a label -----------------------------------


def _queue_behind_gauges() -> list[A.Cell]:
    """A serial server under load: the 2-way aggregate wanders 0.95-1.14x (handoffs without a client
    round trip, and noise), the generation stage is flat, and its gauges saw one request running in
    every cell."""
    noise = [0.95, 1.14, 0.99, 1.08, 0.97, 1.12, 1.02, 1.10, 0.96, 1.07, 1.00, 1.13]
    cells = []
    for rep, pos, c in A.schedule([1, 2], len(noise)):
        agg = 100.0 * (noise[rep] if c == 2 else 1.0)
        cell = make_cell(rep, pos, c, agg=agg, gen=100.0 * wobble(rep, c), per_user=100.0 / c, ttft=0.2 * c)
        cells.append(replace(cell, peak_running=1))
    return cells


def test_evidence_stopwatch_keeps_the_gauges_from_deciding_none() -> None:
    cells = _queue_behind_gauges()
    by_gauges = A.analyse_arms(cells).arm(2)
    assert by_gauges.label == "none" and as_reason(by_gauges.label_reason).code == "arms.one_running"
    stopwatch = A.analyse_arms(cells, gauges_decide=False).arm(2)
    assert stopwatch.label == "inconclusive", stopwatch.label_reason
    assert not {"arms.one_running", "arms.gauges_disagree"} & set(as_reason(stopwatch.label_reason).codes())
    assert stopwatch.aggregate_speedup == by_gauges.aggregate_speedup  # the same measurement, read without them


# --- the client's own lateness -------------------------------------------------------------


def test_late_reads_that_cannot_change_a_label_are_kept_and_said() -> None:
    """One 4-way cell read 20 ms late: whatever its reads' true times within 20 ms, every label is the
    same, so the rep stays in (ten paired reps) and a warning says what was kept and why."""
    cells = [replace(c, client_late_ms=20.0) if (c.rep, c.concurrency) == (3, 4) else c for c in seed_cells(10)]
    result = A.analyse_arms(cells)
    four = result.arm(4)
    assert four.aggregate_speedup is not None and four.aggregate_speedup.n == 10 and four.label == "batching"
    assert any(as_reason(w.message).code == "arms.late_kept" and as_reason(w.message)["reps"] == 1
               for w in result.warnings)


def test_a_late_rep_that_could_change_a_label_is_left_out_and_named() -> None:
    """Three reps, the 2-way cell of one read 3 s late: at the far end of its true time the 2-way arm
    reads differently, so that rep leaves the ratios; two paired reps are too few to label, and the
    reason names the client. The control: without the record the same times label the arm."""
    cells = [replace(c, client_late_ms=3000.0) if (c.rep, c.concurrency) == (0, 2) else c for c in seed_cells(3)]
    assert not A.labels_stand(cells)
    result = A.analyse_arms(cells)
    two = result.arm(2)
    assert two.label == "inconclusive" and two.aggregate_speedup is not None and two.aggregate_speedup.n == 2
    assert {"arms.too_few_reps", "arms.late_left_out"} <= set(as_reason(two.label_reason).codes())
    assert any(as_reason(w.message).code == "arms.client_late"
               and (as_reason(w.message)["reps"], as_reason(w.message)["late_ms"]) == (1, 3000.0)
               for w in result.warnings)
    assert A.analyse_arms([replace(c, client_late_ms=0.0) for c in cells]).arm(2).label == "pipelining"


def test_the_cell_records_its_lateness_only_when_late() -> None:
    c = seed_cells(1)[0]
    assert encode(c.record(deviant=False)).get("client_late_ms") is None
    assert encode(replace(c, client_late_ms=12.5).record(deviant=False))["client_late_ms"] == 12.5
