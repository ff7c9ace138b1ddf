"""Speculative decoding from the stopwatch, pure: group one stream's token arrivals into decode steps,
estimate the mean tokens per step with an interval, and judge whether speculation is on and whether it pays.

A speculative step verifies a draft and emits every accepted token plus one at once: the tokens of one
step reach the client microseconds apart, steps arrive a step-time apart. The gaps between arrivals
therefore fall into two modes, and the step boundaries are the gaps of the larger one. A server's own
draft counters (llama.cpp `timings.draft_n` / `draft_n_accepted`) are compared with the estimate; they
corroborate, never decide.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from servecheck.model.client import ClientLateness

from servecheck.analysis.client_timing import late_reads, vouch
from servecheck.analysis.rules import FIGURE_FRAC
from servecheck.analysis.stats import mean_interval, median, normal_95, student_t_95
from servecheck.analysis.transit import BURST_NS, MIN_STEPS, in_transit
from servecheck.model.bodies.speculative import PROMPT_KINDS, PaysVerdict, SpecVerdict, SpeculativePoint, kind_label


# --- grouping arrivals into steps -------------------------------------------------------------
# Two gap modes are told apart by the widest jump between neighbouring sorted gaps. Tokens of one
# step are written back to back (tens of microseconds apart over loopback); steps are a forward pass
# apart (a millisecond or more even for a tiny model on a GPU). A jump of 4x is far below that
# separation and far above the swing of one mode's gaps on a quiet machine.
BIMODAL_RATIO = 4.0
# The larger mode must hold at least MIN_STEPS gaps (analysis.transit): two client stalls in a stream of
# single-token steps are a jump too, and taking them for the step time would call every real step
# "within a step".
# Against the step time S (the median gap of the larger mode): a gap below DEAD_LO x S is inside a
# step, one above DEAD_HI x S starts a new step. A gap in between is neither a back-to-back write
# nor a forward pass; a few are jitter, more than NOISE_SHARE of them and the stream is too noisy to
# group (a guess there would decide the verdict).
DEAD_LO = 0.1
DEAD_HI = 0.5
NOISE_SHARE = 0.05
# A late arrival: the client read one step's token late (a stall, a descheduled reader), so its gap is
# long and the next one short by as much: S + d, then S - d, two steps in 2 x S. A dead-band gap whose
# sum with the gap before it is within LATE_PAIR_TOLERANCE x S of 2 x S is that, a step boundary seen
# late, and is neither noise nor a token inside a step. A speculative step's second token written late
# (S, then d) sums to S + d, at most 1.5 x S, which the tolerance keeps out. Seen on the simulator with
# the suite's three pytest workers on 2 cores, and on a plain llama-server under tools/busy.py: 4-8 of
# 62 gaps in the band, the run withheld as too noisy.
LATE_PAIR_TOLERANCE = 0.3
# Inside the dead band a gap is split at this fraction of S (the brief midpoint of the band, on the
# step side: a slow write is likelier than a step at a third of the usual time).
SPLIT_FRACTION = 0.3
# No gap above BURST_NS (analysis.transit): every event arrived in one burst (a server that buffered
# the stream), so no step time shows.
# A group of k tokens that opens after about k step times is not one step: the server held output back
# (llama.cpp holds text that may begin a stop string or ends inside a UTF-8 character) and sent it with
# the next token. A real k-token step opens one step time after the last (its verify step is the step
# time S itself), so an opening gap of (k - HELD_SLACK) x S or more reads as k steps of one token.
HELD_SLACK = 0.5
# The step time a group's opening gap is held against is local: the median opening gap of the
# HELD_LOCAL_STEPS steps on each side. On a busy machine the step time swings 2x within one stream
# (load comes in spells), and against the stream's median a 2-token step inside a slow spell opened
# after 1.5-2.5 step times and was read as two steps of one: real llama.cpp with synthetic acceptance
# (the server's counters: 1.81 tokens per step) read 1.61-1.72 under tools/busy.py, and 1.75-1.81
# against the local step time, while a plain server stayed at 1.00-1.04 (a held group or a client
# catch-up opens after as many steps as its neighbours take). The local time only ever raises the
# reference above the stream's S: a step released in two parts leaves two short opening gaps, and
# on a loaded simulator those pulled the local median down until an ordinary neighbour looked held.
HELD_LOCAL_STEPS = 4
# Floor for a gap in the ratio test: two events stamped in the same nanosecond are one write.
GAP_FLOOR_NS = 1_000

# --- the client's own timing (analysis.client_timing) -----------------------------------------
# A group counts as one step only when the client was on time for the read that opened it. Tokens
# of two steps a step time S apart reach one read only when the reader was late by about S; a read
# late by more than half of S could have caught the next step's token, so a group it opened is
# no evidence and is left out (whatever its size: lateness does not choose the groups it opens).
LATE_READ_FRACTION = 0.5
# A stream whose reads were late for more than this share of its groups is not grouped at all: what
# is left is what a busy client happened to catch, and the verdict names the client instead.
MAX_LATE_SHARE = 0.5


# --- the estimate and the verdict -------------------------------------------------------------
# The mean tokens per step over every step of a point (every stream and rep at one N and kind) has a
# two-sided 95% normal interval (`stats.mean_interval` with `normal_95`): a point pools many steps.
# Tokens per step clearly above 1: the interval's lower end at least 1.15. The smallest speculation
# worth a flag (a draft accepted one step in six) clears it; grouping errors on a single-token stream
# (a slow write split off, a stall that bunched steps) stay below a few percent.
SPECULATING_LO = 1.15
# Clearly 1 per step: the interval's upper end at most 1.1.
NOT_SPECULATING_HI = 1.1

# --- pays or costs -----------------------------------------------------------------------------
# The per-stream decode rate against the baseline's: pays when the interval of the ratio lies above
# 1 + FIGURE_FRAC, costs when it lies below 1 - FIGURE_FRAC. 2% is the schema's rule for figures
# (analysis.rules): a difference smaller than that is not one servecheck reports.

# --- the server's counters ----------------------------------------------------------------------
# The estimate and llama.cpp's own account agree when within 15% of each other (the bound).
COUNTER_TOLERANCE = 0.15


@dataclass(frozen=True, slots=True)
class Stream:
    """One stream as the analysis reads it: when each output event arrived and how many tokens it carried."""

    arrivals_ns: tuple[int, ...]
    event_tokens: tuple[int, ...] = ()  # tokens per event where the stream says (ids, logprobs); () = unknown
    tokens: int = 0  # the record's token count (usage or the stream's own)
    draft_n: int | None = None  # llama.cpp timings.draft_n: draft tokens the server tested
    draft_accepted: int | None = None  # timings.draft_n_accepted
    server_generated: int | None = None  # timings.predicted_n / usage.completion_tokens
    lateness: ClientLateness | None = None  # the client's own lateness over the stream (None: not metered)


@dataclass(frozen=True, slots=True)
class Grouping:
    """One stream's decode steps (tokens each), or why it could not be grouped."""

    steps: tuple[int, ...] = ()
    # The same stream with every group held against the stream's own step time rather than the local
    # one (HELD_LOCAL_STEPS): where the two readings differ, the interval covers both.
    steps_stream_wide: tuple[int, ...] = ()
    step_ns: float | None = None  # the step time: median gap of the larger mode
    threshold_ns: float | None = None
    method: str = ""
    problem: str | None = None
    late_groups: int = 0  # groups left out: the client was late for the read that opened them
    # "client_late" | "client_coarse" | "coalesced" | ... where the client or a hop decided it
    problem_code: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


def event_sizes(stream: Stream) -> tuple[tuple[int, ...] | None, str | None]:
    """Tokens per event, or why they cannot be known."""
    events = len(stream.arrivals_ns)
    if stream.event_tokens and len(stream.event_tokens) == events:
        return tuple(max(1, k) for k in stream.event_tokens), None
    if stream.tokens <= events:
        return (1,) * events, None
    if events <= 2:
        return None, (f"{stream.tokens} tokens arrived in {events} event(s): the server does not stream tokens as it "
                      "makes them, nothing to group")
    return None, (f"{stream.tokens} tokens arrived in {events} events and the stream does not say which event carried "
                  "which (no token ids or logprobs): cannot group")


def group_steps(stream: Stream) -> Grouping:
    """Split one stream's arrivals into steps at the gaps of the larger gap mode (see the constants)."""
    sizes, problem = event_sizes(stream)
    if sizes is None:
        return Grouping(problem=problem)
    arrivals = stream.arrivals_ns
    gaps = [b - a for a, b in zip(arrivals[1:], arrivals[2:])]  # the first event is the prompt's own step
    if len(gaps) < MIN_STEPS + 2:
        return Grouping(problem=f"{len(arrivals)} output events: "
                                f"too short to estimate (at least {MIN_STEPS + 3} needed)")
    if max(gaps) < BURST_NS:
        return Grouping(problem=f"every event arrived within {max(gaps) / 1e3:.0f} µs of the one before: one burst "
                                "(a buffered stream), no step time shows, nothing to group")
    if (apart := sum(g >= BURST_NS for g in gaps)) < MIN_STEPS:
        return Grouping(problem_code="too_few_groups", problem=(
            f"the events arrived in {apart + 1} bursts (at most {apart} gaps of 100 µs or more): a stream buffered on "
            f"its way (a proxy, a gateway) or very long steps; at least {MIN_STEPS} steps are needed to group"))
    step_ns, how = step_time(gaps)
    late = late_arrivals(gaps, step_ns)
    dead = [g for k, g in enumerate(gaps) if DEAD_LO * step_ns <= g <= DEAD_HI * step_ns and k not in late]
    needed = LATE_READ_FRACTION * step_ns
    word = vouch(stream.lateness, arrivals[0], arrivals[-1], needed)
    if not word.ok and word.code == "coarse":
        return Grouping(step_ns=step_ns, problem_code="client_coarse", problem=(
            f"the stream's step time ({step_ns / 1e6:.3g} ms) is finer than the client can vouch for: it reads on time "
            f"to {word.resolution_ms:.2f} ms and needs half a step; cannot tell steps from late reads"))
    if not word.ok and word.code != "late":
        return Grouping(step_ns=step_ns, problem=f"cannot tell steps from late reads: {word.words()}",
                        problem_code=f"client_{word.code}")
    late_read = late_reads(stream.lateness, arrivals, needed) if stream.lateness is not None else frozenset()
    if len(dead) > NOISE_SHARE * len(gaps):
        client = len(late_read) > NOISE_SHARE * len(arrivals)
        why = (f"; the client itself was late for {len(late_read)} of its {len(arrivals)} reads (by more than "
               f"{needed / 1e6:.2f} ms): rerun on a quieter client" if client else "; rerun on a quiet machine")
        return Grouping(step_ns=step_ns, problem_code="client_late" if client else "noisy", problem=(
            f"gaps too noisy to group: {len(dead)} of {len(gaps)} lie between {DEAD_LO:g} and {DEAD_HI:g} of the step "
            f"time {step_ns / 1e6:.2f} ms (at most {NOISE_SHARE:.0%} allowed){why}"))
    threshold = SPLIT_FRACTION * step_ns
    split = _split(sizes[1:], gaps, threshold, late)
    opened_late = {i for i, (_, _, opener) in enumerate(split) if opener in late_read}
    if len(opened_late) > MAX_LATE_SHARE * len(split):
        return Grouping(step_ns=step_ns, late_groups=len(opened_late), problem_code="client_late", problem=(
            f"the client was late for {len(opened_late)} of the {len(split)} reads that opened a group (by more than "
            f"{needed / 1e6:.2f} ms, half the step time): its own lateness, not the server's steps, shaped them; "
            "rerun on a quieter client"))
    if (coalesced := in_transit([g for i, g in enumerate(split) if i not in opened_late])) is not None:
        return Grouping(step_ns=step_ns, late_groups=len(opened_late), problem_code=coalesced[0], problem=coalesced[1])
    steps, held, source = unhold(split, step_ns)
    wide, _, wide_source = unhold(split, step_ns, local=False)
    steps = [k for k, i in zip(steps[:-1], source[:-1]) if i not in opened_late]
    wide = [k for k, i in zip(wide[:-1], wide_source[:-1]) if i not in opened_late]
    if len(steps) < 2:
        return Grouping(step_ns=step_ns, late_groups=len(opened_late),
                        problem=f"only {len(steps) + 1} decode steps: too short to estimate")
    held_note = f"; {held} group(s) after about as many step times as tokens read as held-back output" if held else ""
    late_note = (f"; {len(late)} late arrival(s) (a long gap, then a short one, two steps in all) read as steps"
                 if late else "")
    client_note = (f"; {len(opened_late)} group(s) left out, opened by a read the client made late" if opened_late
                   else "")
    method = (f"{how}; split at gaps above {threshold / 1e6:.3g} ms ({SPLIT_FRACTION:g} of the step time "
              f"{step_ns / 1e6:.3g} ms){late_note}{held_note}{client_note}; first and last step left out")
    return Grouping(steps=tuple(steps), steps_stream_wide=tuple(wide), step_ns=step_ns,
                    threshold_ns=threshold, method=method, late_groups=len(opened_late))


def step_time(gaps: Sequence[int]) -> tuple[float, str]:
    """The step time and how it was found: the median of the top mode where the gaps are bimodal, else the
    median of all gaps. The top mode lies above the highest jump of BIMODAL_RATIO with at least MIN_STEPS
    gaps above it: on a busy client the writes inside a step form two modes of their own (microseconds,
    and a fraction of a millisecond when the reader was descheduled), and the step boundaries are the
    highest of the three, not the widest jump."""
    ordered = sorted(gaps)
    at, jump = None, 0.0
    for i in range(len(ordered) - MIN_STEPS):
        ratio = max(ordered[i + 1], GAP_FLOOR_NS) / max(ordered[i], GAP_FLOOR_NS)
        if ratio >= BIMODAL_RATIO:
            at, jump = i + 1, ratio
    if at is not None:
        upper = ordered[at:]
        return median(upper), (f"bimodal gaps ({len(ordered) - len(upper)} within a step, "
                               f"{len(upper)} between steps, a {jump:.0f}x jump)")
    return median(ordered), "one gap mode: every event its own step"


def late_arrivals(gaps: Sequence[int], step_ns: float) -> frozenset[int]:
    """Indices of the dead-band gaps that a late arrival explains (see LATE_PAIR_TOLERANCE)."""
    return frozenset(k for k in range(1, len(gaps))
                     if DEAD_LO * step_ns <= gaps[k] <= DEAD_HI * step_ns
                     and abs(gaps[k - 1] + gaps[k] - 2 * step_ns) <= LATE_PAIR_TOLERANCE * step_ns)


def _split(sizes: Sequence[int], gaps: Sequence[int], threshold: float,
           boundaries: frozenset[int] = frozenset()) -> list[tuple[int, int | None, int]]:
    """(tokens, opening gap, the arrival that opened it) per step: a gap above the threshold, or one of
    `boundaries` (late arrivals), starts a new step; sizes[0] (arrival 1) opens the first (its opening
    gap, from the prompt's token, is not a decode step's: None)."""
    steps: list[tuple[int, int | None, int]] = [(sizes[0], None, 1)]
    for k, (size, gap) in enumerate(zip(sizes[1:], gaps)):
        if gap > threshold or k in boundaries:
            steps.append((size, gap, k + 2))
        else:
            steps[-1] = (steps[-1][0] + size, steps[-1][1], steps[-1][2])
    return steps


def unhold(steps: Sequence[tuple[int, int | None, int]], step_ns: float, *,
           local: bool = True) -> tuple[list[int], int, list[int]]:
    """Tokens per step, a held-back group (see HELD_SLACK) read as that many single-token steps; and how many were.

    A group is held against the local step time (HELD_LOCAL_STEPS) where that is the longer, else
    against `step_ns` (always where `local` is False): a slow spell must not take real steps apart, and
    a step the server released in two parts (two short opening gaps) must not make its neighbour look
    held back. The third list names, for each step out, the group (index into `steps`) it came from."""
    opens = [gap for _, gap, _ in steps]
    out: list[int] = []
    source: list[int] = []
    held = 0
    for i, (size, gap, _) in enumerate(steps):
        ref = max(step_ns, _local_step(opens, i, step_ns)) if local else step_ns
        if size > 1 and gap is not None and gap >= (size - HELD_SLACK) * ref:
            out += [1] * size
            source += [i] * size
            held += 1
        else:
            out.append(size)
            source.append(i)
    return out, held, source


def _local_step(opens: Sequence[int | None], i: int, step_ns: float) -> float:
    """The median opening gap of the steps around step i (not i itself)."""
    near = [g for g in (*opens[max(0, i - HELD_LOCAL_STEPS):i], *opens[i + 1:i + 1 + HELD_LOCAL_STEPS])
            if g is not None]
    return median(near) if near else step_ns


# ---------------------------------------------------------------- one point: an N and a prompt kind


@dataclass(frozen=True, slots=True)
class Estimate:
    """Mean tokens per step over a point's steps, its interval, the verdict and why."""

    tokens_per_step: float | None
    interval: tuple[float, float] | None
    steps: int
    streams: int
    grouped: int  # streams that could be grouped
    verdict: SpecVerdict
    reason: str
    problems: tuple[str, ...] = ()


def estimate(groupings: Sequence[Grouping]) -> Estimate:
    """Pool the steps of every grouped stream: mean, a normal 95% interval, and the verdict."""
    ok = [g for g in groupings if g.ok]
    problems = tuple(dict.fromkeys(g.problem for g in groupings if g.problem))
    steps = [s for g in ok for s in g.steps]
    if len(steps) < MIN_STEPS:
        why = problems[0] if problems else "no stream"
        return Estimate(None, None, len(steps), len(groupings), len(ok), "inconclusive",
                        f"no estimate: {why}", problems)
    mean, lo, hi = _normal_interval(steps)
    wide = [s for g in ok for s in (g.steps_stream_wide or g.steps)]
    _, wide_lo, wide_hi = _normal_interval(wide)
    lo, hi = min(lo, wide_lo), max(hi, wide_hi)  # a group read either way: the verdict must hold for both
    verdict, reason = judge(lo, hi)
    if wide != steps:
        reason += (f" (the interval covers both readings of the groups that opened late: {mean:.2f} against the "
                   f"neighbouring steps, {sum(wide) / len(wide):.2f} against the stream's own step time)")
    return Estimate(mean, (lo, hi), len(steps), len(groupings), len(ok), verdict, reason, problems)


def _normal_interval(steps: Sequence[int]) -> tuple[float, float, float]:
    iv = mean_interval(steps, normal_95)
    assert iv is not None  # MIN_STEPS or more
    return iv.mean, iv.lo, iv.hi


def judge(lo: float, hi: float) -> tuple[SpecVerdict, str]:
    """The verdict from the interval of the mean tokens per step."""
    span = f"[{lo:.2f}, {hi:.2f}]"
    if lo >= SPECULATING_LO:
        return "speculating", f"tokens per step {span}: lower end at least {SPECULATING_LO:g}"
    if hi <= NOT_SPECULATING_HI:
        return "not_speculating", f"tokens per step {span}: upper end at most {NOT_SPECULATING_HI:g}"
    return "inconclusive", (f"tokens per step {span} neither clears {SPECULATING_LO:g} nor stays under "
                            f"{NOT_SPECULATING_HI:g}: more --reps or --tokens would narrow it")


def run_verdict(estimates: Sequence[Estimate], kinds: Sequence[str] | None = None) -> tuple[SpecVerdict, str]:
    """Speculating on evidence that holds across a prompt kind's points: at least one point of the kind
    speculating, at least half of its points decided, and none of them reading one token per step (a
    draft may fail on open-ended text and still be on, so the kinds are judged apart). Not speculating
    when every point reads 1 per step; else inconclusive. `kinds` names each estimate's prompt kind
    (None: one kind)."""
    if not estimates:
        return "inconclusive", "no point was measured"
    labels = list(kinds) if kinds is not None else [""] * len(estimates)
    disagree = ""
    for kind in dict.fromkeys(labels):
        mine = [e for e, k in zip(estimates, labels) if k == kind]
        decided = [e for e in mine if e.verdict != "inconclusive"]
        said = sum(e.verdict == "speculating" for e in decided)
        if said and said == len(decided) and 2 * len(decided) >= len(mine):
            where = f" ({kind} prompts)" if kind else ""
            return "speculating", (f"{said} of {len(mine)} point(s){where} deliver clearly more than one token "
                                   "per step and none reads one")
        if said:
            disagree = (f"the {kind + ' ' if kind else ''}points disagree: {said} speculating, "
                        f"{len(decided) - said} one token per step, {len(mine) - len(decided)} undecided")
    if all(e.verdict == "not_speculating" for e in estimates):
        return "not_speculating", "every point delivers one token per step"
    if disagree:
        return "inconclusive", disagree
    open_ = [e.reason for e in estimates if e.verdict == "inconclusive"]
    return "inconclusive", open_[0]


# ---------------------------------------------------------------- pays or costs against a baseline


@dataclass(frozen=True, slots=True)
class Pays:
    """The per-stream decode rate against the baseline's at one point."""

    verdict: PaysVerdict
    ratio: float | None  # mean rate / baseline mean rate
    interval: tuple[float, float] | None
    reason: str


def pays(rates: Sequence[float], baseline: Sequence[float]) -> Pays:
    """pays / costs / inconclusive from two sets of per-stream rates (tok/s), each with its interval."""
    a, b = mean_interval(rates, student_t_95), mean_interval(baseline, student_t_95)
    if a is None or b is None:
        return Pays("inconclusive", None, None, f"{len(rates)} stream(s) and {len(baseline)} baseline stream(s): "
                    "at least two of each needed (more --reps)")
    ratio = a.mean / b.mean if b.mean > 0 else None
    if ratio is None or b.lo <= 0:
        return Pays("inconclusive", ratio, None, "the baseline's rate interval reaches zero: more --reps")
    lo, hi = a.lo / b.hi, a.hi / b.lo
    span = f"{ratio:.2f}x [{lo:.2f}, {hi:.2f}]"
    if lo > 1 + FIGURE_FRAC:
        return Pays("pays", ratio, (lo, hi), f"per-stream rate {span} of the baseline's: above {1 + FIGURE_FRAC:g}")
    if hi < 1 - FIGURE_FRAC:
        return Pays("costs", ratio, (lo, hi), f"per-stream rate {span} of the baseline's: below {1 - FIGURE_FRAC:g}")
    return Pays("inconclusive", ratio, (lo, hi), f"per-stream rate {span} of the baseline's straddles "
                f"{1 - FIGURE_FRAC:g}..{1 + FIGURE_FRAC:g}: more --reps would decide it")


def stops_paying(by_n: Mapping[int, PaysVerdict]) -> tuple[int | None, str]:
    """The first N (ascending) that does not pay after a smaller one did; None with why otherwise."""
    ordered = sorted(by_n)
    if not ordered:
        return None, "no baseline"
    if by_n[ordered[0]] != "pays":
        return None, f"does not pay at N={ordered[0]} already ({by_n[ordered[0]]})"
    for n in ordered[1:]:
        if by_n[n] != "pays":
            return n, f"pays up to N={ordered[ordered.index(n) - 1]}, {by_n[n]} at N={n}"
    return None, f"pays at every N up to {ordered[-1]}"


# ---------------------------------------------------------------- the server's counters


@dataclass(frozen=True, slots=True)
class CounterCheck:
    """The server's own tokens per step (from its draft counters) beside the estimate."""

    server_tokens_per_step: float | None
    acceptance: float | None  # draft_n_accepted / draft_n
    agrees: bool | None
    note: str


def server_tokens_per_step(streams: Sequence[Stream]) -> tuple[float | None, float | None]:
    """Tokens per step by the server's counters, and its acceptance rate.

    Every decode step after the first token emits 1 + its accepted draft tokens (llama.cpp
    `server-context.cpp`: the verified draft plus the target's own token), so over a stream of n tokens
    with A accepted draft tokens in K steps: n - 1 = K + A, K = n - 1 - A, and tokens per step =
    (n - 1) / (n - 1 - A) = 1 + A / K. draft_n / K is the mean draft length; A / draft_n is the acceptance
    rate, which alone does not give tokens per step (a draft of 4 accepted at 50% is 3 per step).
    """
    tokens = accepted = drafted = 0
    for s in streams:
        if s.draft_n is None or s.draft_accepted is None:
            continue
        n = s.server_generated if s.server_generated is not None else s.tokens
        tokens += n - 1
        accepted += s.draft_accepted
        drafted += s.draft_n
    if tokens <= 0 or tokens - accepted <= 0:
        return None, None
    return tokens / (tokens - accepted), (accepted / drafted if drafted else None)


@dataclass(frozen=True, slots=True)
class MetricDeltas:
    """vLLM's spec-decode counters over a point's batches (/metrics read before and after each batch)."""

    drafts: float  # vllm:spec_decode_num_drafts_total: speculative steps
    draft_tokens: float  # vllm:spec_decode_num_draft_tokens_total
    accepted: float  # vllm:spec_decode_num_accepted_tokens_total


def metric_tokens_per_step(d: MetricDeltas) -> tuple[float | None, float | None]:
    """vLLM's mean acceptance length, 1 + accepted / drafts (its own dashboard's formula,
    vllm/v1/spec_decode/metrics.py), and its acceptance rate. Steps in which nothing was drafted (an
    ngram draft that found no match) are not drafts, so on such prompts this reads above the stopwatch."""
    if d.drafts <= 0 or d.accepted < 0 or d.draft_tokens < d.accepted:
        return None, None
    return 1 + d.accepted / d.drafts, (d.accepted / d.draft_tokens if d.draft_tokens else None)


def check_counters(streams: Sequence[Stream], est: Estimate, metrics: MetricDeltas | None = None) -> CounterCheck:
    """Compare the estimate with the server's own account, naming a disagreement; never a verdict."""
    server, acceptance = server_tokens_per_step(streams)
    if server is None and metrics is not None:
        server, acceptance = metric_tokens_per_step(metrics)
    if server is None:
        return CounterCheck(None, None, None, "the server reported no draft counters (llama.cpp leaves them out "
                            "when it drafted nothing; vLLM has none without a speculative config)")
    if est.tokens_per_step is None:
        return CounterCheck(server, acceptance, None,
                            f"the server counts {server:.2f} tokens per step; no estimate to compare")
    if est.grouped < est.streams:
        # the counters count every request of the point; the estimate only the streams the noise guard
        # let through: two readings of different requests (acceptance differs from prompt to prompt)
        return CounterCheck(server, acceptance, None,
                            f"the server counts {server:.2f} tokens per step over all {est.streams} requests; the "
                            f"stopwatch's {est.tokens_per_step:.2f} reads {est.grouped} of them (the others' gaps "
                            f"could not be grouped): not compared")
    off = est.tokens_per_step / server - 1
    if abs(off) <= COUNTER_TOLERANCE:
        return CounterCheck(server, acceptance, True, f"the server's counters give {server:.2f} tokens per step: "
                            f"within {COUNTER_TOLERANCE:.0%} of the stopwatch's {est.tokens_per_step:.2f}")
    return CounterCheck(server, acceptance, False, f"DISAGREES: the server's counters give {server:.2f} tokens per "
                        f"step, the stopwatch {est.tokens_per_step:.2f} ({off:+.0%}); the stopwatch decides")


# ---------------------------------------------------------------- a point, and the run


@dataclass(frozen=True, slots=True)
class PointAnalysis:
    """One N and prompt kind as the run records it: the estimate from the streams' arrivals, the rates,
    the server's counters beside it, and against the baseline (None without one)."""

    n: int
    kind: str
    estimate: Estimate
    grouping: tuple[str, ...]  # how the grouped streams' arrivals were split into steps
    failed: int
    counters: CounterCheck
    per_stream_tok_s: float | None
    aggregate_tok_s: float | None
    baseline_per_stream_tok_s: float | None
    paid: Pays | None
    late_groups: int = 0  # groups left out: the client was late for the read that opened them
    coalesced: int = 0  # streams whose groups were bursts made in transit
    extra_reps: int = 0  # reps taken beyond the planned ones because pays / costs was undecided

    def record(self) -> SpeculativePoint:
        est, paid, counters = self.estimate, self.paid, self.counters
        return SpeculativePoint(
            n=self.n, prompt_kind=self.kind, tokens_per_step=est.tokens_per_step,  # type: ignore[arg-type]  # a PROMPT_KIND
            tokens_per_step_interval=est.interval, per_stream_tok_s=self.per_stream_tok_s,
            aggregate_tok_s=self.aggregate_tok_s, pays=None if paid is None else paid.verdict, verdict=est.verdict,
            reason=est.reason, steps=est.steps, streams=est.streams, grouped=est.grouped, grouping=self.grouping,
            problems=est.problems, failed=self.failed, server_tokens_per_step=counters.server_tokens_per_step,
            server_acceptance=counters.acceptance, counters_agree=counters.agrees, counters_note=counters.note,
            baseline_per_stream_tok_s=self.baseline_per_stream_tok_s, pays_ratio=None if paid is None else paid.ratio,
            pays_interval=None if paid is None else paid.interval, pays_reason=None if paid is None else paid.reason,
            client_late_groups=self.late_groups, coalesced_streams=self.coalesced,
            extra_reps=None if paid is None else self.extra_reps,
        )


def analyse_point(n: int, kind: str, streams: Sequence[Stream], *, failed: int, rates: Sequence[float],
                  aggregates: Sequence[float], baseline_rates: Sequence[float] | None,
                  metrics: MetricDeltas | None = None, extra_reps: int = 0) -> PointAnalysis:
    """A point from its streams (the requests that finished), their decode rates, the batches' aggregates
    and, with a baseline, its streams' rates (None without one); `extra_reps` of its reps were taken
    because the planned ones left pays / costs undecided."""
    groupings = [group_steps(s) for s in streams]
    est = estimate(groupings)
    paid = None if baseline_rates is None else repeated(pays(rates, baseline_rates), extra_reps)
    return PointAnalysis(
        n=n, kind=kind, estimate=est, grouping=tuple(sorted({g.method for g in groupings if g.ok})), failed=failed,
        counters=check_counters(streams, est, metrics), per_stream_tok_s=median(rates) if rates else None,
        aggregate_tok_s=median(aggregates) if aggregates else None,
        baseline_per_stream_tok_s=median(baseline_rates) if baseline_rates else None,
        paid=paid, extra_reps=extra_reps,
        late_groups=sum(g.late_groups for g in groupings),
        coalesced=sum(g.problem_code == "coalesced" for g in groupings),
    )


def pays_undecided(point: PointAnalysis) -> bool:
    """Whether the point's pays / costs is still open against a baseline: the one figure another pair of
    target and baseline batches could decide (the experiment repeats such a point, up to its bound)."""
    return point.paid is not None and point.paid.verdict == "inconclusive"


def repeated(paid: Pays, extra_reps: int) -> Pays:
    """The verdict's reason with the reps a still-open figure took beyond the planned ones."""
    if extra_reps <= 0:
        return paid
    if paid.verdict == "inconclusive":
        note = f" (still open after {extra_reps} more rep(s), the most --max-reps allowed)"
    else:
        note = f" (decided after {extra_reps} more rep(s): the planned reps left it open)"
    return Pays(paid.verdict, paid.ratio, paid.interval, paid.reason + note)


@dataclass(frozen=True, slots=True)
class RunAnalysis:
    """The run's verdict from its points, and with a baseline the first N that stops paying per prompt kind."""

    verdict: SpecVerdict
    reason: str
    stops_paying_n: dict[str, int | None]
    stops_paying_reason: dict[str, str]


def behind_a_hop(points: Sequence[PointAnalysis]) -> list[PointAnalysis]:
    """The points as the run can stand by them: where any stream arrived coalesced in transit, a hop buffered
    the run's streams, so no point's groups are steps and every decided point is left undecided, named."""
    hop = sum(p.coalesced for p in points)
    if not hop:
        return list(points)
    why = (f"{hop} stream(s) of the run arrived in bursts coalesced in transit (a proxy or gateway that buffers "
           "the stream): this point's groups may be bursts too, not decode steps; measure without the hop")
    return [p if p.estimate.verdict == "inconclusive" else
            replace(p, estimate=replace(p.estimate, verdict="inconclusive",
                                        reason=f"{why} (alone it read: {p.estimate.reason})"))
            for p in points]


def analyse_run(points: Sequence[PointAnalysis], *, with_baseline: bool) -> RunAnalysis:
    # the reason names each kind as the reports do ("prose", "verbatim repetition"), not by its JSON value
    verdict, reason = run_verdict([p.estimate for p in points], [kind_label(p.kind) for p in points])
    hop = sum(p.coalesced for p in points)
    if hop and verdict != "inconclusive":
        # a hop that buffers does so for every stream: where it showed, the other streams' groups may be bursts too
        verdict, reason = "inconclusive", (
            f"{hop} stream(s) arrived in bursts coalesced in transit (a proxy or gateway that buffers the stream), so "
            f"no stream's groups can be trusted as decode steps (the points alone read: {reason}); measure without "
            "the hop")
    stops: dict[str, int | None] = {}
    stops_reason: dict[str, str] = {}
    if with_baseline:
        for kind in PROMPT_KINDS:
            by_n = {p.n: p.paid.verdict for p in points if p.kind == kind and p.paid is not None}
            if by_n:
                stops[kind], stops_reason[kind] = stops_paying(by_n)
    return RunAnalysis(verdict, reason, stops, stops_reason)
