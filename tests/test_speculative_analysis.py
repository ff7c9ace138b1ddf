"""The speculative analysis on hand-built arrival times whose answer is known exactly."""

from __future__ import annotations

import pytest

from dataclasses import replace
from functools import partial

from servecheck.analysis import speculative as sp
from servecheck.model.client import ClientLateness
from servecheck.model.reason import Reason
from factories import NEVER_LATE

# A client that read every event on time (a hand-built stream has no client to be late).
Stream = partial(sp.Stream, lateness=NEVER_LATE)

STEP_NS = 10_000_000  # 10 ms per decode step
WRITE_NS = 20_000  # 20 µs between the tokens of one step


def arrivals(steps: list[int], *, step_ns: int = STEP_NS, write_ns: int = WRITE_NS,
             jitter: list[int] | None = None) -> tuple[int, ...]:
    """The prompt's token at 0, then each step's tokens back to back, steps a step time apart."""
    out = [0]
    t = 0
    for i, size in enumerate(steps):
        t += step_ns + (jitter[i % len(jitter)] if jitter else 0)
        out += [t + k * write_ns for k in range(size)]
        t = out[-1]
    return tuple(out)


def stream(steps: list[int], **kw: object) -> sp.Stream:
    times = arrivals(steps, **kw)  # type: ignore[arg-type]
    return Stream(arrivals_ns=times, tokens=len(times))


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ([1] * 40, [1] * 39),  # no speculation: every event its own step
        ([2] * 40, [2] * 39),
        ([3, 1] * 20, [3, 1] * 19 + [3]),
        ([8] * 20, [8] * 19),  # verbatim repetition: most gaps are inside a step
        ([1, 1, 1, 5] * 10, ([1, 1, 1, 5] * 10)[:-1]),
    ],
)
def test_grouping_recovers_the_steps(steps: list[int], expected: list[int]) -> None:
    g = sp.group_steps(stream(steps))
    assert g.problem is None
    assert list(g.steps) == expected  # the last step is left out (the length limit may cut it)
    assert g.step_ns == pytest.approx(STEP_NS, rel=0.01)


def test_step_jitter_within_a_mode_does_not_split_or_join() -> None:
    jitter = [-2_000_000, 0, 3_000_000, -1_000_000]  # +-30% swing of the step time
    g = sp.group_steps(stream([2] * 40, jitter=jitter))
    assert g.problem is None and set(g.steps) == {2}


def test_slow_writes_inside_steps_do_not_become_the_step_time() -> None:
    """A busy client: half the writes inside a step read 20 µs apart, half 500 µs (a third gap mode below the
    steps). The step boundaries are the top mode, not the widest jump."""
    out, t = [0], 0
    for _ in range(30):
        t += STEP_NS
        out.append(t)
        for k in range(4):
            t += 20_000 if k % 2 else 500_000
            out.append(t)
    g = sp.group_steps(Stream(tuple(out), tokens=len(out)))
    assert g.problem is None and set(g.steps) == {5}
    assert g.step_ns == pytest.approx(STEP_NS, rel=0.01)


def test_two_client_stalls_are_not_taken_for_the_step_time() -> None:
    times = list(arrivals([1] * 40))
    for i in (10, 25):  # two 200 ms holes: a jump, but only two gaps above it
        times[i:] = [t + 200_000_000 for t in times[i:]]
    g = sp.group_steps(Stream(tuple(times), tokens=len(times)))
    assert g.problem is None
    assert set(g.steps) == {1}


def test_output_held_back_and_sent_with_the_next_token_is_not_a_step() -> None:
    """No speculation, but every tenth token is held one step (a partial UTF-8 character) and sent with the
    next: a pair after two step times is two steps of one."""
    times = list(arrivals([1] * 60))
    for i in range(10, 60, 10):
        times[i] = times[i + 1] - WRITE_NS
    g = sp.group_steps(Stream(tuple(times), tokens=len(times)))
    assert g.problem is None and set(g.steps) == {1}
    assert isinstance(g.method, Reason) and g.method.code == "speculative.split" and g.method["held"] == 5


def spell(steps: list[int], slow: range, factor: float) -> list[int]:
    """Arrivals as `arrivals`, the steps in `slow` taking `factor` step times (a busy machine's spell)."""
    out, t = [0], 0
    for i, size in enumerate(steps):
        t += int(STEP_NS * (factor if i in slow else 1.0))
        out += [t + k * WRITE_NS for k in range(size)]
        t = out[-1]
    return out


def test_a_real_step_inside_a_slow_spell_is_not_held_back_output() -> None:
    """Two tokens a step; ten steps in the middle take 1.7 step times. Against the stream's step time they
    open late enough to look held back (1.7 >= 1.5); against their neighbours they are ordinary steps."""
    times = spell([2] * 40, range(15, 25), 1.7)
    g = sp.group_steps(Stream(tuple(times), tokens=len(times)))
    assert g.problem is None and set(g.steps) == {2}
    assert g.steps_stream_wide.count(1) >= 16  # the stream-wide reading took most of the spell apart
    est = sp.estimate([g])
    assert est.tokens_per_step == 2.0 and est.verdict == "speculating"
    wide_mean = sum(g.steps_stream_wide) / len(g.steps_stream_wide)
    assert est.interval is not None and est.interval[0] < wide_mean  # the interval covers both readings
    assert est.reason.code == "speculative.both_readings" and est.reason["wide_mean"] == pytest.approx(wide_mean)
    assert est.reason["mean"] == 2.0


def test_a_catch_up_inside_a_slow_spell_is_still_two_steps() -> None:
    """No speculation; in a slow spell the client missed one step and read two events back to back: the
    pair opens after two of its neighbours' step times and reads as two steps of one."""
    times = spell([1] * 60, range(20, 35), 1.7)
    times[28] = times[29] - WRITE_NS
    g = sp.group_steps(Stream(tuple(times), tokens=len(times)))
    assert g.problem is None and set(g.steps) == {1} and set(g.steps_stream_wide) == {1}
    assert sp.estimate([g]).verdict == "not_speculating"


def test_several_tokens_per_event_come_from_the_stream() -> None:
    steps = [3] * 30
    times = tuple(arrivals([1] * 30))  # one event per step, each carrying three ids
    sizes = (1,) + (3,) * 30
    g = sp.group_steps(Stream(times, event_tokens=sizes, tokens=sum(sizes)))
    assert g.problem is None and list(g.steps) == steps[:-1]


@pytest.mark.parametrize(
    ("build", "problem", "values"),
    [
        (lambda: Stream((5_000_000,), tokens=256), "speculative.not_streamed", {"tokens": 256, "events": 1}),
        (lambda: Stream(arrivals([1] * 60)[:20:2], tokens=256), "speculative.events_unsized", {"events": 10}),
        (lambda: stream([1] * 6), "speculative.too_few_events", {"events": 7}),
        (lambda: stream([1] * 40, step_ns=50_000, write_ns=10), "speculative.one_burst", {"max_gap_us": 50.0}),
        # a 3 ms gap after a 10 ms one: no late arrival (those sum to two steps) and no write inside a step
        (lambda: stream([1] * 40, jitter=[-7_000_000, 0, 0]), "speculative.too_noisy", {"client": False}),
    ],
)
def test_what_cannot_be_grouped_is_named(build: object, problem: str, values: dict[str, object]) -> None:
    g = sp.group_steps(build())  # type: ignore[operator]
    assert isinstance(g.problem, Reason) and g.problem.code == problem
    assert {name: g.problem[name] for name in values} == values
    assert not g.steps


@pytest.mark.parametrize(
    ("steps", "verdict", "mean"),
    [
        ([1] * 80, "not_speculating", 1.0),
        ([2] * 80, "speculating", 2.0),
        ([1, 2] * 40, "speculating", 1.5),
        ([1] * 9 + [2], "inconclusive", 1.1),  # 1.1 per step: neither clearly 1 nor clearly above
    ],
)
def test_estimate_and_verdict(steps: list[int], verdict: str, mean: float) -> None:
    groups = [sp.Grouping(steps=tuple(steps * (8 if len(steps) < 20 else 1)))]
    est = sp.estimate(groups)
    assert est.verdict == verdict
    assert est.tokens_per_step == pytest.approx(mean)
    lo, hi = est.interval  # type: ignore[misc]
    assert lo <= mean <= hi
    if verdict == "speculating":
        assert lo >= sp.SPECULATING_LO
    if verdict == "not_speculating":
        assert hi <= sp.NOT_SPECULATING_HI


def test_estimate_without_steps_names_why() -> None:
    burst = Reason("speculative.one_burst", max_gap_us=1.0)
    est = sp.estimate([sp.Grouping(problem=burst)])
    assert est.verdict == "inconclusive" and est.tokens_per_step is None
    assert est.reason.code == "speculative.no_estimate" and est.reason["problem"] is burst and est.problems == (burst,)


@pytest.mark.parametrize(
    ("words", "kinds", "verdict", "because", "values"),
    [
        # a draft that fails on open-ended text and works on repetition: speculating, from the kind that shows it
        (["not_speculating", "speculating"], ["unpredictable", "predictable"], "speculating",
         "speculative.speculating_run", {"speculating": 1, "points": 1, "kind": "predictable"}),
        (["speculating", "speculating"], ["predictable", "predictable"], "speculating", "speculative.speculating_run",
         {"speculating": 2, "points": 2}),
        (["speculating", "inconclusive"], ["predictable", "predictable"], "speculating", "speculative.speculating_run",
         {"speculating": 1, "points": 2}),
        # one point alone does not make the run: its kind's other points must not read one token per step
        (["not_speculating", "speculating"], ["predictable", "predictable"], "inconclusive",
         "speculative.points_disagree", {"speculating": 1, "one": 1, "undecided": 0}),
        # nor may it stand alone among undecided ones (less than half of its kind decided)
        (["speculating", "inconclusive", "inconclusive"], ["predictable"] * 3, "inconclusive",
         "speculative.points_disagree", {"undecided": 2}),
        (["not_speculating", "not_speculating"], ["predictable", "unpredictable"], "not_speculating",
         "speculative.not_speculating_run", {}),
        # else the first undecided point's own reason
        (["not_speculating", "inconclusive"], ["predictable", "predictable"], "inconclusive", "speculative.steps_open",
         {"lo": 1.0, "hi": 1.2}),
    ],
)
def test_run_verdict(words: list[str], kinds: list[str], verdict: str, because: str, values: dict[str, object]) -> None:
    spans = {"speculating": (1.5, 1.6), "not_speculating": (1.0, 1.0), "inconclusive": (1.0, 1.2)}
    ests = [sp.Estimate(1.0, spans[w], 10, 1, 1, w, sp.judge(*spans[w])[1]) for w in words]  # type: ignore[arg-type]
    got, reason = sp.run_verdict(ests, kinds)
    assert got == verdict and reason.code == because
    assert {name: reason[name] for name in values} == values


@pytest.mark.parametrize(
    ("rates", "base", "verdict"),
    [
        ([200, 202, 198], [100, 101, 99], "pays"),
        ([82, 81, 83], [100, 101, 99], "costs"),
        ([100, 101, 99], [100, 101, 99], "inconclusive"),
        ([150, 60, 120], [100, 101, 99], "inconclusive"),  # too noisy to tell
        ([150], [100, 101], "inconclusive"),  # one stream: no interval
    ],
)
def test_pays(rates: list[float], base: list[float], verdict: str) -> None:
    p = sp.pays(rates, base)
    assert p.verdict == verdict
    if len(rates) > 1:
        assert p.ratio == pytest.approx(sum(rates) / len(rates) / (sum(base) / len(base)))


def _point(rates: list[float], base: list[float] | None, extra_reps: int = 0) -> sp.SpecPointAnalysis:
    return sp.analyse_point(1, "predictable", [], failed=0, rates=rates, aggregates=[], baseline_rates=base,
                            extra_reps=extra_reps)


@pytest.mark.parametrize(
    ("rates", "base", "extra", "undecided", "repeated"),
    [
        ([82, 81, 83], [100, 101, 99], 0, False, False),  # decided at the planned reps: nothing added
        ([150, 60, 120], [100, 101, 99], 0, True, False),  # straddles: another pair could decide it
        ([150], [100, 101], 0, True, False),  # one stream: no interval yet
        ([82, 81, 83], [100, 101, 99], 2, False, True),  # decided after 2 more reps: the planned ones left it open
        ([150, 60, 120], [100, 101, 99], 3, True, True),  # still open after 3 more, the most --max-reps allowed
        ([82, 81, 83], None, 0, False, False),  # no baseline: no pays / costs to repeat
    ],
)
def test_an_undecided_pays_is_the_analysis_answer_and_its_reason_counts_the_extra_reps(
        rates: list[float], base: list[float] | None, extra: int, undecided: bool, repeated: bool) -> None:
    point = _point(rates, base, extra)
    assert sp.pays_undecided(point) is undecided
    record = point.record()
    assert record.extra_reps == (None if base is None else extra)
    reason = record.pays_reason
    if not repeated:
        assert reason is None or (isinstance(reason, Reason) and reason.code != "speculative.repeated")
    else:
        assert isinstance(reason, Reason) and reason.code == "speculative.repeated"
        assert (reason["extra_reps"], reason["still_open"]) == (extra, undecided)
        assert point.paid is not None and reason["pays_reason"] is not None


@pytest.mark.parametrize(
    ("by_n", "n"),
    [
        ({1: "pays", 2: "pays", 4: "costs"}, 4),
        ({1: "pays", 2: "inconclusive", 4: "costs"}, 2),
        ({1: "pays", 2: "pays"}, None),
        ({1: "costs", 2: "costs"}, None),
    ],
)
def test_stops_paying(by_n: dict[int, str], n: int | None) -> None:
    assert sp.stops_paying(by_n)[0] == n  # type: ignore[arg-type]


def test_server_counters_give_one_plus_accepted_per_step() -> None:
    # 257 tokens: 256 after the first, in 128 steps of 2 -> 128 accepted draft tokens out of 512 drafted (draft 4).
    s = Stream((), tokens=257, draft_n=512, draft_accepted=128, server_generated=257)
    tps, acceptance = sp.server_tokens_per_step([s])
    assert tps == pytest.approx(2.0) and acceptance == pytest.approx(0.25)
    est = sp.Estimate(1.9, (1.8, 2.0), 100, 1, 1, "speculating", "")  # type: ignore[arg-type]  # reason unread here
    assert sp.check_counters([s], est).agrees is True
    far = sp.Estimate(1.2, (1.16, 1.24), 100, 1, 1, "speculating", "")  # type: ignore[arg-type]  # reason unread here
    check = sp.check_counters([s], far)
    assert check.agrees is False and check.note.code == "speculative.counters_disagree"
    assert check.note["off"] == pytest.approx(1.2 / 2.0 - 1)


def test_no_counters_is_said_not_guessed() -> None:
    est = sp.Estimate(1.0, (1.0, 1.0), 10, 1, 1, "not_speculating", "")  # type: ignore[arg-type]  # reason unread here
    check = sp.check_counters([Stream((), tokens=10)], est)
    assert check.agrees is None and check.server_tokens_per_step is None


def test_vllm_counters_give_one_plus_accepted_per_draft() -> None:
    """vLLM counts drafts (speculative steps), draft tokens and accepted tokens: 40 steps drafting 3 each,
    60 accepted, is 2.5 tokens per step at 50% acceptance."""
    d = sp.MetricDeltas(drafts=40, draft_tokens=120, accepted=60)
    assert sp.metric_tokens_per_step(d) == (2.5, 0.5)
    assert sp.metric_tokens_per_step(sp.MetricDeltas(0, 0, 0)) == (None, None)  # nothing drafted
    assert sp.metric_tokens_per_step(sp.MetricDeltas(10, 5, 9)) == (None, None)  # more accepted than drafted
    est = sp.estimate([sp.group_steps(stream([3, 2] * 20))])
    agree = sp.check_counters([], est, d)
    assert agree.server_tokens_per_step == 2.5 and agree.agrees is True and agree.acceptance == 0.5
    off = sp.check_counters([], est, sp.MetricDeltas(drafts=40, draft_tokens=120, accepted=120))
    assert off.agrees is False and off.note.code == "speculative.counters_disagree" and off.note["server"] == 4.0
    assert est.verdict == "speculating"  # the witness changed no verdict


def test_counters_over_more_requests_than_the_estimate_read_are_not_compared() -> None:
    """vLLM's counters count every request of a point; when the noise guard refused one stream, the
    estimate reads the others only. Seen in a fresh-clone run (b774b09): ngram drafts, one of two
    streams refused, the other's 2.14 tokens per step against the counters' 2.76 over both, called a
    disagreement. Ground truth here: stream one steps 2 tokens, stream two 4; the counters say 3."""
    refused = sp.Grouping(problem="gaps too noisy to group: 2 of 39 lie between 0.1 and 0.5 of the step time")
    est = sp.estimate([sp.group_steps(stream([2] * 40)), refused])
    assert (est.streams, est.grouped) == (2, 1) and est.tokens_per_step == pytest.approx(2.0)
    check = sp.check_counters([], est, sp.MetricDeltas(drafts=40, draft_tokens=120, accepted=80))
    assert check.server_tokens_per_step == pytest.approx(3.0)
    assert check.agrees is None and check.note.code == "speculative.counters_not_compared"
    assert (check.note["grouped"], check.note["streams"]) == (1, 2)
    whole = sp.estimate([sp.group_steps(stream([3] * 40))])
    assert sp.check_counters([], whole, sp.MetricDeltas(drafts=40, draft_tokens=120, accepted=80)).agrees is True


def test_vllm_counter_deltas_over_a_batch() -> None:
    from servecheck.experiments.speculative import SPEC_ACCEPTED, SPEC_DRAFT_TOKENS, SPEC_DRAFTS, metric_deltas

    before = {SPEC_DRAFTS: 10.0, SPEC_DRAFT_TOKENS: 30.0, SPEC_ACCEPTED: 12.0}
    after = {SPEC_DRAFTS: 50.0, SPEC_DRAFT_TOKENS: 150.0, SPEC_ACCEPTED: 72.0}
    assert metric_deltas(before, after) == sp.MetricDeltas(drafts=40.0, draft_tokens=120.0, accepted=60.0)
    assert metric_deltas(after, before) is None  # went backwards: a restart between the readings
    assert metric_deltas(before, {SPEC_DRAFTS: 50.0}) is None


def test_a_late_arrival_is_two_steps_not_noise_and_not_a_pair() -> None:
    """A plain stream whose every fourth token the client read 6 ms late: 16 ms, then 4 ms (in the dead
    band), two steps in 20 ms. Read as late arrivals, every event is its own step; before, 10 of 39 gaps
    in the band made the stream "too noisy to group"."""
    g = sp.group_steps(stream([1] * 40, jitter=[6_000_000, -6_000_000, 0, 0]))
    assert g.problem is None, g.problem
    assert set(g.steps) == {1} and isinstance(g.method, Reason) and g.method["late"] > 0
    assert sp.late_arrivals([16, 4, 10, 10], 10) == frozenset({1})


def test_a_speculative_steps_late_second_token_is_not_a_late_arrival() -> None:
    """Two tokens a step, the second written 3 ms after the first in every fourth step (20 µs in the
    others): S, then 3 ms, sum 13 ms, not two steps. No late arrival is read, and the band gaps stay noise."""
    out, t = [0], 0
    for k in range(40):
        t += STEP_NS
        late = 3_000_000 if k % 4 == 0 else WRITE_NS
        out += [t, t + late]
        t += late
    g = sp.group_steps(Stream(arrivals_ns=tuple(out), tokens=len(out)))
    assert sp.late_arrivals([b - a for a, b in zip(out[1:], out[2:])], STEP_NS) == frozenset()
    assert isinstance(g.problem, Reason) and g.problem.code == "speculative.too_noisy"


def test_a_client_that_cannot_vouch_for_half_a_step_is_named() -> None:
    """A meter that reads on time only to 6 ms cannot tell 10 ms steps from reads late by half a step; no
    meter at all cannot vouch for anything."""
    times = arrivals([1] * 40)
    meter = ClientLateness(tick_ns=4_000_000, floor_ns=2_000_000, from_ns=0, to_ns=times[-1])
    coarse = sp.group_steps(sp.Stream(arrivals_ns=times, tokens=len(times), lateness=meter))
    assert coarse.problem_code == "client_coarse" and isinstance(coarse.problem, Reason)
    assert coarse.problem.code == "speculative.client_coarse" and coarse.problem["resolution_ms"] == 6.0
    unmetered = sp.group_steps(sp.Stream(arrivals_ns=times, tokens=len(times)))
    assert unmetered.problem_code == "client_no_meter" and isinstance(unmetered.problem, Reason)
    assert list(unmetered.problem.codes()) == ["speculative.client_unvouched", "run.vouch"]


def test_nothing_to_judge_is_named() -> None:
    assert sp.run_verdict([]) == ("inconclusive", Reason("speculative.no_point"))
    assert sp.run_verdict([])[1].code == "speculative.no_point"
    assert sp.stops_paying({})[1].code == "speculative.no_baseline"
    counted = Stream((), tokens=257, draft_n=512, draft_accepted=128, server_generated=257)
    nothing = sp.estimate([])
    assert nothing.reason.code == "speculative.no_estimate" and nothing.reason["problem"] is None
    note = sp.check_counters([counted], nothing).note
    assert note.code == "speculative.counters_alone" and note["server"] == pytest.approx(2.0)


def test_a_hop_leaves_every_decided_point_and_the_run_undecided() -> None:
    point = sp.analyse_point(1, "predictable", [stream([2] * 40)], failed=0, rates=[], aggregates=[],
                             baseline_rates=None)
    assert point.estimate.verdict == "speculating"
    held = replace(point, coalesced=1)
    run = sp.analyse_speculative([held], with_baseline=False)
    assert run.verdict == "inconclusive" and run.reason.code == "speculative.run_behind_a_hop"
    assert run.reason["points_read"].code == "speculative.speculating_run" and run.reason["streams"] == 1
    (left,) = sp.behind_a_hop([held])
    assert left.estimate.verdict == "inconclusive" and left.estimate.reason.code == "speculative.point_behind_a_hop"
    assert left.estimate.reason["alone"] is point.estimate.reason
    # the bursts' figure is no measurement: the point keeps none, its reason says what it read alone
    assert left.estimate.tokens_per_step is None and left.estimate.interval is None
    assert left.record().tokens_per_step is None and left.record().tokens_per_step_interval is None
    assert point.estimate.tokens_per_step == pytest.approx(2.0)


def test_behind_a_hop_the_counters_are_not_held_against_bursts() -> None:
    """A server whose draft counters say 1 token a step, read through a hop whose bursts group as 2: before,
    `counters_disagree` (a finding against the server); behind the hop the counters stand alone."""
    counted = [replace(stream([2] * 40), draft_n=40, draft_accepted=0, server_generated=81)]
    point = sp.analyse_point(1, "predictable", counted, failed=0, rates=[], aggregates=[], baseline_rates=None)
    assert point.counters.agrees is False and point.counters.note.code == "speculative.counters_disagree"
    (left,) = sp.behind_a_hop([replace(point, coalesced=1)])
    assert left.counters.agrees is None and left.counters.note.code == "speculative.counters_alone"
    assert left.counters.server_tokens_per_step == pytest.approx(1.0)
    assert left.record().counters_agree is None
    undecided = replace(point, estimate=replace(point.estimate, verdict="inconclusive"), coalesced=1)
    (also,) = sp.behind_a_hop([undecided])  # an open point's figure is bursts as much as a decided one's
    assert also.estimate.tokens_per_step is None and also.estimate.reason.code == "speculative.point_behind_a_hop"

