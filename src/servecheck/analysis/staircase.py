"""The staircase test, pure: classify how a batch's completion times group, and judge a whole run.

A queue finishes N equal requests in an evenly spaced staircase whose step is one single-request
time; real batching finishes them together; K slots finish them in groups of K. Verdicts are
judged from how the finish times group, never from how long the batch took.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, get_args

from servecheck.analysis.cache import record_contaminated
from servecheck.analysis.client_timing import late_reads, longest_holding
from servecheck.analysis.rules import CLIENT_ERROR_FRAC, FIGURE_FRAC, OUTPUT_LENGTH_TOLERANCE, STAIRCASE_STEP_TOL
from servecheck.analysis.stats import Summary, median, mode, ratio
from servecheck.analysis.witness import (
    MIN_GAUGE_SAMPLES,
    Reading,
    busy_words,
    effective_concurrency,
    gauge_reading,
    timing_reading,
    token_interval_cv,
)
from servecheck.model.bodies import common
from servecheck.model.bodies import staircase as shape
from servecheck.model.bodies.staircase import RISING_RATIO, Evidence, Schedule, Trend, Verdict
from servecheck.model.client import FIX as CLIENT_FIX
from servecheck.model.client import ClientCheck, ClientLateness, client_bound_message
from servecheck.model.records import NS_PER_S, BatchResult, RequestRecord

DEFINITE_VERDICTS: frozenset[Verdict] = frozenset(get_args(Schedule))  # the verdicts that claim a schedule

# --- grouping finish times -------------------------------------------------------------------
# Gaps are measured against the single-request time T1. Inside a group, finishes differ only by
# jitter and staggered prefill: a few percent of T1. Between groups the next group needs at least
# one full decode of the output, i.e. about one T1. A gap below SMALL_GAP_FRAC x T1 joins a group,
# one above LARGE_GAP_FRAC x T1 starts a new one; the wide dead band in between is where noise or
# an unknown schedule could fool us, so a gap there makes the batch inconclusive, never a guess.
SMALL_GAP_FRAC = 0.15
LARGE_GAP_FRAC = 0.5
# One group is a cluster only if its whole spread is small too: many small gaps can add up to a
# slow drift that is neither batching nor a queue (a quarter of T1 is far beyond prefill stagger).
CLUSTER_SPREAD_FRAC = 0.25
# Staircase: each step (release -> first finish, then finish -> finish) within STAIRCASE_STEP_TOL
# (analysis.rules, +-25%) of T1.
# Evenly spaced: (largest step - smallest step) / mean step at most this. A queue of equal requests
# is even to a few percent on a quiet machine; a schedule that is not even is not one we know how
# to name. A staircase's finishes are already separated by gaps of more than half a single time
# (no batching shows that), so its evenness test may allow a busy machine's swing of +-20%.
EVEN_STEP_SPREAD = 0.3
STAIRCASE_EVEN_SPREAD = 0.4
# A staircase whose steps are even with each other and with its own first finish (in a queue the
# first request runs alone: that finish is itself a single-request time) stays a staircase when
# its mean step lies within this band of the N=1 reference; the disagreement is then named.
# Measured on a loaded 2-core machine: steps 0.70x a stalled reference and 1.5-1.9x a fast one.
# Steps at half the reference or less are no queue we can name against it.
REFERENCE_STEP_LO = 0.6
REFERENCE_STEP_HI = 2.0
# Partial: a group of K batched requests cannot finish faster than one request alone, so each
# group's step is at least most of T1; shorter steps mean something we do not understand.
PARTIAL_MIN_STEP_FRAC = 0.75
# Cluster: the same bound for one group. N requests done together well before one request alone
# means the N=1 time is no fair reference (a stall during the single run inflates it, and a
# queue's finishes then sit closer than any gap threshold), not that batching is faster than alone.
CLUSTER_MIN_LAST_FRAC = 0.75

# A client stall: while the client's event loop was due to run and did not, stream data waited
# in the socket and was timed when the loop woke. Finishes read at the end of a stall of D may
# have happened any time in it, so a stall as long as the gap that still joins a group can merge
# a queue's steps into a "cluster" or split a cluster into "steps". Seen on vLLM here: a server
# in another autogroup starved the client for 2-8 s and all four queued finishes "arrived" at once.
# A finish counts as read at a stall's end up to this fraction of T1 after it (reading what piled
# up takes a starved client a while).
STALL_DOUBT_FRAC = SMALL_GAP_FRAC
STALL_READ_FRAC = SMALL_GAP_FRAC

# --- validity --------------------------------------------------------------------------------
# Requests more than OUTPUT_LENGTH_TOLERANCE (5%) away from the run's modal output length smear a
# staircase into a cluster (seed 000 section 7: "fast ones finish first").
# Requests released more than 5% of T1 apart no longer start together; the issue fixes 5%.
DISPATCH_SKEW_FRAC = 0.05

# The sum of the server's self-reported per-request rates is seed 000's trap: a queue's sum is N
# times the true aggregate (350 vs 91 tok/s). On a batching server the two agree to a few percent
# (each self-reported rate leaves out the request's prefill: 166.7 vs 164.2 tok/s, 1.5%, on real
# llama.cpp --parallel 4), so the sum is called misleading only when it is more than this off.
MISLEADING_SUM_FRAC = 0.10

# --- trend across N --------------------------------------------------------------------------
# Real batching climbs well above N=1 by N=4 (seed 000: "it is not flat"); a queue stays within a
# few percent (91.2 vs 93.0 tok/s). Rising needs +30%; flat means within -15%..+15%; between the
# two (or a fall below -15%) is left inconclusive rather than guessed.
# RISING_RATIO is the staircase's word (model.bodies.staircase): diff prints it beside its table.
FLAT_LO_RATIO = 0.85
FLAT_HI_RATIO = 1.15
# N=1 measurements that spread more than this (slowest / fastest - 1) mean the machine's speed
# moved during the run, in either direction; it is named, and rising must hold against the fastest.
REFERENCE_SPREAD_WARN = 0.25

# --- generation windows ------------------------------------------------------------------
# A streamed request's first token and its completion bound the window in which the server
# generated it. A queue's windows do not overlap (the next request's first token comes after a
# prefill that starts when the one before it finished); a batch's all overlap, whatever the
# machine's speed did in between. The client can only delay a stamp, never advance one: a stall
# piles tokens up and stamps them at its end, which shortens windows and can make two touch, but
# never makes a queue's windows overlap or a batch's come apart. Two windows overlap when they
# share more than WINDOW_OVERLAP_TOL x T1 (two sockets read in one wake-up are stamped in either
# order, microseconds apart); a window shorter than WINDOW_MIN_FRAC of the batch's median window
# had its tokens read in one burst and shows nothing.
WINDOW_OVERLAP_TOL = 0.05
WINDOW_MIN_FRAC = 0.5
WINDOW_MIN_EVENTS = 3

# The stopwatch's evidence (the client's clock alone), as against the server's witnesses.
STOPWATCH: frozenset[Evidence] = frozenset({"completion_times", "generation_windows"})


# ============================================================================================
# One batch
# ============================================================================================


@dataclass(frozen=True, slots=True)
class BatchVerdict:
    """The verdict on one batch and the numbers that decided it."""

    n: int
    verdict: Verdict
    reason: str
    single_s: float | None = None
    group_sizes: tuple[int, ...] = ()
    steps_s: tuple[float, ...] = ()  # release -> first group, then group -> group (group means)
    step_ratios: tuple[float, ...] = ()  # steps / single time
    spread_s: float | None = None  # last finish - first finish
    spread_ratio: float | None = None  # spread / single time
    # the first finish over the single time: about 1 in a queue (the first request ran alone, in the
    # same minute as the rest), near last_over_single in a batch (everyone finishes together, late)
    first_over_single: float | None = None
    last_over_single: float | None = None
    max_gap_ratio: float | None = None  # largest gap between consecutive finishes / single time
    evidence: tuple[Evidence, ...] = ()  # what decided a definite verdict
    reference_disagrees: bool = False  # a staircase decided by its own steps against an off N=1 time
    witnesses: tuple[Reading, ...] = ()  # what the server's witnesses read, agreeing or not
    times_verdict: Verdict | None = None  # what the finish times alone said, when windows or witnesses changed it
    slots: int | None = None  # a partial's requests at once (the finish groups', or the windows')
    windows: WindowReading | None = None  # what the generation windows showed, when they showed anything
    # witnesses that read another schedule than a clean stopwatch verdict, which stood: a finding
    contradicted_by: tuple[Reading, ...] = ()
    decided_by_witness: bool = False  # the times could not decide and the server's word did
    # the stopwatch verdicts of other batches ("N=4 rep 1 staircase") that set aside the schedule this
    # batch's witnesses decided: the batch is then undecided and its witnesses are in contradicted_by
    overruled_by: tuple[str, ...] = ()

    @property
    def stopwatch_clean(self) -> bool:
        """A definite verdict that no witness may withhold: a staircase (nothing on the client fakes
        evenly spaced finishes one request-time apart; a stall bunches finishes, it never spaces
        them), or any schedule the generation windows confirm. A cluster from the finishes alone is
        not: a client that read four queued finishes at the end of one stall sees four together."""
        if self.verdict not in DEFINITE_VERDICTS or self.decided_by_witness:
            return False
        return self.verdict == "staircase" or "generation_windows" in self.evidence

    def record(self) -> shape.BatchVerdict:
        w = self.windows
        return shape.BatchVerdict(
            verdict=self.verdict, reason=self.reason, evidence=self.evidence, times_verdict=self.times_verdict,
            reference_disagrees=self.reference_disagrees, witnesses=tuple(r.record() for r in self.witnesses),
            slots=self.slots,
            windows=None if w is None else shape.Windows(schedule=w.schedule, open_max=w.open_max,
                                                         description=w.description),
            contradicted_by=tuple(r.record() for r in self.contradicted_by), decided_by_witness=self.decided_by_witness,
            overruled_by=self.overruled_by,
            single_s=self.single_s, group_sizes=self.group_sizes, steps_s=self.steps_s, step_ratios=self.step_ratios,
            spread_s=self.spread_s, spread_ratio=self.spread_ratio, first_over_single=self.first_over_single,
            last_over_single=self.last_over_single,
            max_gap_ratio=self.max_gap_ratio,
        )


@dataclass(frozen=True, slots=True)
class Grouping:
    groups: tuple[tuple[float, ...], ...]
    ambiguous: tuple[tuple[int, float], ...]  # (index of the later finish, gap ratio) in the dead band
    uncertainty_ratio: float = 0.0  # how far a gap may be off (clocks of several machines), / single time


def group_finishes(finish_s: Sequence[float], single_s: float, uncertainty_s: float = 0.0) -> Grouping:
    """Split sorted finish times into groups at gaps larger than LARGE_GAP_FRAC x single time.

    `uncertainty_s` is how far any gap may be off (finishes read on several machines' clocks,
    `BatchResult.clock_uncertainty_ns`): a gap splits groups only if it is beyond the threshold
    by more than that, and one that might lie on either side of a threshold is ambiguous, so a gap
    the clocks cannot resolve is never a group boundary."""
    u = uncertainty_s / single_s
    groups: list[list[float]] = []
    ambiguous: list[tuple[int, float]] = []
    for i, t in enumerate(finish_s):
        gap_ratio = (t - finish_s[i - 1]) / single_s if i else float("inf")
        if gap_ratio - u > LARGE_GAP_FRAC:
            groups.append([t])
            continue
        if gap_ratio + u >= SMALL_GAP_FRAC:
            ambiguous.append((i, gap_ratio))
        groups[-1].append(t)
    return Grouping(groups=tuple(tuple(g) for g in groups), ambiguous=tuple(ambiguous), uncertainty_ratio=u)


def group_steps(groups: Sequence[Sequence[float]]) -> list[float]:
    """Time from release to the first group, then between consecutive groups (by group means)."""
    centres = [sum(g) / len(g) for g in groups]
    return [c - prev for prev, c in zip([0.0, *centres], centres)]


def _even(steps: Sequence[float], limit: float = EVEN_STEP_SPREAD) -> bool:
    mean = sum(steps) / len(steps)
    return mean > 0 and (max(steps) - min(steps)) / mean <= limit


def _consistent_sizes(sizes: Sequence[int]) -> bool:
    """K slots give groups of K, the last one holding the remainder."""
    head = sizes[:-1]
    return all(s == head[0] for s in head) and sizes[-1] <= head[0]


def classify_batch(finish_s: Sequence[float], single_s: float | None, n: int,
                   uncertainty_s: float = 0.0) -> BatchVerdict:
    """Classify one batch of `n` requests from its finish times (seconds from release), each gap
    known to +-`uncertainty_s` (0: one machine's clock)."""
    if n == 1:
        return BatchVerdict(n=1, verdict="baseline", reason="N=1 is the single-request baseline", single_s=single_s)
    if single_s is None or single_s <= 0:
        return BatchVerdict(
            n=n,
            verdict="inconclusive",
            reason="no single-request time to compare against (the N=1 request failed or its length was off)",
        )
    if len(finish_s) < n:
        return BatchVerdict(
            n=n, verdict="inconclusive", reason=f"only {len(finish_s)} of {n} requests finished", single_s=single_s
        )
    ordered = sorted(finish_s)
    grouping = group_finishes(ordered, single_s, uncertainty_s)
    gaps = [b - a for a, b in zip(ordered, ordered[1:])]
    steps = group_steps(grouping.groups)
    spread = ordered[-1] - ordered[0]
    base = BatchVerdict(
        n=n,
        verdict="inconclusive",
        reason="",
        single_s=single_s,
        group_sizes=tuple(len(g) for g in grouping.groups),
        steps_s=tuple(steps),
        step_ratios=tuple(s / single_s for s in steps),
        spread_s=spread,
        spread_ratio=spread / single_s,
        first_over_single=ordered[0] / single_s,
        last_over_single=ordered[-1] / single_s,
        max_gap_ratio=max(gaps) / single_s,
    )
    verdict, reason = _decide(base, grouping, single_s)
    off_reference = verdict == "staircase" and any(abs(r - 1.0) > STAIRCASE_STEP_TOL for r in base.step_ratios)
    evidence: tuple[Evidence, ...] = ("completion_times",) if verdict in DEFINITE_VERDICTS else ()
    slots = base.group_sizes[0] if verdict == "partial" else None
    return replace(base, verdict=verdict, reason=reason, evidence=evidence, reference_disagrees=off_reference,
                   slots=slots)


def _decide(v: BatchVerdict, grouping: Grouping, single_s: float) -> tuple[Verdict, str]:
    if grouping.ambiguous:
        i, gap_ratio = grouping.ambiguous[0]
        clocks = (
            f", to within +-{grouping.uncertainty_ratio:.2f}x (the clocks of the client actors that read the finishes)"
            if grouping.uncertainty_ratio else ""
        )
        return "inconclusive", (
            f"the gap before finish #{i + 1} is {gap_ratio:.2f}x the single time{clocks}: neither inside a group "
            f"(< {SMALL_GAP_FRAC}x) nor between groups (> {LARGE_GAP_FRAC}x)"
        )
    k = len(grouping.groups)
    if k == 1:
        return _decide_cluster(v)
    if k == v.n:
        return _decide_staircase(v)
    return _decide_partial(v, grouping, single_s)


def _decide_cluster(v: BatchVerdict) -> tuple[Verdict, str]:
    assert v.spread_ratio is not None and v.last_over_single is not None
    if v.last_over_single < CLUSTER_MIN_LAST_FRAC:
        return "inconclusive", (
            f"all {v.n} finished by {v.last_over_single:.2f}x the single time, sooner than one request alone "
            f"(>= {CLUSTER_MIN_LAST_FRAC}x): the N=1 time is no fair reference"
        )
    if v.spread_ratio <= CLUSTER_SPREAD_FRAC:
        return "cluster", f"all {v.n} finish together: spread {v.spread_ratio:.2f}x the single time"
    return "inconclusive", (
        f"no clear step, yet the finishes drift {v.spread_ratio:.2f}x the single time apart "
        f"(a cluster stays within {CLUSTER_SPREAD_FRAC}x)"
    )


def _decide_staircase(v: BatchVerdict) -> tuple[Verdict, str]:
    lo, hi = min(v.step_ratios), max(v.step_ratios)
    if not _even(v.steps_s, STAIRCASE_EVEN_SPREAD):
        return "inconclusive", (
            f"{v.n} separate finishes, unevenly spaced: steps {_ratios(v.step_ratios)}x the single time "
            f"(a queue's steps are even within {STAIRCASE_EVEN_SPREAD:.0%})"
        )
    if all(abs(r - 1.0) <= STAIRCASE_STEP_TOL for r in v.step_ratios):
        return "staircase", f"{v.n} finishes one at a time, steps {lo:.2f}-{hi:.2f}x the single time: a queue"
    mean = sum(v.step_ratios) / len(v.step_ratios)
    if REFERENCE_STEP_LO <= mean <= REFERENCE_STEP_HI:
        first = v.steps_s[0]
        return "staircase", (
            f"{v.n} finishes one at a time, evenly spaced, each step as long as the first finish "
            f"({first:.2f} s, one request alone in a queue): a queue; the N=1 reference disagrees "
            f"(steps {lo:.2f}-{hi:.2f}x of it)"
        )
    return "inconclusive", (
        f"{v.n} separate finishes, but the steps are {lo:.2f}-{hi:.2f}x the single time "
        f"(a queue steps 1 +- {STAIRCASE_STEP_TOL}x, or evenly within {REFERENCE_STEP_LO}-{REFERENCE_STEP_HI}x of an "
        "off reference)"
    )


def _ratios(values: Sequence[float]) -> str:
    return ", ".join(f"{r:.2f}" for r in values)


def _decide_partial(v: BatchVerdict, grouping: Grouping, single_s: float) -> tuple[Verdict, str]:
    sizes = v.group_sizes
    if not _consistent_sizes(sizes):
        return "inconclusive", f"groups of {_sizes(sizes)} are not the groups a fixed number of slots makes"
    wide = [g for g in grouping.groups if (g[-1] - g[0]) / single_s > CLUSTER_SPREAD_FRAC]
    if wide:
        return "inconclusive", "a group's finishes drift apart; its members did not run together"
    short = [r for r in v.step_ratios if r < PARTIAL_MIN_STEP_FRAC]
    if short:
        return "inconclusive", (
            f"a group step is {short[0]:.2f}x the single time, shorter than one request can run "
            f"(>= {PARTIAL_MIN_STEP_FRAC}x)"
        )
    if not _even(v.steps_s):
        return "inconclusive", f"groups of {_sizes(sizes)} finish unevenly spaced"
    return "partial", f"{len(sizes)} groups of {_sizes(sizes)}: about {sizes[0]} run at once, the rest queue"


def _sizes(sizes: Sequence[int]) -> str:
    return "+".join(str(s) for s in sizes)


# ============================================================================================
# Generation windows: the second stopwatch reading
# ============================================================================================


@dataclass(frozen=True, slots=True)
class WindowReading:
    """What the requests' generation windows (first token -> completion, the client's own stamps)
    show: the most windows that were open at one instant, and the schedule that implies."""

    schedule: Verdict  # cluster, staircase, partial, or inconclusive when the windows fit none
    open_max: int  # the most windows that shared one instant (beyond the overlap tolerance)
    description: str


def generation_windows(records: Sequence[RequestRecord]) -> list[tuple[int, int]] | None:
    """Each finished request's (first token, completion) on the run clock, in start order; None when
    any request streamed too few events to have a window (a non-streaming dialect, one burst)."""
    out = []
    for r in records:
        if not r.ok:
            continue
        if r.first_token_ns is None or r.end_ns is None or len(r.token_ns) < WINDOW_MIN_EVENTS:
            return None
        out.append((r.first_token_ns, r.end_ns))
    return sorted(out)


def _open_max(windows: Sequence[tuple[int, int]], tol_ns: int) -> int:
    """The most windows sharing one instant, each trimmed by half the tolerance at both ends."""
    half = tol_ns // 2
    trimmed = [(a + half, b - half) for a, b in windows if b - a > tol_ns]
    return max((sum(1 for a2, b2 in trimmed if a2 <= a < b2) for a, _ in trimmed), default=0)


def _fifo_slots(windows: Sequence[tuple[int, int]], k: int, tol_ns: int) -> bool:
    """K slots taken in turn: window i (in start order) opens after window i - k has closed."""
    return all(windows[i][0] >= windows[i - k][1] - tol_ns for i in range(k, len(windows)))


def read_windows(records: Sequence[RequestRecord], n: int, single_s: float | None,
                 lateness: ClientLateness | None = None) -> WindowReading | None:
    """The schedule the generation windows show, or None when they cannot show one (too few
    windows, degenerate ones, no single-request time to size the tolerance, or a window's first or
    last token read late by more than the overlap tolerance: after a stall the loop reads the streams
    that piled up in any order, so one request's last token can be stamped after the next one's first,
    an overlap the client made; a late first token can hide one as well)."""
    windows = generation_windows(records)
    if windows is None or len(windows) != n or n < 2 or not single_s or single_s <= 0:
        return None
    stamps = [t for r in records for t in (r.first_token_ns, r.end_ns) if t is not None]
    if lateness is not None and longest_holding(lateness, stamps, WINDOW_OVERLAP_TOL * single_s * NS_PER_S):
        return None
    lengths = sorted(b - a for a, b in windows)
    typical = lengths[len(lengths) // 2]
    if typical <= 0 or lengths[0] < WINDOW_MIN_FRAC * typical:
        return None
    tol_ns = int(WINDOW_OVERLAP_TOL * single_s * NS_PER_S)
    k = _open_max(windows, tol_ns)
    if k == 1:
        return WindowReading("staircase", 1, f"the {n} generating windows never overlap: each request's first token "
                             "came after the one before it had finished")
    if k == n:
        return WindowReading("cluster", n, f"all {n} requests were generating at one instant")
    if 1 < k < n and _fifo_slots(windows, k, tol_ns):
        return WindowReading("partial", k, f"at most {k} requests were generating at once, each next one starting "
                             f"as one of the {k} before it finished")
    return WindowReading("inconclusive", k, f"up to {k} of {n} requests generated at once, in no fixed number of slots")


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
            reason=f"the finishes say {verdict.verdict} ({verdict.reason}), but {w.description}",
        )
    if not may_decide or w.schedule not in DEFINITE_VERDICTS:
        return replace(verdict, windows=w)
    return replace(
        verdict, verdict=w.schedule, evidence=("completion_times", "generation_windows"), windows=w,
        times_verdict=verdict.verdict, slots=w.open_max if w.schedule == "partial" else None,
        reason=f"{w.description} (the finish times alone were ambiguous: {verdict.reason})",
    )


# ============================================================================================
# Per-request checks
# ============================================================================================


def length_outliers(tokens: Sequence[int], tol: float = OUTPUT_LENGTH_TOLERANCE) -> tuple[int | None, list[int]]:
    """The modal output length and the positions of requests more than `tol` away from it."""
    if not tokens:
        return None, []
    modal = mode(tokens)
    return modal, [i for i, t in enumerate(tokens) if off_length(t, modal, tol)]


def off_length(tokens: int, modal: int | None, tol: float = OUTPUT_LENGTH_TOLERANCE) -> bool:
    """True when an output of `tokens` is more than `tol` away from the run's modal length."""
    if modal is None:
        return False
    if modal <= 0:
        return tokens != modal
    return abs(tokens - modal) / modal > tol


def skew_invalid(dispatch_skew_s: float, single_s: float | None) -> bool:
    """True when the requests did not start together (skew > DISPATCH_SKEW_FRAC x single time)."""
    return single_s is not None and single_s > 0 and dispatch_skew_s > DISPATCH_SKEW_FRAC * single_s


def aggregate_tok_s(tokens: int, last_finish_s: float | None) -> float | None:
    """Tokens actually produced / the time the last request finished: the only honest aggregate."""
    return ratio(float(tokens), last_finish_s)


def queue_time_s(record: RequestRecord) -> float | None:
    """Client latency - server prefill - server decode: the time the request waited in a queue."""
    s = record.server
    if record.latency_ns is None or s is None or s.prompt_s is None or s.decode_s is None:
        return None
    return record.latency_ns / NS_PER_S - s.prompt_s - s.decode_s


def self_reported_sum(records: Sequence[RequestRecord]) -> float | None:
    """Sum of the server's own per-request rates: the misleading figure (350 vs a true 91 in seed 000)."""
    rates = [r.server.self_reported_tok_s if r.server else None for r in records if r.ok]
    if not rates or any(x is None for x in rates):
        return None
    return float(sum(x for x in rates if x is not None))


def classify_trend(
    ratios: dict[int, float],
    *,
    against_fastest: dict[int, float] | None = None,
    own_bound: dict[int, float] | None = None,
    verdicts: Mapping[int, str] | None = None,
) -> tuple[Trend, str]:
    """`rising` or `flat` from agg(N)/agg(1) for every N > 1 (agg(1) the median N=1 aggregate).

    Each word is a claim with its own evidence. `rising` must hold against the fastest N=1
    measurement too (`against_fastest`), so one slow single request cannot make a queue rise,
    and a point whose finishes are a staircase (a queue) cannot rise: that contradiction is named.
    `own_bound` is each point's ceiling on its true ratio from its own batch (no request runs
    faster than alone, so the first finish is at most one single time: agg(N) / (tokens / first
    finish)); a rise needs room under it, and flat needs it to leave no room for a rise, unless
    the point is a staircase (a queue has no gain to hide).
    """
    if not ratios:
        return "inconclusive", "no N > 1 with an aggregate"
    best_n = max(ratios, key=lambda n: ratios[n])
    if ratios[best_n] >= RISING_RATIO:
        strict = (against_fastest or {}).get(best_n, ratios[best_n])
        if (verdicts or {}).get(best_n) == "staircase":
            return "inconclusive", (
                f"the aggregate reads {ratios[best_n]:.2f}x N=1 at N={best_n}, but its finishes are a staircase "
                "(a queue cannot raise the aggregate): the N=1 reference is no fair measure"
            )
        if strict < RISING_RATIO:
            return "inconclusive", (
                f"the aggregate reads {ratios[best_n]:.2f}x the median N=1 at N={best_n}, but only {strict:.2f}x "
                f"the fastest N=1 measurement (rising needs >= {RISING_RATIO}x against every one)"
            )
        ceiling = (own_bound or {}).get(best_n)
        if ceiling is not None and ceiling < RISING_RATIO:
            return "inconclusive", (
                f"the aggregate reads {ratios[best_n]:.2f}x N=1 at N={best_n}, but that batch's own first finish "
                f"(at most one request alone) caps its gain at {ceiling:.2f}x: the N=1 reference ran slow"
            )
        return "rising", f"aggregate climbs to {ratios[best_n]:.2f}x N=1 at N={best_n}"
    # A staircase point is a queue, which cannot raise the aggregate whatever its first finish
    # leaves room for: its bound is no reason to withhold `flat` (vLLM --max-num-seqs 1 once ran
    # the first of two queued requests 1.38x slower than alone, a bound of 1.44x on a queue).
    roomy = {n: b for n, b in (own_bound or {}).items()
             if b >= RISING_RATIO and (verdicts or {}).get(n) != "staircase"}
    if roomy and all(FLAT_LO_RATIO <= r <= FLAT_HI_RATIO for r in ratios.values()):
        n, b = next(iter(sorted(roomy.items())))
        return "inconclusive", (
            f"the aggregate reads {ratios[n]:.2f}x N=1 at N={n}, but that batch's finishes leave room for a "
            f"gain up to {b:.2f}x (its first finish is at most one request alone): the N=1 reference may have run fast"
        )
    if all(FLAT_LO_RATIO <= r <= FLAT_HI_RATIO for r in ratios.values()):
        lo, hi = min(ratios.values()), max(ratios.values())
        return "flat", f"aggregate stays at {lo:.2f}-{hi:.2f}x N=1: concurrency buys nothing"
    worst_n = min(ratios, key=lambda n: ratios[n])
    return "inconclusive", (
        f"aggregate moves to {ratios[best_n]:.2f}x (N={best_n}) / {ratios[worst_n]:.2f}x (N={worst_n}) of N=1: "
        f"neither flat ({FLAT_LO_RATIO}-{FLAT_HI_RATIO}x) nor rising (>= {RISING_RATIO}x)"
    )


# ============================================================================================
# A whole run
# ============================================================================================


@dataclass(frozen=True, slots=True)
class MeasuredBatch:
    """One measured batch of the staircase run: N requests released together, repetition `rep`."""

    n: int
    rep: int
    batch: BatchResult


@dataclass(frozen=True, slots=True)
class RequestRef:
    """Names one request in a run so the user can find it in the JSON."""

    n: int
    rep: int
    index: int
    nonce: str
    detail: str

    def record(self) -> common.RequestRef:
        return common.RequestRef(n=self.n, rep=self.rep, index=self.index, nonce=self.nonce, detail=self.detail)


@dataclass(frozen=True, slots=True)
class Finding:
    """A warning or a reason the run is invalid: data with a hint, rendered by the CLI."""

    code: str
    message: str
    hint: str | None = None
    requests: tuple[RequestRef, ...] = ()

    def record(self) -> common.Finding:
        return common.Finding(code=self.code, message=self.message, hint=self.hint,
                              requests=tuple(r.record() for r in self.requests))


@dataclass(frozen=True, slots=True)
class BatchAnalysis:
    n: int
    rep: int
    finish_s: tuple[float, ...]  # ok requests, seconds from release, in finishing order
    tokens: tuple[int, ...]  # their tokens, same order
    aggregate_tok_s: float | None
    dispatch_skew_s: float
    verdict: BatchVerdict
    queue_s: tuple[float | None, ...]  # per request, finishing order
    self_reported_sum_tok_s: float | None
    effective_concurrency: float | None = None  # Little's law: sum of latencies / wall
    token_interval_cv: float | None = None  # spread of inter-token intervals (median per-request CV)

    @property
    def self_reported_misleading(self) -> bool | None:
        """True when the self-reported sum is more than MISLEADING_SUM_FRAC off the true aggregate."""
        if self.self_reported_sum_tok_s is None or not self.aggregate_tok_s:
            return None
        return abs(self.self_reported_sum_tok_s / self.aggregate_tok_s - 1.0) > MISLEADING_SUM_FRAC


@dataclass(frozen=True, slots=True)
class PointAnalysis:
    """One N across its repetitions."""

    n: int
    finish_s: tuple[float, ...]  # those of one measured batch: the rep `shown_rep` (never a composite)
    tokens: tuple[int, ...]  # what that batch's requests produced, in finishing order
    aggregate: Summary | None
    verdict: Verdict
    reason: str
    batches: tuple[BatchAnalysis, ...]
    evidence: tuple[Evidence, ...] = ()
    shown_rep: int | None = None  # the rep whose aggregate is the median over the reps
    decided_by_witness: bool = False  # the definite verdict rests on the server's word alone

    @property
    def reps_taken(self) -> int:
        return len(self.batches)

    @property
    def aggregate_tok_s(self) -> float | None:
        return None if self.aggregate is None else self.aggregate.median


@dataclass(frozen=True, slots=True)
class StaircaseAnalysis:
    single_s: float | None
    points: tuple[PointAnalysis, ...]
    verdict: Verdict
    verdict_reason: str
    trend: Trend
    trend_reason: str
    trend_ratios: dict[int, float]
    modal_tokens: int | None
    invalid: tuple[Finding, ...] = ()
    warnings: tuple[Finding, ...] = ()
    single_times_s: tuple[float, ...] = ()  # every N=1 measurement behind `single_s`, in run order
    evidence: tuple[Evidence, ...] = ()  # what decided the run verdict
    # per checked N: the client's timing error as a fraction of that point's last finish, the most
    # it moves the aggregate (tokens / last finish); above FIGURE_FRAC the aggregate is client-bound
    aggregate_error_frac: dict[int, float] = field(default_factory=dict)
    # the N > 1 whose trend is read from their schedule: queues whose generating windows never
    # overlapped, where hiding each request's prefill could gain at most `prefill_gain_bound`
    trend_by_schedule: tuple[int, ...] = ()
    prefill_gain_bound: float | None = None
    # the agg(N)/agg(1) at or above which the trend reads rising: the rule travels with the run it judged
    trend_rising_ratio: float = RISING_RATIO

    @property
    def decided_by_witness(self) -> bool:
        """The run's definite verdict rests on the server's word alone (the stopwatch was ambiguous)."""
        return self.verdict in DEFINITE_VERDICTS and not STOPWATCH.intersection(self.evidence)

    @property
    def single_spread(self) -> float | None:
        """Slowest / fastest N=1 time - 1: how far the single-request reference moved during the run."""
        t = self.single_times_s
        return max(t) / min(t) - 1.0 if len(t) >= 2 and min(t) > 0 else None

    @property
    def valid(self) -> bool:
        return not self.invalid

    def record(self) -> shape.StaircaseBody:
        """The body fields this analysis decides; the run adds its own (design, server, points with their
        raw requests: `experiments.staircase.StaircaseResult.body`). A new field of the analysis is written
        here and in the body record, and nowhere else."""
        return shape.StaircaseBody(
            verdict=self.verdict, verdict_reason=self.verdict_reason, trend=self.trend, trend_reason=self.trend_reason,
            trend_ratios={str(n): r for n, r in sorted(self.trend_ratios.items())},
            single_s=self.single_s, single_times_s=self.single_times_s, single_spread=self.single_spread,
            evidence=self.evidence, decided_by_witness=self.decided_by_witness,
            trend_by_schedule=self.trend_by_schedule, prefill_gain_bound=self.prefill_gain_bound,
            modal_tokens=self.modal_tokens, trend_rising_ratio=self.trend_rising_ratio,
            invalid=tuple(f.record() for f in self.invalid), warnings=tuple(f.record() for f in self.warnings),
        )


def _ok_by_finish(batch: BatchResult) -> list[RequestRecord]:
    return [r for r in batch.records_by_finish() if r.ok]


def single_times_s(batches: Sequence[MeasuredBatch], modal: int | None = None) -> list[float]:
    """Every usable N=1 measurement, in run order (before and after the batches, and any extras).

    A single request whose output length is off the run's modal length times a different amount
    of work, so it is no reference for the others and is left out.
    """
    return [
        mb.batch.finish_s()[-1]
        for mb in batches
        if mb.n == 1 and mb.batch.finish_s() and not any(off_length(r.tokens, modal) for r in _ok_by_finish(mb.batch))
    ]


def single_time_s(batches: Sequence[MeasuredBatch], modal: int | None = None) -> float | None:
    """The N=1 reference: the median of every N=1 measurement, robust to one slow or fast one."""
    times = single_times_s(batches, modal)
    return median(times) if times else None


def batch_doubt(mb: MeasuredBatch, single_s: float | None, modal: int | None) -> str | None:
    """Why this batch's finish times cannot show the server's schedule, or None when they can.

    Unequal outputs smear a staircase into a cluster (a serial server finishing one long request
    and three short ones reads as four finishes together), and requests that did not leave
    together finish apart for the client's reasons, not the server's.
    """
    off = [r for r in _ok_by_finish(mb.batch) if off_length(r.tokens, modal)]
    if off:
        lengths = ", ".join(f"#{r.index} {r.tokens}" for r in off)
        return (
            f"output lengths differ (tokens {lengths} vs modal {modal}): unequal requests finish apart "
            "or together whatever the schedule"
        )
    skew_s = mb.batch.dispatch_skew_ns / NS_PER_S
    if skew_invalid(skew_s, single_s):
        return (
            f"the requests did not start together: dispatch skew {skew_s * 1000:.1f} ms "
            f"> {DISPATCH_SKEW_FRAC:.0%} of the single time"
        )
    return None


def stall_doubt(batch: BatchResult, single_s: float | None) -> str | None:
    """Why the client's own lateness leaves this batch's finish times unknown, or None.

    A late window matters when it is at least STALL_DOUBT_FRAC of the single time and a finish was
    read in it or as it drained: that finish may have happened anywhere inside it. The judge is
    `analysis.client_timing` over the driver's ticker; a batch recorded without one (a record made
    before it) is judged from the coarser stall list of its noise record."""
    if not single_s or single_s <= 0:
        return None
    min_ns = STALL_DOUBT_FRAC * single_s * NS_PER_S
    ends = sorted(r.end_ns for r in batch.records if r.ok and r.end_ns is not None)
    if batch.lateness is not None:
        read = len(late_reads(batch.lateness, ends, min_ns))
        if read:
            worst_s = longest_holding(batch.lateness, ends, min_ns) / NS_PER_S
            return (
                f"the client itself was late by up to {worst_s:.2f} s ({STALL_DOUBT_FRAC:.0%} of the single time or "
                f"more), and {read} of the finishes were read as it caught up: they may have "
                "happened any time during it"
            )
        return None
    if batch.noise is None:
        return None
    slack_ns = int(STALL_READ_FRAC * single_s * NS_PER_S)
    for a, b in batch.noise.stalls_over(int(min_ns)):
        read = sum(1 for e in ends if a <= e <= b + slack_ns)
        if read:
            return (
                f"the client itself stalled: its event loop did not run for {(b - a) / NS_PER_S:.2f} s "
                f"({(a - batch.release_ns) / NS_PER_S:.2f}-{(b - batch.release_ns) / NS_PER_S:.2f} s after the "
                f"release, {STALL_DOUBT_FRAC:.0%} of the single time or more), and {read} of the finishes were read as "
                "it ended: they may have happened any time during it"
            )
    return None


WITNESS_WORDS = {"server_gauges": "gauges", "server_timings": "per-request timings"}


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
                reason=f"the completion times say {verdict.verdict} ({verdict.reason}), but {against[0].description}",
            )
        return replace(verdict, evidence=(*verdict.evidence, *agreeing), witnesses=readings)
    first = readings[0]
    if not may_decide or any(not w.agrees(first.schedule, first.slots) for w in readings[1:]):
        return replace(verdict, witnesses=readings)
    words = " and ".join(dict.fromkeys(WITNESS_WORDS.get(w.source, w.source) for w in readings))
    return replace(
        verdict,
        verdict=first.schedule,
        evidence=tuple(w.source for w in readings),
        witnesses=readings,
        times_verdict=verdict.verdict,
        slots=first.slots if first.schedule == "partial" else None,
        decided_by_witness=True,
        reason=(f"decided by the server's own {words}; the completion times alone were ambiguous "
                f"({verdict.reason}): {'; '.join(w.description for w in readings)}"),
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
                          reason=f"{why} (it looked like {verdict.verdict})")
    elif stalled is not None:
        verdict = replace(verdict, reason=f"{stalled}; {verdict.reason}")
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


def point_verdict(n: int, batches: Sequence[BatchAnalysis]) -> tuple[Verdict, str, tuple[Evidence, ...]]:
    """One N across its reps: the definite verdict its reps give, when they all give the same one
    and at least half the reps are definite; repetitions that name two schedules are inconclusive."""
    if n == 1:
        return batches[0].verdict.verdict, batches[0].verdict.reason, ()
    definite = [b for b in batches if b.verdict.verdict in DEFINITE_VERDICTS]
    kinds = {_schedule_key(b.verdict) for b in definite}
    if len(kinds) > 1:
        return "inconclusive", "repetitions disagree: " + ", ".join(b.verdict.verdict for b in batches), ()
    if not definite or 2 * len(definite) < len(batches):
        last = batches[-1].verdict
        if len(batches) == 1:
            return "inconclusive", last.reason, ()
        return "inconclusive", (
            f"{len(definite)} of {len(batches)} reps decided, fewer than half (last: {last.reason})"
        ), ()
    first = definite[0].verdict
    reason = first.reason
    if len(batches) > 1:
        reason += f" ({len(definite)} of {len(batches)} reps {first.verdict}, the rest inconclusive)" if len(
            definite
        ) < len(batches) else f" ({len(batches)} of {len(batches)} reps)"
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


def analyze_point(n: int, batches: Sequence[BatchAnalysis], noises: Sequence[Any] = ()) -> PointAnalysis:
    verdict, reason, evidence = point_verdict(n, batches)
    if verdict == "inconclusive" and (busy := busy_words(noises)) is not None:
        reason = f"{reason}; {busy}"
    aggs = [b.aggregate_tok_s for b in batches if b.aggregate_tok_s is not None]
    shown = median_batch(batches)
    by_witness = verdict in DEFINITE_VERDICTS and not STOPWATCH.intersection(evidence)
    return PointAnalysis(
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


def _ref(mb: MeasuredBatch, r: RequestRecord, detail: str) -> RequestRef:
    return RequestRef(n=mb.n, rep=mb.rep, index=r.index, nonce=r.nonce, detail=detail)


def length_finding(batches: Sequence[MeasuredBatch]) -> tuple[int | None, Finding | None]:
    pairs = [(mb, r) for mb in batches for r in mb.batch.records if r.ok]
    modal, bad = length_outliers([r.tokens for _, r in pairs])
    if not bad:
        return modal, None
    refs = tuple(_ref(pairs[i][0], pairs[i][1], f"{pairs[i][1].tokens} tokens vs modal {modal}") for i in bad)
    return modal, Finding(
        code="output_length",
        message=f"{len(refs)} request(s) more than {OUTPUT_LENGTH_TOLERANCE:.0%} away from the modal length "
                f"{modal} tokens",
        hint="unequal outputs smear a staircase into a cluster; the server may ignore ignore_eos (Ollama stops at EOS)",
        requests=refs,
    )


def failed_finding(batches: Sequence[MeasuredBatch]) -> Finding | None:
    refs = tuple(
        _ref(mb, r, f"{r.status}: {r.error or 'no detail'}") for mb in batches for r in mb.batch.records if not r.ok
    )
    if not refs:
        return None
    return Finding(
        code="failed_requests",
        message=f"{len(refs)} request(s) failed; the batches they belong to are not N requests",
        hint="look at the errors in the JSON; no request is retried because a retry changes N",
        requests=refs,
    )


def skew_finding(batches: Sequence[MeasuredBatch], single_s: float | None) -> Finding | None:
    bad = [mb for mb in batches if skew_invalid(mb.batch.dispatch_skew_ns / NS_PER_S, single_s)]
    if not bad or single_s is None:
        return None
    worst = max(mb.batch.dispatch_skew_ns for mb in bad) / NS_PER_S
    where = ", ".join(f"N={mb.n} rep {mb.rep + 1}" for mb in bad)
    return Finding(
        code="dispatch_skew",
        message=(
            f"requests did not start together: dispatch skew up to {worst * 1000:.1f} ms "
            f"> {DISPATCH_SKEW_FRAC:.0%} of the single time ({where})"
        ),
        hint="run from a less loaded machine, or use a larger --tokens so each request takes longer",
    )


def contamination_finding(batches: Sequence[MeasuredBatch]) -> Finding | None:
    refs = tuple(
        _ref(mb, r, f"{r.server.cached_prompt_tokens if r.server else '?'} cached prompt tokens")
        for mb in batches
        for r in mb.batch.records
        if record_contaminated(r)
    )
    if not refs:
        return None
    return Finding(
        code="prefix_cache_contamination",
        message=f"contaminated by the prefix cache: {len(refs)} measured request(s) reused cached prompt tokens",
        hint="every prompt starts with its own nonce; a hit means the server caches across the nonce or "
             "matched a suffix",
        requests=refs,
    )


def approximate_finding(batches: Sequence[MeasuredBatch]) -> Finding | None:
    refs = tuple(
        _ref(mb, r, f"count from {r.tokens_source}")
        for mb in batches
        for r in mb.batch.records
        if r.ok and r.tokens_approximate
    )
    if not refs:
        return None
    return Finding(
        code="approximate_tokens",
        message=f"{len(refs)} request(s) have approximate token counts (the server reported none)",
        hint="use a dialect that reports usage (--api openai with stream_options) for exact counts",
        requests=refs,
    )


def short_of_request_finding(modal: int | None, requested: int) -> Finding | None:
    if modal is None or modal >= requested * (1 - OUTPUT_LENGTH_TOLERANCE):
        return None
    return Finding(
        code="short_outputs",
        message=f"requests produced {modal} tokens where {requested} were asked for",
        hint="the server stops early (an EOS ceiling or a context limit); the aggregate uses the tokens produced",
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


def _slot_range(batches: Sequence[BatchAnalysis]) -> tuple[int, float, list[str]]:
    """The slots every definite batch among `batches` allows together (lo > hi: none), and what each said."""
    lo, hi, seen = 1, float("inf"), []
    for b in batches:
        implied = slots_implied(b.n, b.verdict)
        if implied is None:
            continue
        seen.append(f"N={b.n} {b.verdict.verdict}")
        lo, hi = max(lo, implied[0]), min(hi, implied[1])
    return lo, hi, seen


def _by_stopwatch(b: BatchAnalysis) -> bool:
    return b.verdict.verdict in DEFINITE_VERDICTS and not b.verdict.decided_by_witness


def _clean_point(p: PointAnalysis) -> bool:
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
    against = tuple(f"N={c.n} rep {c.rep + 1} {c.verdict.verdict}" for c in clocked
                    if (s := slots_implied(c.n, c.verdict)) is not None
                    and max(s[0], implied[0]) > min(s[1], implied[1]))
    reason = (f"undecided: the stopwatch decided {', '.join(against)}, and no fixed number of slots gives both that "
              f"and the {v.verdict} the server's witnesses read here, so their word is set aside (it was {v.reason})")
    return replace(b, verdict=replace(v, verdict="inconclusive", evidence=(), slots=None, decided_by_witness=False,
                                      contradicted_by=v.witnesses, overruled_by=against, reason=reason))


def contradiction(points: Sequence[PointAnalysis]) -> str | None:
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
            return f"the points disagree ({', '.join(dict.fromkeys(seen))}): no fixed number of slots gives both"
    return None


def _run_verdict(points: Sequence[PointAnalysis]) -> tuple[Verdict, str, tuple[Evidence, ...]]:
    top = max(points, key=lambda p: p.n, default=None)
    if top is None or top.n == 1:
        return "inconclusive", "no N > 1 was measured", ()
    if top.verdict in DEFINITE_VERDICTS and (why := contradiction(points)) is not None:
        return "inconclusive", why, ()
    return top.verdict, f"N={top.n}: {top.reason}", top.evidence


def single_aggregates(points: Sequence[PointAnalysis]) -> list[float]:
    """The aggregate of every N=1 measurement: the trend's references."""
    return [b.aggregate_tok_s for p in points if p.n == 1 for b in p.batches if b.aggregate_tok_s is not None]


def prefill_gain_bound(batches: Sequence[MeasuredBatch]) -> float | None:
    """The most a queue can gain over one request alone by hiding each request's prefill behind
    the previous one's generation (seed 003's pipelining): latency / (latency - TTFT) of the N=1
    requests, the median over them. A queue whose windows never overlap gains nothing else."""
    gains = [
        r.latency_ns / (r.latency_ns - r.ttft_ns)
        for mb in batches if mb.n == 1 for r in mb.batch.records
        if r.ok and r.latency_ns and r.ttft_ns is not None and 0 <= r.ttft_ns < r.latency_ns
    ]
    return median(gains) if gains else None


def _trend(points: Sequence[PointAnalysis],
           bound: float | None) -> tuple[Trend, str, dict[int, float], tuple[int, ...], float | None]:
    """The trend, its reason, agg(N)/agg(1) per N, the N read from their schedule, and the bound.

    A queue whose generating windows never overlapped ran every request alone: its aggregate is one
    request's rate, whatever the machine's speed did between the N=1 batches and this one (on a
    busy machine the single-request time wandered 3.45-4.80 s inside one run, and agg(N)/agg(1) of
    clean queues read 0.77-1.26x). Such a point reads as flat from its schedule when hiding its
    prefill could gain no more than the flat band allows; its measured ratio is still shown."""
    refs = single_aggregates(points)
    base = median(refs) if refs else None
    fastest = max(refs) if refs else None
    ratios = {p.n: r for p in points if p.n > 1 and (r := ratio(p.aggregate_tok_s, base)) is not None}
    strict = {p.n: r for p in points if p.n > 1 and (r := ratio(p.aggregate_tok_s, fastest)) is not None}
    own = {p.n: b for p in points if p.n > 1 and (b := own_gain_bound(p)) is not None}
    verdicts = {p.n: p.verdict for p in points}
    scheduled: tuple[int, ...] = ()
    if bound is not None and bound <= FLAT_HI_RATIO:
        scheduled = tuple(p.n for p in points if p.n in ratios and p.verdict == "staircase"
                          and "generation_windows" in p.evidence)
    used = {n: 1.0 if n in scheduled else r for n, r in ratios.items()}
    trend, reason = classify_trend(used, against_fastest=strict, own_bound=own, verdicts=verdicts)
    if scheduled and trend == "flat":
        measured = ", ".join(f"N={n} {ratios[n]:.2f}x" for n in scheduled)
        reason = (f"{reason}, read from the schedule at {', '.join(f'N={n}' for n in scheduled)}: every request there "
                  f"generated alone (the windows never overlapped), and hiding its prefill could gain at most "
                  f"{bound:.2f}x; measured against the N=1 batches: {measured}")
    return trend, reason, ratios, scheduled, bound


def own_gain_bound(point: PointAnalysis) -> float | None:
    """The point's ceiling on agg(N)/agg(1) from its own batches (median over reps): its aggregate
    over the first request's rate, tokens / first finish. No schedule runs a request faster than
    it runs alone, so the first finish is at most one single time and the true gain is at most this."""
    bounds = [
        b.aggregate_tok_s / (b.tokens[0] / b.finish_s[0])
        for b in point.batches
        if b.aggregate_tok_s and b.tokens and b.finish_s and b.tokens[0] > 0 and b.finish_s[0] > 0
    ]
    return median(bounds) if bounds else None


def reference_finding(times: Sequence[float]) -> Finding | None:
    """The N=1 measurements moved by more than REFERENCE_SPREAD_WARN, faster or slower."""
    if len(times) < 2 or min(times) <= 0 or max(times) / min(times) - 1.0 <= REFERENCE_SPREAD_WARN:
        return None
    shown = ", ".join(f"{t:.2f}" for t in times)
    way = "slower" if times[-1] > times[0] else "faster"
    return Finding(
        code="reference_spread",
        message=(
            f"the single-request time moved during the run: N=1 took {shown} s in turn (the last {way} than the "
            f"first; {max(times) / min(times) - 1.0:.0%} apart); ratios use their median"
        ),
        hint="the machine's speed drifted (load, heat, frequency): run on a quieter machine or add --reps",
    )


def reference_disagreement_finding(points: Sequence[PointAnalysis], single_s: float | None) -> Finding | None:
    """Staircases decided by their own even steps where the N=1 reference was off: named."""
    where = [
        f"N={p.n} rep {b.rep + 1} (first finish {b.finish_s[0]:.2f} s)"
        for p in points
        for b in p.batches
        if b.verdict.reference_disagrees and b.finish_s
    ]
    if not where or single_s is None:
        return None
    return Finding(
        code="reference_disagrees",
        message=(
            f"the N=1 reference ({single_s:.2f} s) disagrees with the run's own evidence: a queue's first finish is "
            f"one request alone, and in {', '.join(where)} the steps are even with it but not with the reference"
        ),
        hint="the single-request time swings on this machine; the staircase rests on the batch's own steps",
    )


def witness_finding(points: Sequence[PointAnalysis]) -> Finding | None:
    """Witnesses that contradicted the stopwatch, which stood: the server's self-report does not
    describe its schedule, and that is a finding of its own. Either they read another schedule than
    a clean stopwatch verdict of their own batch, or they decided a batch the times left ambiguous
    against what the stopwatch decided at another N or rep, and were set aside (`overruled_by`)."""
    seen = [(p, b) for p in points for b in p.batches if b.verdict.contradicted_by]
    if not seen:
        return None
    stood = [(p, b) for p, b in seen if not b.verdict.overruled_by]
    aside = [(p, b) for p, b in seen if b.verdict.overruled_by]
    p, b = (stood or aside)[-1]  # the largest N shows the contradiction most plainly
    said = "; ".join(w.description for w in b.verdict.contradicted_by)
    words = " and ".join(dict.fromkeys(WITNESS_WORDS.get(w.source, w.source) for _, c in seen
                                       for w in c.verdict.contradicted_by))
    where = ", ".join(f"N={q.n} rep {c.rep + 1}" for q, c in seen)
    message = f"the server's own {words} contradict the stopwatch ({where}): "
    if stood:
        message += f"at N={p.n} they said {said}, while {b.verdict.reason}"
    if aside:
        q, c = aside[-1]
        message += "; " if stood else ""
        message += (f"at N={q.n} rep {c.rep + 1} they decided {c.verdict.contradicted_by[0].schedule} where the "
                    f"completion times were ambiguous ({'; '.join(w.description for w in c.verdict.contradicted_by)}), "
                    f"while the stopwatch decided {', '.join(c.verdict.overruled_by)}: their word was set aside")
    return Finding(
        code="witness_contradicts",
        message=f"{message}: its {words} do not describe its schedule",
        hint="the verdict rests on the completion times; do not read this server's self-report as its schedule",
    )


def client_finding(checks: Sequence[ClientCheck]) -> Finding | None:
    """The run is invalid when the pre-flight found the client itself the bottleneck at some N: its
    finish times there would be the client's as much as the server's."""
    message = client_bound_message(checks)
    return None if message is None else Finding(code="client_bound", message=message, hint=CLIENT_FIX)


def aggregate_error_fracs(points: Sequence[PointAnalysis], checks: Sequence[ClientCheck]) -> dict[int, float]:
    """Per N with a pre-flight: how far the client's timing error (p99 stamp delay + skew) can move
    the aggregate, as a fraction of it: the error over the point's last finish."""
    by_n = {c.streams: c for c in checks}
    out = {}
    for p in points:
        check = by_n.get(p.n)
        if check is not None and p.finish_s and p.finish_s[-1] > 0:
            out[p.n] = check.chosen.error_ms / 1e3 / p.finish_s[-1]
    return out


def aggregate_finding(fracs: dict[int, float]) -> Finding | None:
    """A warning naming each N whose aggregate the client cannot resolve to FIGURE_FRAC."""
    loose = {n: f for n, f in sorted(fracs.items()) if f > FIGURE_FRAC}
    if not loose:
        return None
    where = ", ".join(f"N={n} to +-{f:.1%}" for n, f in loose.items())
    return Finding(
        code="aggregate_client_bound",
        message=(
            f"the aggregate is known only {where}: the client's timing error is more than {FIGURE_FRAC:.0%} of "
            f"the last finish there, so those throughput figures are the client's as much as the server's (the "
            f"verdicts, which allow {CLIENT_ERROR_FRAC:.0%} of the warm-up request, stand)"
        ),
        hint=CLIENT_FIX,
    )


def analyze_staircase(
    batches: Sequence[MeasuredBatch],
    *,
    tokens_requested: int,
    client_checks: Sequence[ClientCheck] = (),
    witnesses_decide: bool = True,
) -> StaircaseAnalysis:
    """Judge a staircase run: per-batch verdicts, per-N points, the run verdict, trend and validity;
    `client_checks` are the pre-flight's (a client-bound N makes the run invalid); with
    `witnesses_decide` off (--evidence stopwatch) the server's witnesses never decide a batch."""
    modal, length = length_finding(batches)
    singles = single_times_s(batches, modal)
    single = median(singles) if singles else None
    analysed = set_aside_witness_decisions([analyze_batch(mb, single, modal, witnesses_decide=witnesses_decide)
                                            for mb in batches])
    ns = sorted({b.n for b in analysed})
    noise = {n: [mb.batch.noise for mb in batches if mb.n == n] for n in ns}
    points = tuple(analyze_point(n, [b for b in analysed if b.n == n], noise[n]) for n in ns)
    verdict, verdict_reason, evidence = _run_verdict(points)
    trend, trend_reason, ratios, scheduled, bound = _trend(points, prefill_gain_bound(batches))
    fracs = aggregate_error_fracs(points, client_checks)
    invalid = [f for f in (length, failed_finding(batches), skew_finding(batches, single),
                           client_finding(client_checks))
               if f is not None]
    warnings = [
        f
        for f in (
            contamination_finding(batches),
            approximate_finding(batches),
            short_of_request_finding(modal, tokens_requested),
            reference_finding(singles),
            reference_disagreement_finding(points, single),
            aggregate_finding(fracs),
            witness_finding(points),
        )
        if f is not None
    ]
    return StaircaseAnalysis(
        single_s=single,
        points=points,
        verdict=verdict,
        verdict_reason=verdict_reason,
        trend=trend,
        trend_reason=trend_reason,
        trend_ratios=ratios,
        modal_tokens=modal,
        invalid=tuple(invalid),
        warnings=tuple(warnings),
        single_times_s=tuple(singles),
        evidence=evidence,
        aggregate_error_frac=fracs,
        trend_by_schedule=scheduled,
        prefill_gain_bound=bound,
    )


def needs_more(analysis: StaircaseAnalysis) -> tuple[list[int], bool]:
    """What another rep could decide: the N > 1 points left inconclusive (by their completion times,
    not by a failed request or a contradiction between points), and whether the trend waits on a
    better N=1 reference."""
    if analysis.invalid:
        return [], False
    ns = [p.n for p in analysis.points if p.n > 1 and p.verdict == "inconclusive"]
    return ns, analysis.trend == "inconclusive"
