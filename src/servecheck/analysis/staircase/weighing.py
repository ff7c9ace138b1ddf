"""Weighing the evidence into verdicts, pure: a batch's finish times beside its generation windows,
its doubts and the server's witnesses (`analyze_batch`), the reps of one N into a point
(`analyze_point`), and the points into the run verdict, a witness never withholding a clean stopwatch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from servecheck.analysis.staircase.grouping import classify_batch
from servecheck.analysis.staircase.records import (
    DEFINITE_VERDICTS,
    STOPWATCH,
    BatchAnalysis,
    BatchVerdict,
    MeasuredBatch,
    LevelAnalysis,
)
from servecheck.analysis.staircase.validity import (
    _ok_by_finish,
    aggregate_tok_s,
    batch_doubt,
    queue_time_s,
    self_reported_sum,
    stall_doubt,
)
from servecheck.analysis.staircase.windows import WindowReading, read_windows
from servecheck.analysis.stats import Summary
from servecheck.analysis.witness import (
    MIN_GAUGE_SAMPLES,
    Reading,
    busy_words,
    effective_concurrency,
    gauge_reading,
    timing_reading,
    token_interval_cv,
)
from servecheck.model.bodies.staircase import Evidence, Verdict
from servecheck.model.reason import Reason, joined
from servecheck.model.records import NS_PER_S


def _window_agrees(verdict: BatchVerdict, w: WindowReading) -> bool:
    if verdict.verdict != w.schedule:
        return False
    return verdict.verdict != "partial" or verdict.slots == w.open_max


def weigh_windows(verdict: BatchVerdict, w: WindowReading | None, *, may_decide: bool) -> BatchVerdict:
    """The finish grouping beside the generation windows, both the client's own stopwatch.

    They agree: both are evidence. They name two schedules: inconclusive, naming both. The finishes
    are ambiguous (and the batch is otherwise sound: `may_decide`): a definite window reading decides."""
    if w is None or verdict.n < 2:
        return verdict
    if verdict.verdict in DEFINITE_VERDICTS:
        if _window_agrees(verdict, w):
            return replace(verdict, evidence=(*verdict.evidence, "generation_windows"), windows=w)
        return replace(
            verdict, verdict="inconclusive", evidence=(), windows=w, times_verdict=verdict.verdict,
            reason=Reason("staircase.windows_disagree", times_verdict=verdict.verdict, reason=verdict.reason,
                               windows=w.description),
        )
    if not may_decide or w.schedule not in DEFINITE_VERDICTS:
        return replace(verdict, windows=w)
    return replace(
        verdict, verdict=w.schedule, evidence=("completion_times", "generation_windows"), windows=w,
        times_verdict=verdict.verdict, slots=w.open_max if w.schedule == "partial" else None,
        reason=Reason("staircase.windows_decide", windows=w.description, reason=verdict.reason),
    )


def weigh_witnesses(verdict: BatchVerdict, readings: Sequence[Reading], *, may_decide: bool) -> BatchVerdict:
    """The stopwatch's verdict beside the server's witnesses: the stopwatch judges, witnesses corroborate.

    A witness that contradicts a clean stopwatch verdict (`BatchVerdict.stopwatch_clean`) never
    withholds it: the contradiction is kept as a finding of its own (`contradicted_by`). One that
    contradicts a verdict the client could have faked (a cluster from the finishes alone, a
    partial) makes it inconclusive, naming both. When the stopwatch is ambiguous and nothing else
    is wrong with the batch (`may_decide`: off with --evidence stopwatch), witnesses that all read
    the same schedule decide it, and the reason says in words that the server's word decided.
    """
    if not readings or verdict.n < 2:
        return verdict
    readings = tuple(readings)
    if verdict.verdict in DEFINITE_VERDICTS:
        against = tuple(w for w in readings if not w.agrees(verdict.verdict, verdict.slots))
        agreeing = tuple(w.source for w in readings if w not in against)
        if against and verdict.stopwatch_clean:
            return replace(verdict, evidence=(*verdict.evidence, *agreeing), witnesses=readings,
                           contradicted_by=against)
        if against:
            return replace(
                verdict, verdict="inconclusive", evidence=(), witnesses=readings, times_verdict=verdict.verdict,
                reason=Reason("staircase.witness_disagrees", times_verdict=verdict.verdict, reason=verdict.reason,
                                   witness=against[0].description),
            )
        return replace(verdict, evidence=(*verdict.evidence, *agreeing), witnesses=readings)
    first = readings[0]
    if not may_decide or any(not w.agrees(first.schedule, first.slots) for w in readings[1:]):
        return replace(verdict, witnesses=readings)
    return replace(
        verdict,
        verdict=first.schedule,
        evidence=tuple(w.source for w in readings),
        witnesses=readings,
        times_verdict=verdict.verdict,
        slots=first.slots if first.schedule == "partial" else None,
        decided_by_witness=True,
        reason=Reason("staircase.witnesses_decide", sources=tuple(dict.fromkeys(w.source for w in readings)),
                           reason=verdict.reason, said=tuple(w.description for w in readings)),
    )


def analyze_batch(
    mb: MeasuredBatch, single_s: float | None, modal: int | None = None, *, witnesses_decide: bool = True
) -> BatchAnalysis:
    done = _ok_by_finish(mb.batch)
    finish = tuple(mb.batch.finish_s())
    tokens = tuple(r.tokens for r in done)
    verdict = classify_batch(finish, single_s, mb.n, mb.batch.clock_uncertainty_ns / NS_PER_S)
    doubt = batch_doubt(mb, single_s, modal) if mb.n > 1 else None
    # A client stall voids the finish times (and the server timings, whose queue times are client
    # latency minus the server's own work), not the gauges: what a gauge read said is what the
    # server reported, however late the client got to it. The generation windows judge their own stamps
    # (read_windows): a late read can make a queue's windows overlap, or a batch's come apart.
    stalled = stall_doubt(mb.batch, single_s) if mb.n > 1 and doubt is None else None
    why = doubt or stalled
    if why is not None and verdict.verdict != "inconclusive":
        verdict = replace(verdict, verdict="inconclusive", evidence=(), slots=None,
                          reason=Reason("staircase.doubted", why=why, looked=verdict.verdict))
    elif stalled is not None:
        verdict = replace(verdict, reason=joined((stalled, verdict.reason)))
    complete = len(finish) == mb.n and single_s is not None
    windows = read_windows(mb.batch.records, mb.n, single_s, mb.batch.lateness) if doubt is None and complete else None
    verdict = weigh_windows(verdict, windows, may_decide=doubt is None and complete)
    # A definite verdict is checked against every gauge reading there is (one reading is enough to
    # contradict); an ambiguous one needs MIN_GAUGE_SAMPLES readings before the gauges may decide.
    definite = verdict.verdict in DEFINITE_VERDICTS
    gauges = gauge_reading(mb.batch.gauges, mb.n, min_samples=1 if definite else MIN_GAUGE_SAMPLES)
    timings = None if stalled else timing_reading(mb.batch.records, mb.n)
    readings = [r for r in (gauges, timings) if r]
    verdict = weigh_witnesses(verdict, readings, may_decide=witnesses_decide and doubt is None and complete)
    return BatchAnalysis(
        n=mb.n,
        rep=mb.rep,
        finish_s=finish,
        tokens=tokens,
        aggregate_tok_s=aggregate_tok_s(sum(tokens), finish[-1] if finish else None),
        dispatch_skew_s=mb.batch.dispatch_skew_ns / NS_PER_S,
        verdict=verdict,
        queue_s=tuple(queue_time_s(r) for r in done),
        self_reported_sum_tok_s=self_reported_sum(done),
        effective_concurrency=effective_concurrency(mb.batch.records, mb.batch.release_ns),
        token_interval_cv=token_interval_cv(done),
    )


def point_verdict(n: int, batches: Sequence[BatchAnalysis]) -> tuple[Verdict, Reason, tuple[Evidence, ...]]:
    """One N across its reps: the definite verdict its reps give, when they all give the same one
    and at least half the reps are definite; repetitions that name two schedules are inconclusive."""
    if n == 1:
        return batches[0].verdict.verdict, batches[0].verdict.reason, ()
    definite = [b for b in batches if b.verdict.verdict in DEFINITE_VERDICTS]
    kinds = {_schedule_key(b.verdict) for b in definite}
    if len(kinds) > 1:
        return "inconclusive", (
            Reason("staircase.reps_disagree", verdicts=tuple(b.verdict.verdict for b in batches))), ()
    if not definite or 2 * len(definite) < len(batches):
        last = batches[-1].verdict
        if len(batches) == 1:
            return "inconclusive", last.reason, ()
        return "inconclusive", (
            Reason("staircase.reps_few_decided", decided=len(definite), reps=len(batches), last=last.reason)), ()
    first = definite[0].verdict
    reason = first.reason
    if len(batches) > 1 and len(definite) < len(batches):
        reason = Reason("staircase.reps_some", reason=reason, decided=len(definite), reps=len(batches),
                             verdict=first.verdict)
    elif len(batches) > 1:
        reason = Reason("staircase.reps_all", reason=reason, reps=len(batches))
    evidence = tuple(dict.fromkeys(e for b in definite for e in b.verdict.evidence))
    return first.verdict, reason, evidence


def _schedule_key(v: BatchVerdict) -> tuple[str, int | None]:
    return v.verdict, v.slots if v.verdict == "partial" else None


def median_batch(batches: Sequence[BatchAnalysis]) -> BatchAnalysis | None:
    """The rep whose aggregate is the median over the reps (the lower middle of an even count; the
    first rep when none has an aggregate): the one batch a point's finish times and tokens show."""
    if not batches:
        return None
    with_agg = sorted((b for b in batches if b.aggregate_tok_s is not None), key=lambda b: (b.aggregate_tok_s, b.rep))
    return with_agg[(len(with_agg) - 1) // 2] if with_agg else batches[0]


def analyze_point(n: int, batches: Sequence[BatchAnalysis], noises: Sequence[Any] = ()) -> LevelAnalysis:
    verdict, reason, evidence = point_verdict(n, batches)
    if verdict == "inconclusive" and (busy := busy_words(noises)) is not None:
        reason = joined((reason, busy))
    aggs = [b.aggregate_tok_s for b in batches if b.aggregate_tok_s is not None]
    shown = median_batch(batches)
    by_witness = verdict in DEFINITE_VERDICTS and not STOPWATCH.intersection(evidence)
    return LevelAnalysis(
        n=n,
        finish_s=() if shown is None else shown.finish_s,
        tokens=() if shown is None else shown.tokens,
        aggregate=Summary.of(aggs) if aggs else None,
        verdict=verdict,
        reason=reason,
        batches=tuple(batches),
        evidence=evidence,
        shown_rep=None if shown is None else shown.rep,
        decided_by_witness=by_witness,
    )


def slots_implied(n: int, verdict: BatchVerdict) -> tuple[int, float] | None:
    """The range of concurrent slots a definite batch verdict implies: a cluster of N needs at
    least N, a staircase exactly one, a partial of groups of K exactly K; None when indefinite."""
    if verdict.verdict == "cluster":
        return n, float("inf")
    if verdict.verdict == "staircase":
        return 1, 1
    if verdict.verdict == "partial" and verdict.slots:
        return verdict.slots, verdict.slots
    return None


def _slot_range(batches: Sequence[BatchAnalysis]) -> tuple[int, float, list[tuple[int, Verdict]]]:
    """The slots every definite batch among `batches` allows together (lo > hi: none), and what each said
    (N and verdict)."""
    lo, hi = 1, float("inf")
    seen: list[tuple[int, Verdict]] = []
    for b in batches:
        implied = slots_implied(b.n, b.verdict)
        if implied is None:
            continue
        seen.append((b.n, b.verdict.verdict))
        lo, hi = max(lo, implied[0]), min(hi, implied[1])
    return lo, hi, seen


def _by_stopwatch(b: BatchAnalysis) -> bool:
    return b.verdict.verdict in DEFINITE_VERDICTS and not b.verdict.decided_by_witness


def _clean_point(p: LevelAnalysis) -> bool:
    """The point's definite verdict rests on clean stopwatch verdicts alone (every definite rep's)."""
    definite = [b for b in p.batches if b.verdict.verdict in DEFINITE_VERDICTS]
    return p.verdict in DEFINITE_VERDICTS and bool(definite) and all(b.verdict.stopwatch_clean for b in definite)


def set_aside_witness_decisions(batches: Sequence[BatchAnalysis]) -> list[BatchAnalysis]:
    """The stopwatch comes first across batches too: a schedule the server's witnesses decided (the
    batch's own times were ambiguous) that no fixed number of slots reconciles with a clean
    stopwatch verdict (`BatchVerdict.stopwatch_clean`) at another N or in another rep is set aside.
    Its batch is left undecided, naming the stopwatch verdicts against it (`overruled_by`) and its
    witnesses (`contradicted_by`): the run warns `witness_contradicts`, and the stopwatch's verdicts
    stand. A verdict the client could have faked (a cluster from the finishes alone) sets nothing
    aside, as inside one batch: the disagreement then withholds the run (`contradiction`). When the
    clean verdicts disagree there is nothing to hold a witness to, and nothing is set aside."""
    clocked = [b for b in batches if b.verdict.stopwatch_clean]
    lo, hi, _ = _slot_range(clocked)
    if not clocked or lo > hi:
        return list(batches)
    return [_set_aside(b, clocked, lo, hi) for b in batches]


def _set_aside(b: BatchAnalysis, clocked: Sequence[BatchAnalysis], lo: int, hi: float) -> BatchAnalysis:
    v = b.verdict
    implied = slots_implied(b.n, v) if v.decided_by_witness else None
    if implied is None or max(lo, implied[0]) <= min(hi, implied[1]):
        return b
    against = tuple(Reason("staircase.batch_named", n=c.n, rep=c.rep, verdict=c.verdict.verdict) for c in clocked
                    if (s := slots_implied(c.n, c.verdict)) is not None
                    and max(s[0], implied[0]) > min(s[1], implied[1]))
    reason = Reason("staircase.set_aside", against=against, verdict=v.verdict, was=v.reason)
    return replace(b, verdict=replace(v, verdict="inconclusive", evidence=(), slots=None, decided_by_witness=False,
                                      contradicted_by=v.witnesses, overruled_by=against, reason=reason))


def contradiction(points: Sequence[LevelAnalysis]) -> Reason | None:
    """Two definite verdicts no fixed number of slots can give (a staircase at N=2 beside a cluster
    at N=4): the schedule is not the one the verdict words assume, so no run verdict is named.

    The stopwatch's verdicts are held to each other first. Witness decisions that disagree with a
    clean one were set aside batch by batch (`set_aside_witness_decisions`); those left withhold a
    run verdict only where it is not clean stopwatch evidence itself, so a witness never withholds
    a clean stopwatch verdict."""
    batches = [b for p in points for b in p.batches]
    stages = [[b for b in batches if _by_stopwatch(b)]]
    top = max(points, key=lambda p: p.n, default=None)
    if top is not None and not _clean_point(top):
        stages.append(batches)
    for kept in stages:
        lo, hi, seen = _slot_range(kept)
        if lo > hi:
            return Reason("staircase.points_disagree", seen=tuple(dict.fromkeys(seen)))
    return None


def _run_verdict(points: Sequence[LevelAnalysis]) -> tuple[Verdict, Reason, tuple[Evidence, ...]]:
    top = max(points, key=lambda p: p.n, default=None)
    if top is None or top.n == 1:
        return "inconclusive", Reason("staircase.no_batch"), ()
    if top.verdict in DEFINITE_VERDICTS and (why := contradiction(points)) is not None:
        return "inconclusive", why, ()
    return top.verdict, Reason("staircase.run_at", n=top.n, reason=top.reason), \
        top.evidence
