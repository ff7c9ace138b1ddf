"""What one user's long prompt costs every other user's stream, pure: from the victims' token arrivals and
the intruder's send and first-token times, the victims' baseline interval, their longest and p99 gap while
the intruder was prefilled, the time they lost, and whether the server prefills in chunks, in one blocking
step, or elsewhere.

The stopwatch decides. A server that prefills a prompt of S tokens in one step freezes every running stream
for that whole step: the longest victim gap covers the intruder's whole prefill window and grows with it.
A server that splits the prompt into chunks of K tokens, each in the same step as the running streams'
next tokens, stretches every victim gap to about one chunk's prefill plus a decode step, however long the
prompt: the longest gap stays bounded while the prefill window grows, and longest gap x prefill rate is
about K. A server that prefills elsewhere leaves the victims' gaps as they were. Witnesses (the batch
budget an engine logged) are compared with the measured chunk; they never decide.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from servecheck.analysis.client_timing import delayed_since, vouch
from servecheck.analysis.stats import median
from servecheck.model.bodies.interference import InterferenceEvidence, InterferenceVerdict, InterferenceWitness
from servecheck.model.client import ClientLateness
from servecheck.model.records import NS_PER_S

# --- one intrusion ------------------------------------------------------------------------------
# A victim gap counts as stretched when half as long again as the baseline interval: the decode-step
# jitter of a steady stream on a quiet machine stays within a few tens of percent, while the smallest
# chunk worth a flag (a prefill as long as half a decode step) already adds 50%.
STRETCH_RATIO = 1.5
# Gaps outside the intrusion that the baseline needs: fewer, and one slow step would be the baseline.
MIN_BASELINE_GAPS = 6
# A server that counted fewer prompt tokens than this share of those sent cut the prompt (truncation or
# a context shift): the intruder was not the prompt asked for. 2% leaves room for a BOS or template token.
TRUNCATED_SHARE = 0.98
# Percentile of the window's gaps reported beside the longest (the p99).
GAP_PERCENTILE = 0.99

# --- the verdict across prompt sizes --------------------------------------------------------------
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
# A victims' median gap this short is no decode step (a loopback write takes microseconds, no engine
# decodes in a tenth of a millisecond): the stream was buffered on its way and released in bursts.
BURST_S = 0.0001
CLIENT_BURSTS = "the victims' tokens were read in bursts because the client itself was late"
HOP_BURSTS = "the victims' tokens arrived in bursts (their median gap under 100 µs) while the client read on time"
# Bursts are the client's doing where its stalls last a quarter of the time between bursts or more (120 ms
# of every 200 ms starved: 0.6); a hop's bursts 35-105 ms apart beside a busy client's 2-3 ms stalls: 0.04.
CLIENT_BURST_FRACTION = 0.25
# The victims' baseline is a median of their gaps: it is theirs while fewer than half of those gaps were
# read late by the client (a stall lengthens one gap and shortens the next: the median holds until the
# late ones are the middle); 40% leaves a margin.
CLIENT_BASELINE_SHARE = 0.4
# Likewise the victims' step during the prefill is the time-weighted median of their stretched gaps: the
# part of those gaps that may be the client's own stalls (from where a stall began to a closing token it
# read late) must stay under half of their time for that step to be the server's; 40% leaves a margin.
# A 1.2 s stall inside a chunked server's window made 65% of it; busy.py's 6 ms stalls at chunk ends 30%.
CLIENT_STRETCHED_SHARE = 0.4
# Isolated: at every size the longest victim gap during the prefill stays below STRETCH_RATIO x baseline.
# The user-facing sentence prices a blocking server's freeze against chunks of this many tokens (vLLM's
# and SGLang's common chunk sizes are 512-8192; llama.cpp's default -b is 2048).
REFERENCE_CHUNK = 512
# Tokens a witness's stated budget and the measured chunk may differ by, as a share of the stated one:
# llama.cpp's n_batch also carries the running streams' decode tokens, so the prompt's share of a step is
# n_batch less the streams; vLLM's budget likewise.
WITNESS_TOLERANCE = 0.25


@dataclass(frozen=True, slots=True)
class Intrusion:
    """One intruder and the victims that were generating when it was sent (run-clock nanoseconds)."""

    prompt_tokens: int  # as asked
    send_ns: int
    first_token_ns: int | None
    end_ns: int | None
    victims: tuple[tuple[int, ...], ...]  # each victim's token arrival times
    victim_errors: tuple[str | None, ...] = ()
    intruder_error: str | None = None
    sent_tokens: int | None = None  # the prompt by the server's tokenizer (None without one)
    counted_tokens: int | None = None  # the prompt tokens the server said it took
    server_slots: int | None = None  # what the server advertised it runs at once
    lateness: ClientLateness | None = None  # the client's own lateness over the trial (analysis.client_timing)


@dataclass(frozen=True, slots=True)
class Reading:
    """What one intrusion did to its victims."""

    prompt_tokens: int
    baseline_s: float | None
    max_gap_s: float | None
    p99_gap_s: float | None
    stretched: int | None
    lost_s: float | None
    ttft_s: float | None
    prefill_tok_s: float | None
    # The victims' step while the prompt was prefilled: the time-weighted median of the window's stretched
    # gaps (the gap in which the middle of the stretched time was spent). A blocking server's freeze is one
    # gap a victim, beside which a client stall or the step the intruder arrived in may also be stretched; a
    # chunked server's steps are many and alike, beside which one slow write of the client's must not pose as
    # a larger chunk. Weighted by time, the freezes carry almost all of it in the first case and the chunk
    # steps in the second. (The median of the longer half of the gaps, counted, read half the freeze on real
    # llama.cpp under load: two victims' 18.6 s freezes beside five short stretched gaps took the middle of
    # four, a freeze and a short gap.)
    step_gap_s: float | None = None
    window_gaps_s: tuple[float, ...] = ()
    problems: tuple[str, ...] = ()
    stretched_share: float | None = None  # CHUNKED_SHARE: the window's time in stretched gaps, median victim
    client_late: bool = False  # the client could not vouch for the prefill window: the rep is repeated
    hop_held: bool = False  # a hop on the way delivered the victims' tokens in bursts

    @property
    def valid(self) -> bool:
        return not self.problems and self.max_gap_s is not None and self.baseline_s is not None

    @property
    def cover(self) -> float | None:
        """The prompt's step over the prefill window: about 1 when one step held the whole prompt."""
        if self.step_gap_s is None or not self.ttft_s:
            return None
        return self.step_gap_s / self.ttft_s

    @property
    def chunk_tokens(self) -> float | None:
        """Longest gap (the prompt's step) x prefill rate: the prompt tokens one stretched step took."""
        if self.step_gap_s is None or self.prefill_tok_s is None:
            return None
        return self.step_gap_s * self.prefill_tok_s

    @property
    def chunk_interval(self) -> tuple[float, float] | None:
        """The chunk if the window held one step more or one fewer than TTFT / step: the intruder arrives
        inside a step, and its last chunk is a remainder."""
        if self.step_gap_s is None or not self.ttft_s:
            return None
        steps = self.ttft_s / self.step_gap_s
        return self.prompt_tokens / (steps + 1), self.prompt_tokens / max(steps - 1, 1.0)


def gaps(arrivals: Sequence[int]) -> list[tuple[int, int]]:
    return list(zip(arrivals, arrivals[1:]))


def time_weighted_median(durations: Sequence[float]) -> float:
    """The duration in which the middle of their summed time falls: each counted by how long it lasted."""
    ordered = sorted(durations)
    half, run = sum(ordered) / 2, 0.0
    for d in ordered:
        run += d
        if run >= half:
            return d
    return ordered[-1]


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1) of a non-empty sequence."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def intrusion_problems(i: Intrusion) -> list[str]:
    """Why an intrusion cannot be read, in words that name what to change."""
    problems = [f"victim {k + 1} failed: {e}" for k, e in enumerate(i.victim_errors) if e]
    if i.intruder_error or i.first_token_ns is None:
        problems.append(f"the intruder failed: {i.intruder_error or 'no first token'}")
        return problems
    if (i.sent_tokens is not None and i.counted_tokens is not None
            and i.counted_tokens < TRUNCATED_SHARE * i.sent_tokens):
        problems.append(f"the server counted {i.counted_tokens} prompt tokens of the {i.sent_tokens} sent: it "
                        "truncates long prompts, so this point is not the prompt asked for (point invalid)")
    live = [v for v in i.victims if v]
    if len(live) < len(i.victims):
        problems.append("a victim produced no tokens")
        return problems
    every_gap = [(a, b) for v in live for a, b in gaps(v)]
    if every_gap and median([b - a for a, b in every_gap]) < BURST_S * NS_PER_S:
        # the client collapsed the reads only where it was late for a good part of the time between bursts
        apart = [b - a for a, b in every_gap if b - a >= BURST_S * NS_PER_S]
        floor = CLIENT_BURST_FRACTION * median(apart) if apart else 0.0
        held = 0 if i.lateness is None else sum(
            delayed_since(i.lateness, b, max(floor, i.lateness.resolution_ns)) is not None for _, b in every_gap)
        if held > CLIENT_BASELINE_SHARE * len(every_gap):
            problems.append(f"{CLIENT_BURSTS} for {held} of their {len(every_gap)} reads (its own stalls): no decode "
                            "interval to measure against; the rep is repeated")
        else:
            problems.append(f"{HOP_BURSTS}: a stream buffered on its way (a proxy or gateway), no decode interval to "
                            "measure against; measure without the hop")
        return problems
    firsts, ends = [v[0] for v in live], [v[-1] for v in live]
    if live and max(firsts) >= min(ends):
        problems.append(f"the {len(live)} victims did not generate at the same time (one began after another ended): "
                        f"the server runs fewer than {len(live)} streams at once, the victims "
                        "queued, nothing to measure")
        return problems
    if live and max(firsts) > i.send_ns:
        problems.append("the intruder was sent before every victim was generating: raise --tokens or check the server")
    if live and min(ends) <= i.first_token_ns:
        slots = f" (it advertises {i.server_slots} slots)" if i.server_slots is not None else ""
        problems.append("a victim finished before the intruder's first token: the intruder waited for a slot, the "
                        f"server runs fewer than {len(live) + 1} streams at once{slots}, or --tokens is too short for "
                        f"a {i.prompt_tokens}-token prefill")
    return problems


def baseline_spans(i: Intrusion) -> list[tuple[int, int]]:
    """Victim gaps (as [from, to]) while every victim was generating and the intruder was not in the server."""
    live = [v for v in i.victims if v]
    if not live:
        return []
    start, stop = max(v[0] for v in live), min(v[-1] for v in live)
    busy_from, busy_to = i.send_ns, i.end_ns if i.end_ns is not None else (i.first_token_ns or i.send_ns)
    return [(a, b) for v in live for a, b in gaps(v)
            if a >= start and b <= stop and (b <= busy_from or a >= busy_to)]


def baseline_gaps(i: Intrusion) -> list[int]:
    """Victim gaps while every victim was generating and the intruder was not in the server."""
    return [b - a for a, b in baseline_spans(i)]


def window_gaps(i: Intrusion) -> list[int]:
    """Victim gaps that overlap the intruder's prefill window (its send to its first token)."""
    if i.first_token_ns is None:
        return []
    return [b - a for v in i.victims for a, b in gaps(v) if b > i.send_ns and a < i.first_token_ns]


def stretched_share(i: Intrusion, baseline_s: float | None) -> float | None:
    """The share of the prefill window each victim spent in stretched gaps (clipped to the window), median victim."""
    if i.first_token_ns is None or baseline_s is None or i.first_token_ns <= i.send_ns or not i.victims:
        return None
    lo, hi, limit = i.send_ns, i.first_token_ns, STRETCH_RATIO * baseline_s * NS_PER_S
    shares = [sum(min(b, hi) - max(a, lo) for a, b in gaps(v) if b > lo and a < hi and b - a > limit) / (hi - lo)
              for v in i.victims]
    return median(shares)


def client_problem(i: Intrusion, baseline_s: float | None) -> str | None:
    """Why the client cannot vouch for this rep, or None. A gap is lengthened by the client only where its
    closing token was read late (it fell in, or in the drain of, a stall of the client's own longer than
    (STRETCH_RATIO - 1) x the baseline, analysis.client_timing); a stall inside a gap that ends on time
    changes nothing. So:

    * the baseline (a median) is the server's while at most CLIENT_BASELINE_SHARE of its gaps have an end
      the client read late;
    * the stretched gaps in the prefill window are the server's while at most CLIENT_STRETCHED_SHARE of
      their time lies between a stall's start and a closing token the client read late in it (a gap that
      stretched only by a stall is doubtful all but its first normal step).
    """
    if baseline_s is None or i.first_token_ns is None or i.first_token_ns <= i.send_ns:
        return None  # unreadable for a reason of its own, named by intrusion_problems
    limit = (STRETCH_RATIO - 1) * baseline_s * NS_PER_S
    if i.lateness is not None:  # a client late for most gaps makes its own baseline (collapsed reads): first
        floor = max(limit, i.lateness.resolution_ns)
        base = baseline_spans(i)
        held = [(a, b) for a, b in base if delayed_since(i.lateness, b, floor) is not None
                or delayed_since(i.lateness, a, floor) is not None]
        if base and len(held) > CLIENT_BASELINE_SHARE * len(base):
            return (f"the client itself read {len(held)} of the victims' {len(base)} baseline gaps late (its own "
                    f"stalls; at most {CLIENT_BASELINE_SHARE:.0%} leave the median the server's): the rep is repeated")
    word = vouch(i.lateness, i.send_ns, i.first_token_ns, limit)
    if i.lateness is None or (not word.ok and word.code != "late"):
        return f"{word.words()} (the victims' gaps around the prefill window): the rep is repeated"
    lo, hi, stretched = i.send_ns, i.first_token_ns, STRETCH_RATIO * baseline_s * NS_PER_S
    doubtful = total = 0
    for v in i.victims:
        for a, b in gaps(v):
            if b <= lo or a >= hi or b - a <= stretched:
                continue
            total += min(b, hi) - max(a, lo)
            since = delayed_since(i.lateness, b, limit)
            if since is not None:  # the closing token may have arrived as early as the stall began
                doubtful += min(b, hi) - max(a, since, lo)
    if total and doubtful > CLIENT_STRETCHED_SHARE * total:
        return (f"the client itself was late inside the prefill window: {doubtful / 1e6:.0f} ms of the victims' "
                f"{total / 1e6:.0f} ms of stretched gaps in it may be its own stalls (at most "
                f"{CLIENT_STRETCHED_SHARE:.0%} leave the step the rules read the server's): no evidence, the rep is "
                "repeated")
    return None


def read_intrusion(i: Intrusion) -> Reading:
    problems = intrusion_problems(i)
    base = baseline_gaps(i)
    if len(base) < MIN_BASELINE_GAPS and not problems:
        problems.append(f"only {len(base)} victim gaps outside the intrusion (at least {MIN_BASELINE_GAPS} are needed "
                        "for a baseline): raise --tokens")
    window = window_gaps(i)
    if not window and not problems:
        problems.append("no victim token arrived during or right after the intruder's prefill")
    baseline = median([g / NS_PER_S for g in base]) if base else None
    late = None if problems else client_problem(i, baseline)
    if late is not None:
        problems.append(late)
    ttft = None if i.first_token_ns is None else (i.first_token_ns - i.send_ns) / NS_PER_S
    size = i.sent_tokens if i.sent_tokens is not None else i.prompt_tokens
    window_s = tuple(g / NS_PER_S for g in window)
    long = [g for g in window_s if baseline is not None and g > STRETCH_RATIO * baseline]
    return Reading(
        prompt_tokens=size,
        baseline_s=baseline,
        max_gap_s=max(window_s) if window_s else None,
        p99_gap_s=percentile(window_s, GAP_PERCENTILE) if window_s else None,
        stretched=None if baseline is None else sum(g > STRETCH_RATIO * baseline for g in window_s),
        lost_s=None if baseline is None else sum(max(0.0, g - baseline) for g in window_s),
        ttft_s=ttft,
        prefill_tok_s=size / ttft if ttft else None,
        step_gap_s=time_weighted_median(long) if long else None,
        window_gaps_s=window_s,
        problems=tuple(problems),
        stretched_share=stretched_share(i, baseline),
        client_late=late is not None or any(p.startswith(CLIENT_BURSTS) for p in problems),
        hop_held=any(p.startswith(HOP_BURSTS) for p in problems),
    )


# ---------------------------------------------------------------- one size, reps pooled


@dataclass(frozen=True, slots=True)
class Point:
    """One prompt size, its valid reps pooled: medians of the per-rep figures, the p99 over all their gaps."""

    prompt_tokens: int
    readings: tuple[Reading, ...]

    @property
    def valid_readings(self) -> tuple[Reading, ...]:
        return tuple(r for r in self.readings if r.valid)

    @property
    def valid(self) -> bool:
        return bool(self.valid_readings)

    def _median(self, values: Sequence[float | int | None]) -> float | None:
        found = [float(v) for v in values if v is not None]
        return median(found) if found else None

    @property
    def baseline_s(self) -> float | None:
        return self._median([r.baseline_s for r in self.valid_readings])

    @property
    def max_gap_s(self) -> float | None:
        return self._median([r.max_gap_s for r in self.valid_readings])

    @property
    def step_gap_s(self) -> float | None:
        return self._median([r.step_gap_s for r in self.valid_readings])

    @property
    def p99_gap_s(self) -> float | None:
        pooled = [g for r in self.valid_readings for g in r.window_gaps_s]
        return percentile(pooled, GAP_PERCENTILE) if pooled else None

    @property
    def lost_s(self) -> float | None:
        return self._median([r.lost_s for r in self.valid_readings])

    @property
    def stretched(self) -> float | None:
        return self._median([r.stretched for r in self.valid_readings])

    @property
    def ttft_s(self) -> float | None:
        return self._median([r.ttft_s for r in self.valid_readings])

    @property
    def stretched_share(self) -> float | None:
        return self._median([r.stretched_share for r in self.valid_readings])

    @property
    def prefill_tok_s(self) -> float | None:
        return self._median([r.prefill_tok_s for r in self.valid_readings])

    @property
    def cover(self) -> float | None:
        return self._median([r.cover for r in self.valid_readings])

    @property
    def chunk_tokens(self) -> float | None:
        return self._median([r.chunk_tokens for r in self.valid_readings])

    @property
    def problems(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p for r in self.readings for p in r.problems))


def pool(readings: Sequence[Reading]) -> list[Point]:
    """One point per prompt size, in ascending order."""
    sizes = sorted({r.prompt_tokens for r in readings})
    return [Point(s, tuple(r for r in readings if r.prompt_tokens == s)) for s in sizes]


# ---------------------------------------------------------------- the verdict


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
class Verdict:
    verdict: InterferenceVerdict
    reason: str
    decided_by: str  # "victim gaps" where the stopwatch decided; "nothing" for inconclusive
    evidence: Evidence | None = None
    chunk_tokens: float | None = None
    chunk_interval: tuple[float, float] | None = None


def what_left_sizes_unread(points: Sequence[Point]) -> str:
    """The run's own words for why sizes could not be read: the client or a hop where either left every rep of
    some size unread (each size's problems name the rest)."""
    unread = [p for p in points if not p.valid and p.readings]
    client = [p.prompt_tokens for p in unread if all(r.client_late for r in p.readings)]
    hop = [p.prompt_tokens for p in unread if all(r.hop_held for r in p.readings)]
    said = []
    if client:
        said.append(f"the client itself was late (its own stalls) in every rep at {_sizes(client)} prompt tokens, so "
                    "its clock cannot vouch for the victims' gaps there; rerun on a quieter client")
    if hop:
        said.append(f"a hop on the way (a proxy or gateway) delivered the victims' tokens in bursts at {_sizes(hop)} "
                    "prompt tokens; measure without the hop")
    if not said:
        return "see the problems named per size"
    return "; ".join(said) + (" (the problems of the other sizes are named per size)"
                              if len(set(client) | set(hop)) < len(unread) else "")


def _sizes(sizes: Sequence[int]) -> str:
    return ", ".join(f"{s:,}" for s in sizes)


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


def judge(points: Sequence[Point]) -> Verdict:
    """chunked | blocking | isolated | inconclusive from the victims' gaps alone, with what decided it."""
    e = evidence_of(points)
    if e is None:
        n = sum(p.valid for p in points)
        return Verdict("inconclusive", f"{n} valid prompt size{'s' if n != 1 else ''} (two are needed to see how the "
                       f"victims' gaps follow the prefill): {what_left_sizes_unread(points)}", "nothing")
    span = f"from {e.size_lo:,} to {e.size_hi:,} prompt tokens"
    if e.prefill_growth < PREFILL_GROWTH_MIN:
        return Verdict("inconclusive", f"the intruder's TTFT grew only {e.prefill_growth:.2f}x {span} "
                       f"({e.ttft_lo_s:.3f} s to {e.ttft_hi_s:.3f} s, at least {PREFILL_GROWTH_MIN:g}x is needed): "
                       "prefill is too cheap to see at these sizes; try larger --prompt-sizes", "nothing", e)
    stretched = [p for p in points if p.valid and p.max_gap_s and p.baseline_s
                 and p.max_gap_s >= STRETCH_RATIO * p.baseline_s]
    if not stretched:
        return Verdict("isolated", f"the victims' longest gap stayed below {STRETCH_RATIO:g}x their baseline at every "
                       f"size ({e.stretch_hi:.2f}x at {e.size_hi:,} tokens) while the intruder's TTFT grew "
                       f"{e.prefill_growth:.1f}x {span}: the prefill ran where "
                       "the victims' steps do not", "victim gaps", e)
    if e.share_max <= ISOLATED_SHARE and e.cover_hi < BLOCKING_COVER:
        return Verdict("isolated", f"the victims spent at most {e.share_max:.0%} of any prefill window in stretched "
                       f"gaps (a few slow steps, as outside it; {ISOLATED_SHARE:.0%} allowed) while the intruder's "
                       f"TTFT grew {e.prefill_growth:.1f}x {span}: the prefill ran where "
                       "the victims' steps do not", "victim gaps", e)
    growth = f"the victims' stretched step grew {e.gap_growth:.1f}x while the TTFT grew {e.prefill_growth:.1f}x {span}"
    cover = (f"at {e.size_hi:,} tokens the victims' stretched step ({e.gap_hi_s:.3f} s, longest gap "
             f"{e.longest_hi_s:.3f} s) covered {e.cover_hi:.0%} of the {e.ttft_hi_s:.3f} s prefill window")
    if e.cover_hi >= BLOCKING_COVER and e.gap_growth >= PROPORTIONAL * e.prefill_growth:
        return Verdict("blocking", f"{cover}, and {growth}: the whole prompt in one step", "victim gaps", e)
    if (e.cover_hi <= CHUNKED_COVER and e.gap_growth <= PROPORTIONAL * e.prefill_growth
            and e.stretch_hi >= STRETCH_RATIO and e.share_hi >= CHUNKED_SHARE):
        chunk, interval = chunk_estimate(points)
        return Verdict("chunked", f"{cover}, and {growth}: the prompt was split into steps that also carried the "
                       "victims' tokens", "victim gaps", e, chunk, interval)
    return Verdict("inconclusive", f"{cover}, {growth}, and the victims spent {e.share_hi:.0%} of that window in "
                   f"stretched gaps: neither one step (at least {BLOCKING_COVER:.0%} and growing with the TTFT) nor "
                   f"chunks (at most {CHUNKED_COVER:.0%}, bounded, tiling at least {CHUNKED_SHARE:.0%} of the window) "
                   f"nor isolated (at most {ISOLATED_SHARE:.0%}); a larger prompt size would span "
                   "more chunks and decide it", "nothing", e)


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


# ---------------------------------------------------------------- in words


def a_size(n: int) -> str:
    """ "an 8,192-token", "a 2,048-token": the article as the number is spoken."""
    lead = f"{n:,}".split(",")[0]
    return f"{'an' if lead.startswith('8') or lead in ('11', '18') else 'a'} {n:,}-token"


def streams_word(m: int) -> str:
    return {1: "the other stream", 2: "both other streams"}.get(m, f"all {m} other streams")


def sentence(v: Verdict, points: Sequence[Point], streams: int) -> str:
    """The seed's kind of sentence: what the largest prompt did to the others, and the alternative."""
    e = v.evidence
    if e is None:
        return f"no verdict: {v.reason}"
    who = streams_word(streams)
    if v.verdict == "blocking":
        per_token = e.ttft_hi_s / e.size_hi
        would = REFERENCE_CHUNK * per_token + e.baseline_s
        return (f"{a_size(e.size_hi)} prompt froze {who} for {e.longest_hi_s:.2f} s (blocking); with chunks of about "
                f"{REFERENCE_CHUNK} tokens the longest gap would be about {would:.2f} s")
    if v.verdict == "chunked":
        chunk = f"about {v.chunk_tokens:,.0f} tokens a step" if v.chunk_tokens is not None else "chunks"
        whose = f"{who}'" if who.endswith("s") else f"{who}'s"
        return (f"{a_size(e.size_hi)} prompt took {e.ttft_hi_s:.2f} s to prefill and stretched {whose} steps to "
                f"{e.gap_hi_s:.3f} s (chunked, {chunk}); in one step it would have frozen them for about "
                f"{e.ttft_hi_s:.2f} s")
    if v.verdict == "isolated":
        return (f"{a_size(e.size_hi)} prompt took {e.ttft_hi_s:.2f} s to prefill and {who} did not notice "
                f"(longest gap {e.gap_hi_s:.3f} s, {e.stretch_hi:.2f}x their baseline): isolated")
    return f"inconclusive: {v.reason}"


# ---------------------------------------------------------------- witnesses


@dataclass(frozen=True, slots=True)
class WitnessCheck:
    configured_tokens: float | None
    source: str | None
    agrees: bool | None
    note: str

    def record(self) -> InterferenceWitness:
        return InterferenceWitness(configured_tokens=self.configured_tokens, source=self.source, agrees=self.agrees,
                                   note=self.note)


def check_witness(verdict: str, chunk_tokens: float | None, configured: float | None, source: str | None,
                  largest: int | None) -> WitnessCheck:
    """The batch budget an engine stated, beside what the stopwatch measured; it corroborates, never decides."""
    if configured is None:
        return WitnessCheck(None, None, None, "no witness: no batch budget was read from the engine's log (with "
                            "--serve servecheck audits the log of the server it started)")
    said = f"{source or 'the log'} states a step budget of {configured:,.0f} tokens"
    if verdict == "chunked" and chunk_tokens is not None:
        agrees = abs(chunk_tokens - configured) <= WITNESS_TOLERANCE * configured
        return WitnessCheck(configured, source, agrees, f"{said}; the stopwatch measured chunks of about "
                            f"{chunk_tokens:,.0f} ({'within' if agrees else 'not within'} {WITNESS_TOLERANCE:.0%})")
    if verdict == "blocking" and largest is not None:
        agrees = configured >= largest * TRUNCATED_SHARE
        return WitnessCheck(configured, source, agrees, f"{said}; the stopwatch saw {a_size(largest)} prompt in one "
                            f"step ({'consistent' if agrees else 'a budget that small should have split it'})")
    return WitnessCheck(configured, source, None, f"{said}; the stopwatch gave no chunk to compare")
