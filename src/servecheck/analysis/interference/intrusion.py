"""One intrusion read, pure: the victims' baseline interval, their longest and p99 gap while the
intruder was prefilled, the time they lost, their step in the window, and why a rep cannot be read (a
failed or truncated request, queued victims, bursts the client or a hop made, a client that cannot vouch
for the window)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from servecheck.analysis.client_timing import delayed_since, vouch
from servecheck.analysis.stats import median
from servecheck.model.client import ClientLateness
from servecheck.model.reason import Reason
from servecheck.model.records import NS_PER_S


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
# A victims' median gap this short is no decode step (a loopback write takes microseconds, no engine
# decodes in a tenth of a millisecond): the stream was buffered on its way and released in bursts.
BURST_S = 0.0001
# The problems (reason codes) that flag a rep read in the client's bursts, a hop's, or sent too early.
CLIENT_BURSTS = "interference.client_bursts"
SENT_EARLY = "interference.sent_early"
HOP_BURSTS = "interference.hop_bursts"
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
    problems: tuple[Reason, ...] = ()
    stretched_share: float | None = None  # CHUNKED_SHARE: the window's time in stretched gaps, median victim
    client_late: bool = False  # the client could not vouch for the prefill window: the rep is repeated
    hop_held: bool = False  # a hop on the way delivered the victims' tokens in bursts
    sent_early: bool = False  # the run's wait was short of the victims' start: the rep is repeated, waiting longer

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


def intrusion_problems(i: Intrusion) -> list[Reason]:
    """Why an intrusion cannot be read (reasons whose words name what to change)."""
    problems = [Reason("interference.victim_failed", victim=k + 1, error=e)
                for k, e in enumerate(i.victim_errors) if e]
    if i.intruder_error or i.first_token_ns is None:
        problems.append(Reason("interference.intruder_failed", error=i.intruder_error))
        return problems
    if (i.sent_tokens is not None and i.counted_tokens is not None
            and i.counted_tokens < TRUNCATED_SHARE * i.sent_tokens):
        problems.append(Reason("interference.truncated", counted=i.counted_tokens, sent=i.sent_tokens))
    live = [v for v in i.victims if v]
    if len(live) < len(i.victims):
        problems.append(Reason("interference.victim_silent"))
        return problems
    every_gap = [(a, b) for v in live for a, b in gaps(v)]
    if every_gap and median([b - a for a, b in every_gap]) < BURST_S * NS_PER_S:
        # the client collapsed the reads only where it was late for a good part of the time between bursts
        apart = [b - a for a, b in every_gap if b - a >= BURST_S * NS_PER_S]
        floor = CLIENT_BURST_FRACTION * median(apart) if apart else 0.0
        held = 0 if i.lateness is None else sum(
            delayed_since(i.lateness, b, max(floor, i.lateness.resolution_ns)) is not None for _, b in every_gap)
        if held > CLIENT_BASELINE_SHARE * len(every_gap):
            problems.append(
                Reason(CLIENT_BURSTS, held=held, reads=len(every_gap)))
        else:
            problems.append(
                Reason(HOP_BURSTS, burst_s=BURST_S))
        return problems
    firsts, ends = [v[0] for v in live], [v[-1] for v in live]
    if live and max(firsts) >= min(ends):
        problems.append(
            Reason("interference.victims_queued", victims=len(live)))
        return problems
    if live and max(firsts) > i.send_ns:
        problems.append(Reason(SENT_EARLY))
    if live and min(ends) <= i.first_token_ns:
        problems.append(
            Reason("interference.waited_for_slot", streams=len(live) + 1, slots=i.server_slots,
                   prompt_tokens=i.prompt_tokens))
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


def client_problem(i: Intrusion, baseline_s: float | None) -> Reason | None:
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
            return Reason("interference.client_late_baseline", held=len(held), gaps=len(base),
                       share=CLIENT_BASELINE_SHARE)
    word = vouch(i.lateness, i.send_ns, i.first_token_ns, limit)
    if i.lateness is None or (not word.ok and word.code != "late"):
        why = word.words()
        return Reason("interference.client_unvouched", vouch=why)
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
        return Reason("interference.client_late_window", doubtful_ms=doubtful / 1e6, total_ms=total / 1e6,
                   share=CLIENT_STRETCHED_SHARE)
    return None


def read_intrusion(i: Intrusion) -> Reading:
    problems = intrusion_problems(i)
    base = baseline_gaps(i)
    if len(base) < MIN_BASELINE_GAPS and not problems:
        problems.append(
            Reason("interference.few_baseline_gaps", gaps=len(base), needed=MIN_BASELINE_GAPS))
    window = window_gaps(i)
    if not window and not problems:
        problems.append(Reason("interference.no_window_gaps"))
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
        client_late=late is not None or any(p.code == CLIENT_BURSTS for p in problems),
        hop_held=any(p.code == HOP_BURSTS for p in problems),
        sent_early=any(p.code == SENT_EARLY for p in problems),
    )
