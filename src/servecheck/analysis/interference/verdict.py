"""The verdict across prompt sizes, pure: chunked, blocking, isolated or inconclusive from how the
victims' step follows the intruder's prefill window from the smallest valid size to the largest, with
the evidence that decided it and the chunk it implies."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servecheck.analysis.interference.intrusion import STRETCH_RATIO
from servecheck.analysis.interference.points import Point
from servecheck.analysis.stats import median
from servecheck.model.bodies.interference import InterferenceEvidence, InterferenceVerdict
from servecheck.model.reason import Reason


# The intruder's TTFT must grow at least this much from the smallest to the largest size: below, the
# prefill is too cheap to see against the decode steps, and no gap could tell chunks from one step.
PREFILL_GROWTH_MIN = 2.0
# The victims' "step" below is the median of their stretched gaps during the window: the step that carried
# the prompt (all of it, or one chunk of it); the longest gap is reported beside it.
# Blocking: at the largest size the victims' step covers at least 60% of the prefill window (one
# step holds the whole prompt, so the freeze is the window itself less the edges that fall inside a
# normal step), and it grew with the prefill: at least half as fast as the TTFT did.
BLOCKING_COVER = 0.6
# Chunked: at the largest size the victims' step covers at most 40% of the prefill window (the prompt took
# at least two or three steps, each with the victims' tokens in it), and it grew at most half as fast as
# the TTFT: bounded by the chunk, not by the prompt.
CHUNKED_COVER = 0.4
PROPORTIONAL = 0.5
# Share of the prefill window the victims spent in stretched gaps (the median victim, gaps clipped to the
# window). A prompt prefilled in chunks beside the victims makes every step of the window a stretched one,
# so the stretched gaps tile it; a client or machine hiccup stretches one gap here and there. Chunked needs
# at least half the window tiled at the largest size; isolated allows at most a fifth at every size. Seen on
# the simulator with three pytest workers on 2 cores: an isolated prefill read `chunked` on one 19 ms
# hiccup, 4% of a 432 ms window.
CHUNKED_SHARE = 0.5
ISOLATED_SHARE = 0.2
# Isolated: at every size the longest victim gap during the prefill stays below STRETCH_RATIO x baseline.


@dataclass(frozen=True, slots=True)
class Evidence:
    """The numbers that decided the verdict: the smallest and largest valid sizes and what changed between them."""

    size_lo: int
    size_hi: int
    gap_lo_s: float  # the smallest size's step (median stretched gap; the longest gap where none stretched)
    gap_hi_s: float
    longest_hi_s: float  # the largest size's longest gap
    ttft_lo_s: float
    ttft_hi_s: float
    baseline_s: float
    stretch_hi: float  # the largest size's longest gap over the baseline
    cover_hi: float  # the largest size's step over its prefill window
    gap_growth: float  # the step, largest size over smallest
    prefill_growth: float  # TTFT, largest size over smallest
    share_hi: float = 0.0  # the largest size's stretched share of its window (CHUNKED_SHARE)
    share_max: float = 0.0  # the largest stretched share at any valid size (ISOLATED_SHARE)

    def record(self) -> InterferenceEvidence:
        """The evidence as the document records it, with the thresholds it was judged against."""
        return InterferenceEvidence(
            size_lo=self.size_lo, size_hi=self.size_hi, gap_lo_s=self.gap_lo_s, gap_hi_s=self.gap_hi_s,
            longest_hi_s=self.longest_hi_s, ttft_lo_s=self.ttft_lo_s, ttft_hi_s=self.ttft_hi_s,
            baseline_s=self.baseline_s, stretch_hi=self.stretch_hi, cover_hi=self.cover_hi, gap_growth=self.gap_growth,
            prefill_growth=self.prefill_growth, stretched_share_hi=self.share_hi, stretched_share_max=self.share_max,
            thresholds={"stretch_ratio": STRETCH_RATIO, "blocking_cover": BLOCKING_COVER,
                        "chunked_cover": CHUNKED_COVER, "proportional": PROPORTIONAL,
                        "prefill_growth_min": PREFILL_GROWTH_MIN, "chunked_share": CHUNKED_SHARE,
                        "isolated_share": ISOLATED_SHARE},
        )


@dataclass(frozen=True, slots=True)
class InterferenceAnalysis:
    verdict: InterferenceVerdict
    reason: Reason
    decided_by: str  # "victim gaps" where the stopwatch decided; "nothing" for inconclusive
    evidence: Evidence | None = None
    chunk_tokens: float | None = None
    chunk_interval: tuple[float, float] | None = None


def what_left_sizes_unread(points: Sequence[Point]) -> Reason:
    """The run's own reason why sizes could not be read: the client or a hop where either left every rep of
    some size unread (each size's problems name the rest)."""
    unread = [p for p in points if not p.valid and p.readings]
    client = [p.prompt_tokens for p in unread if all(r.client_late for r in p.readings)]
    hop = [p.prompt_tokens for p in unread if all(r.hop_held for r in p.readings)]
    said = []
    if client:
        said.append(
            Reason("interference.unread_client_late", sizes=tuple(client)))
    if hop:
        said.append(
            Reason("interference.unread_hop_bursts", sizes=tuple(hop)))
    if not said:
        return Reason("interference.unread_elsewhere")
    others = len(set(client) | set(hop)) < len(unread)
    return Reason("interference.unread", parts=tuple(said), others=others)


def evidence_of(points: Sequence[Point]) -> Evidence | None:
    valid = [p for p in points if p.valid and p.max_gap_s and p.ttft_s and p.baseline_s]
    if len(valid) < 2:
        return None
    lo, hi = valid[0], valid[-1]
    assert lo.max_gap_s and hi.max_gap_s and lo.ttft_s and hi.ttft_s and hi.baseline_s
    step_lo, step_hi = lo.step_gap_s or lo.max_gap_s, hi.step_gap_s or hi.max_gap_s
    baselines = [p.baseline_s for p in valid if p.baseline_s]
    shares = [p.stretched_share or 0.0 for p in valid]
    return Evidence(
        size_lo=lo.prompt_tokens, size_hi=hi.prompt_tokens, gap_lo_s=step_lo, gap_hi_s=step_hi,
        longest_hi_s=hi.max_gap_s, ttft_lo_s=lo.ttft_s, ttft_hi_s=hi.ttft_s, baseline_s=median(baselines),
        stretch_hi=hi.max_gap_s / hi.baseline_s, cover_hi=step_hi / hi.ttft_s, gap_growth=step_hi / step_lo,
        prefill_growth=hi.ttft_s / lo.ttft_s, share_hi=shares[-1], share_max=max(shares),
    )


def analyse_interference(points: Sequence[Point]) -> InterferenceAnalysis:
    """chunked | blocking | isolated | inconclusive from the victims' gaps alone, with what decided it."""
    e = evidence_of(points)
    if e is None:
        n = sum(p.valid for p in points)
        unread = what_left_sizes_unread(points)
        return InterferenceAnalysis("inconclusive", Reason("interference.too_few_sizes", valid=n, unread=unread),
                                    "nothing")
    span = dict(size_lo=e.size_lo, size_hi=e.size_hi)
    if e.prefill_growth < PREFILL_GROWTH_MIN:
        return InterferenceAnalysis("inconclusive", (
            Reason("interference.too_cheap", growth=e.prefill_growth, **span, ttft_lo_s=e.ttft_lo_s,
                   ttft_hi_s=e.ttft_hi_s, needed=PREFILL_GROWTH_MIN)), "nothing", e)
    stretched = [p for p in points if p.valid and p.max_gap_s and p.baseline_s
                 and p.max_gap_s >= STRETCH_RATIO * p.baseline_s]
    if not stretched:
        return InterferenceAnalysis("isolated", (
            Reason("interference.isolated_unstretched", ratio=STRETCH_RATIO, stretch_hi=e.stretch_hi, **span,
                   growth=e.prefill_growth)), "victim gaps", e)
    if e.share_max <= ISOLATED_SHARE and e.cover_hi < BLOCKING_COVER:
        return InterferenceAnalysis("isolated", (
            Reason("interference.isolated_few_stretched", share_max=e.share_max, allowed=ISOLATED_SHARE,
                   growth=e.prefill_growth, **span)), "victim gaps", e)
    growth = Reason("interference.step_growth", gap_growth=e.gap_growth, prefill_growth=e.prefill_growth, **span)
    cover = Reason("interference.step_cover", size_hi=e.size_hi, gap_hi_s=e.gap_hi_s, longest_hi_s=e.longest_hi_s,
               cover_hi=e.cover_hi, ttft_hi_s=e.ttft_hi_s)
    if e.cover_hi >= BLOCKING_COVER and e.gap_growth >= PROPORTIONAL * e.prefill_growth:
        return InterferenceAnalysis("blocking", Reason("interference.blocking", cover=cover, growth=growth),
                                    "victim gaps", e)
    if (e.cover_hi <= CHUNKED_COVER and e.gap_growth <= PROPORTIONAL * e.prefill_growth
            and e.stretch_hi >= STRETCH_RATIO and e.share_hi >= CHUNKED_SHARE):
        chunk, interval = chunk_estimate(points)
        return InterferenceAnalysis("chunked", (
            Reason("interference.chunked", cover=cover, growth=growth)), "victim gaps", e, chunk, interval)
    # isolated is weighed on the largest share at any size, which can be a smaller size's: name it then
    smaller = e.share_max if e.share_max > e.share_hi else None
    return InterferenceAnalysis("inconclusive", (
        Reason("interference.undecided", cover=cover, growth=growth, share_hi=e.share_hi, smaller_share=smaller,
               blocking_cover=BLOCKING_COVER, chunked_cover=CHUNKED_COVER, chunked_share=CHUNKED_SHARE,
               isolated_share=ISOLATED_SHARE)), "nothing", e)


def chunk_estimate(points: Sequence[Point]) -> tuple[float | None, tuple[float, float] | None]:
    """The victims' step (their typical longest gap) x prefill rate over the reps of the sizes the prompt
    took several steps at (cover at most CHUNKED_COVER): the median, and the widest of their
    one-step-more-or-fewer intervals."""
    readings = [r for p in points for r in p.valid_readings if r.cover is not None and r.cover <= CHUNKED_COVER]
    values = [v for r in readings if (v := r.chunk_tokens) is not None]
    spans = [s for r in readings if (s := r.chunk_interval) is not None]
    if not values:
        return None, None
    return median(values), (min(s[0] for s in spans), max(s[1] for s in spans)) if spans else None
