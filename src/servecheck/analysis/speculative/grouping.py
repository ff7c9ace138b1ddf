"""One stream's arrivals grouped into decode steps, pure: the step time from the gaps' two modes, the
split at the step boundaries, late arrivals and held-back output read as the steps they were, and why a
stream cannot be grouped (too short, one burst, too noisy, a client that was late or cannot vouch for
half a step, bursts made in transit)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servecheck.analysis.client_timing import late_reads, vouch
from servecheck.analysis.stats import median
from servecheck.analysis.transit import BURST_NS, MIN_STEPS, in_transit
from servecheck.model.client import ClientLateness
from servecheck.model.reason import Reason, Text


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
# Grouping.problem_code where the client cannot vouch for the stream at all, by `vouch`'s code (a coarse
# meter and late reads are decided on their own above these).
CLIENT_PROBLEM_CODES = {"no_meter": "client_no_meter", "uncovered": "client_uncovered", "dropped": "client_dropped"}


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
    method: Text = ""  # how the steps were split (a reason; "" where the stream could not be grouped)
    problem: Text | None = None
    late_groups: int = 0  # groups left out: the client was late for the read that opened them
    # "client_late" | "client_coarse" | "coalesced" | ... where the client or a hop decided it
    problem_code: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


def event_sizes(stream: Stream) -> tuple[tuple[int, ...] | None, Reason | None]:
    """Tokens per event, or why they cannot be known."""
    events = len(stream.arrivals_ns)
    if stream.event_tokens and len(stream.event_tokens) == events:
        return tuple(max(1, k) for k in stream.event_tokens), None
    if stream.tokens <= events:
        return (1,) * events, None
    if events <= 2:
        return None, Reason("speculative.not_streamed", tokens=stream.tokens, events=events)
    return None, Reason("speculative.events_unsized", tokens=stream.tokens, events=events)


def group_steps(stream: Stream) -> Grouping:
    """Split one stream's arrivals into steps at the gaps of the larger gap mode (see the constants)."""
    sizes, problem = event_sizes(stream)
    if sizes is None:
        return Grouping(problem=problem)
    arrivals = stream.arrivals_ns
    gaps = [b - a for a, b in zip(arrivals[1:], arrivals[2:])]  # the first event is the prompt's own step
    if len(gaps) < MIN_STEPS + 2:
        return Grouping(problem=Reason("speculative.too_few_events", events=len(arrivals), needed=MIN_STEPS + 3))
    if max(gaps) < BURST_NS:
        return Grouping(problem=Reason("speculative.one_burst", max_gap_us=max(gaps) / 1e3))
    if (apart := sum(g >= BURST_NS for g in gaps)) < MIN_STEPS:
        return Grouping(problem_code="too_few_groups", problem=(
            Reason("speculative.too_few_bursts", bursts=apart + 1, gaps=apart, needed=MIN_STEPS)))
    step_ns, how = step_time(gaps)
    late = late_arrivals(gaps, step_ns)
    dead = [g for k, g in enumerate(gaps) if DEAD_LO * step_ns <= g <= DEAD_HI * step_ns and k not in late]
    needed = LATE_READ_FRACTION * step_ns
    word = vouch(stream.lateness, arrivals[0], arrivals[-1], needed)
    if not word.ok and word.code == "coarse":
        return Grouping(step_ns=step_ns, problem_code="client_coarse", problem=(
            Reason("speculative.client_coarse", step_ms=step_ns / 1e6, resolution_ms=word.resolution_ms)))
    if not word.ok and word.code != "late":
        unvouched = word.words()
        return Grouping(step_ns=step_ns, problem=Reason("speculative.client_unvouched", why=unvouched),
                        problem_code=CLIENT_PROBLEM_CODES.get(word.code, "client_unvouched"))
    late_read = late_reads(stream.lateness, arrivals, needed) if stream.lateness is not None else frozenset()
    if len(dead) > NOISE_SHARE * len(gaps):
        client = len(late_read) > NOISE_SHARE * len(arrivals)
        return Grouping(step_ns=step_ns, problem_code="client_late" if client else "noisy", problem=(
            Reason("speculative.too_noisy", dead=len(dead), gaps=len(gaps), dead_lo=DEAD_LO, dead_hi=DEAD_HI,
                   step_ms=step_ns / 1e6, noise_share=NOISE_SHARE, client=client, late_reads=len(late_read),
                   reads=len(arrivals), needed_ms=needed / 1e6)))
    threshold = SPLIT_FRACTION * step_ns
    split = _split(sizes[1:], gaps, threshold, late)
    opened_late = {i for i, (_, _, opener) in enumerate(split) if opener in late_read}
    if len(opened_late) > MAX_LATE_SHARE * len(split):
        return Grouping(step_ns=step_ns, late_groups=len(opened_late), problem_code="client_late", problem=(
            Reason("speculative.client_late", late=len(opened_late), groups=len(split), needed_ms=needed / 1e6)))
    if (coalesced := in_transit([g for i, g in enumerate(split) if i not in opened_late])) is not None:
        return Grouping(step_ns=step_ns, late_groups=len(opened_late), problem_code=coalesced[0], problem=coalesced[1])
    steps, held, source = unhold(split, step_ns)
    wide, _, wide_source = unhold(split, step_ns, local=False)
    steps = [k for k, i in zip(steps[:-1], source[:-1]) if i not in opened_late]
    wide = [k for k, i in zip(wide[:-1], wide_source[:-1]) if i not in opened_late]
    if len(steps) < 2:
        return Grouping(step_ns=step_ns, late_groups=len(opened_late),
                        problem=Reason("speculative.too_few_steps", steps=len(steps) + 1))
    method = Reason("speculative.split", how=how, threshold_ms=threshold / 1e6, split_fraction=SPLIT_FRACTION,
                         step_ms=step_ns / 1e6, late=len(late), held=held, left_out=len(opened_late))
    return Grouping(steps=tuple(steps), steps_stream_wide=tuple(wide), step_ns=step_ns,
                    threshold_ns=threshold, method=method, late_groups=len(opened_late))


def step_time(gaps: Sequence[int]) -> tuple[float, Reason]:
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
        within = len(ordered) - len(upper)
        return median(upper), Reason("speculative.bimodal", within=within, between=len(upper), jump=jump)
    return median(ordered), Reason("speculative.one_mode")


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
