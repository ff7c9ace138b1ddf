"""Is the prefix cache working, inert ("accepted and does nothing"), or can we not tell?

Pure: the sends of one prefix-cache run in (the same prompt `repeats` times, then a control prompt
of equal length with different bytes, then a short floor prompt), a verdict out. Time to first token
decides first, and only when the difference is far beyond noise; the server's cache counters (cached
prompt tokens per send) are a witness: they corroborate, a contradiction is named, and they decide
only what the timing leaves open, saying so.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from servecheck.model.bodies.prefix_cache import CacheAnalysis, CacheSignal, CacheThresholds, SendKind
from servecheck.model.bodies.prefix_cache import CacheVerdict as CacheVerdictName
from servecheck.model.reason import Reason
from servecheck.model.records import RequestRecord


# Warm repeats must take under half the first send's time to first token (and under half the
# control's) to count as a cache hit by timing alone. A real hit skips nearly all of the prefill
# (the local engine went from 7.3 s to 0.19 s on a 6,400-token prompt, 0.03x), so half leaves a
# wide margin against scheduling noise while no uncached repeat gets anywhere near it.
WORKING_TTFT_RATIO = 0.5
# Warm repeats that keep at least this share of the first send's time were "as slow as the first
# within noise": the seed's inert cache showed 6.8 s every time, a ratio of 1.0.
INERT_TTFT_RATIO = 0.8
# Counters show hits when every warm repeat had at least half of its prompt served from cache.
# A working cache serves all of it but the last token or so; half tolerates engines that cache
# whole blocks only (vLLM's 16-token blocks) on short prompts.
HIT_FRACTION = 0.5
# Counters are flat when no warm repeat had more than TEMPLATE_HEAD_FRACTION of its prompt cached: a
# BOS token and a chat template's fixed head are shared by any two prompts and may be "cached"
# without a working cache (the same allowance as a load test's contamination, below).
TEMPLATE_HEAD_FRACTION = 0.05
# Without counters, `inert` needs the timing to show that a hit would have been visible: a short
# prompt sent warm (the floor: a request with almost no prefill, which is what a hit costs) must
# take at most this share of the control's time to first token. Then repeats as slow as the
# control (INERT_TTFT_RATIO) were served without the cache. A prompt whose prefill is lost in the
# request's fixed cost cannot tell a hit from a miss, and stays `unknown`.
# The first send of the same prompt is a fresh prefill too, and serves as the reference when the one
# control send came out slow (under load it once took 1.3x the repeats, which were 1.02x the first
# send): repeats at >= 0.8x a fresh prefill, with a hit costing <= 0.25x it, are >= 3.2x slower than
# a hit. A cold start only slows the first send, which makes the test harder to pass, never easier.
FLOOR_MAX_RATIO = 0.25


@dataclass(frozen=True)
class CacheSend:
    """One send as the verdict sees it."""

    kind: SendKind
    ttft_s: float | None  # None when the request failed
    cached_tokens: int | None  # None when the server reports no cache counter
    prompt_tokens: int | None  # the prompt's full length in tokens, when known
    client_late_ms: float = 0.0  # how late the client itself read it, beyond the rule's tolerance (0: on time)


@dataclass(frozen=True)
class PrefixCacheAnalysis:
    verdict: CacheVerdictName
    reason: Reason
    signal: CacheSignal  # what decided it
    warm_ttft_ratio: float | None = None  # median warm repeat TTFT / first send's TTFT
    control_ttft_ratio: float | None = None  # median warm repeat TTFT / control TTFT
    warm_cached_fraction: float | None = None  # smallest cached share of the prompt over warm repeats
    floor_ttft_ratio: float | None = None  # the short floor prompt's TTFT / the control's TTFT
    decided_by_witness: bool = False  # the timing left it open and the server's cache counters decided
    # what the cache counters read, in words, where the timing decided otherwise: a finding of its own
    witness_contradicts: Reason | None = None

    def record(self) -> CacheAnalysis:
        """As the `prefix-cache` document records it, with the thresholds it was decided against."""
        return CacheAnalysis(verdict=self.verdict, reason=self.reason, signal=self.signal,
                             warm_ttft_ratio=self.warm_ttft_ratio, control_ttft_ratio=self.control_ttft_ratio,
                             warm_cached_fraction=self.warm_cached_fraction, floor_ttft_ratio=self.floor_ttft_ratio,
                             thresholds=thresholds(), decided_by_witness=self.decided_by_witness,
                             witness_contradicts=self.witness_contradicts)


def thresholds() -> CacheThresholds:
    return CacheThresholds(working_ttft_ratio=WORKING_TTFT_RATIO, inert_ttft_ratio=INERT_TTFT_RATIO,
                           hit_fraction=HIT_FRACTION, flat_fraction=TEMPLATE_HEAD_FRACTION,
                           floor_max_ratio=FLOOR_MAX_RATIO)


@dataclass(frozen=True)
class CounterReading:
    """What the server's cache counters say about the warm repeats: a witness, weighed after the timing."""

    says: CacheVerdictName  # working (hits), inert (flat), unknown (mixed, or the control was cached too)
    description: Reason
    lowest: float | None  # the smallest cached share over the warm repeats
    shared_prefix: bool = False  # the control had as much cached: hits say nothing about repeats


def analyse_prefix_cache(sends: Sequence[CacheSend], *, counters_decide: bool = True) -> PrefixCacheAnalysis:
    """The verdict for one run: `sends` in the order sent, repeats first, then the control and the floor.

    The timing decides first. The server's cache counters corroborate it; counters that read
    otherwise are named (`witness_contradicts`) and never change a verdict the timing gave. Only
    where the timing leaves it open may they decide, and the reason then says so
    (`decided_by_witness`); `counters_decide` off (--evidence stopwatch) forbids even that.
    """
    if any(s.client_late_ms for s in sends):
        return _decided_despite_lateness(sends, counters_decide=counters_decide)
    return _decide(sends, counters_decide=counters_decide)


def _decided_despite_lateness(sends: Sequence[CacheSend], *, counters_decide: bool) -> PrefixCacheAnalysis:
    """A read late by L only lengthens a time to first token: the true one lies in [ttft - L, ttft]. Where
    the verdict is the same at every end of that (the references' late sends earlier, the others', both,
    neither), the late sends stand, and the reason says so; else they are no evidence (`client_late`)."""
    first = next((s for s in sends if s.kind == "repeat"), None)
    refs = {id(s) for s in sends if s is first or s.kind == "control"}

    def earlier(s: CacheSend) -> CacheSend:
        if s.ttft_s is None or not s.client_late_ms:
            return s
        return replace(s, ttft_s=max(s.ttft_s - s.client_late_ms / 1e3, 0.0), client_late_ms=0.0)

    bare = [replace(s, client_late_ms=0.0) for s in sends]
    ends = [bare, [earlier(s) if id(s) in refs else replace(s, client_late_ms=0.0) for s in sends],
            [replace(s, client_late_ms=0.0) if id(s) in refs else earlier(s) for s in sends],
            [earlier(s) for s in sends]]
    verdicts = [_decide(e, counters_decide=counters_decide) for e in ends]
    worst = max(s.client_late_ms for s in sends)
    if len({v.verdict for v in verdicts}) == 1 and verdicts[0].verdict != "unknown":
        return replace(verdicts[0], reason=Reason("prefix_cache.late_kept", verdict=verdicts[0].reason, late_ms=worst))
    return _decide(sends, counters_decide=counters_decide)


def _decide(sends: Sequence[CacheSend], *, counters_decide: bool) -> PrefixCacheAnalysis:
    """analyse_prefix_cache's rules, with the sends the client read late left out (or, reading a reference late,
    no verdict)."""
    late = client_late(sends)
    if late is not None:
        return PrefixCacheAnalysis("unknown", late, "none")
    # a warm repeat or the floor the client read late is left out; the rest still compare
    repeats = [s for i, s in enumerate(r for r in sends if r.kind == "repeat") if i == 0 or not s.client_late_ms]
    control = next((s for s in sends if s.kind == "control"), None)
    floor = next((s for s in sends if s.kind == "floor" and s.ttft_s is not None and not s.client_late_ms), None)
    if len(repeats) < 2:
        others_late = any(s.client_late_ms for s in sends)
        return PrefixCacheAnalysis("unknown", Reason("prefix_cache.too_few_repeats", others_late=others_late), "none")
    if any(s.ttft_s is None for s in (*repeats, *([control] if control else []))):
        return PrefixCacheAnalysis("unknown", Reason("prefix_cache.send_failed"), "none")
    timing = _timing(repeats, control)
    counters = read_counters(repeats, control)
    floor_ratio = floor_first_ratio = None
    if floor is not None and floor.ttft_s is not None and control is not None and control.ttft_s:
        floor_ratio = floor.ttft_s / control.ttft_s
    if floor is not None and floor.ttft_s is not None and repeats[0].ttft_s:
        floor_first_ratio = floor.ttft_s / repeats[0].ttft_s
    clocked = _by_timing(timing, counters is None, floor_ratio=floor_ratio, floor_first_ratio=floor_first_ratio)
    clocked = replace(clocked, floor_ttft_ratio=floor_ratio,
                      warm_cached_fraction=None if counters is None else counters.lowest)
    if counters is None:
        return clocked
    if clocked.verdict != "unknown":
        return _beside_counters(clocked, counters)
    return _tie_break(clocked, counters, timing, counters_decide=counters_decide)


def client_late(sends: Sequence[CacheSend]) -> Reason | None:
    """Why the sends every ratio is taken of cannot be compared, or None: the first send of the prompt
    or the control read late looks slower than it was, which makes any repeat look like a hit."""
    first = next((s for s in sends if s.kind == "repeat"), None)
    control = next((s for s in sends if s.kind == "control"), None)
    late = [s for s in (first, control) if s is not None and s.client_late_ms]
    if not late:
        return None
    return Reason("prefix_cache.reference_late", late_ms=max(s.client_late_ms for s in late),
               first=any(s is first for s in late), control=any(s is not first for s in late))


def read_counters(repeats: Sequence[CacheSend], control: CacheSend | None) -> CounterReading | None:
    """The counters' reading of the warm repeats; None unless every warm repeat has one."""
    fractions = _fractions(list(repeats[1:]), repeats[0])
    if fractions is None:
        return None
    lowest, highest = min(fractions), max(fractions)
    control_fraction = _fraction(control, repeats[0]) if control is not None else None
    if control_fraction is not None and control_fraction >= HIT_FRACTION:
        return CounterReading("unknown", (
            Reason("prefix_cache.counters_shared_prefix", control_fraction=control_fraction)), lowest, True)
    if lowest >= HIT_FRACTION:
        return CounterReading("working", Reason("prefix_cache.counters_hit", lowest=lowest), lowest)
    if highest <= TEMPLATE_HEAD_FRACTION:
        return CounterReading("inert", Reason("prefix_cache.counters_flat", highest=highest), lowest)
    return CounterReading("unknown", Reason("prefix_cache.counters_mixed", lowest=lowest, highest=highest), lowest)


def _beside_counters(clocked: PrefixCacheAnalysis, counters: CounterReading) -> PrefixCacheAnalysis:
    """A verdict the timing gave, with the counters beside it: they agree, say nothing, or contradict it."""
    if counters.says == clocked.verdict:
        return replace(clocked, reason=(
            Reason("prefix_cache.counters_agree", timing=clocked.reason, counters=counters.description)))
    if counters.says == "unknown" and not counters.shared_prefix:
        return replace(clocked, reason=(
            Reason("prefix_cache.counters_beside", timing=clocked.reason, counters=counters.description)))
    return replace(clocked, witness_contradicts=counters.description, reason=(
        Reason("prefix_cache.counters_contradict", timing=clocked.reason, counters=counters.description)))


def _tie_break(clocked: PrefixCacheAnalysis, counters: CounterReading, timing: tuple[float | None, float | None], *,
               counters_decide: bool) -> PrefixCacheAnalysis:
    """The timing left it open: the counters may decide it, labelled as such; never against the timing's
    own lean (flat counters beside repeats faster than noise explains stay unknown)."""
    says = counters.says
    if says == "inert" and not _as_slow(timing):
        says = "unknown"
    if says == "unknown" or not counters_decide:
        held_back = not (counters_decide or counters.says == "unknown")  # --evidence stopwatch kept them out
        signal: CacheSignal = "counters" if counters.shared_prefix or counters.says == "inert" else "none"
        return replace(clocked, signal=signal, reason=(
            Reason("prefix_cache.counters_undecided", timing=clocked.reason, counters=counters.description,
                   held_back=held_back)))
    return replace(
        clocked, verdict=says, signal="counters", decided_by_witness=True, reason=(
            Reason("prefix_cache.decided_by_counters", timing=clocked.reason, counters=counters.description)),
    )


def _by_timing(
    timing: tuple[float | None, float | None], no_counters: bool = True, *,
    floor_ratio: float | None = None, floor_first_ratio: float | None = None,
) -> PrefixCacheAnalysis:
    """What the timing alone says; `no_counters` opens the reason with that (else the counters are weighed
    after it)."""
    warm, control = timing
    if _faster(timing):
        return PrefixCacheAnalysis(
            "working",
            Reason("prefix_cache.faster", no_counters=no_counters, warm=warm, control=control),
            "timing",
            *timing,
        )
    if _as_slow(timing) and control is not None and floor_ratio is not None and floor_ratio <= FLOOR_MAX_RATIO:
        return PrefixCacheAnalysis(
            "inert",
            Reason("prefix_cache.as_slow_as_control", no_counters=no_counters, control=control,
                        floor_ratio=floor_ratio),
            "timing",
            *timing,
        )
    if _slow_as_the_first(warm, floor_first_ratio):
        return PrefixCacheAnalysis(
            "inert",
            Reason("prefix_cache.as_slow_as_first", no_counters=no_counters, warm=warm,
                        floor_first_ratio=floor_first_ratio, control=control),
            "timing",
            *timing,
        )
    if warm is not None and warm >= INERT_TTFT_RATIO:
        if floor_first_ratio is None:
            reason = Reason("prefix_cache.no_floor", no_counters=no_counters, warm=warm)
        else:
            reason = Reason("prefix_cache.floor_too_slow", no_counters=no_counters, warm=warm,
                                 floor_first_ratio=floor_first_ratio, floor_max=FLOOR_MAX_RATIO)
    else:
        reason = Reason("prefix_cache.within_noise", no_counters=no_counters, warm=warm)
    return PrefixCacheAnalysis("unknown", reason, "none", *timing)


def _slow_as_the_first(warm: float | None, floor_first_ratio: float | None) -> bool:
    """Repeats as slow as the first send of their prompt, and a hit would have shown against it."""
    return (warm is not None and warm >= INERT_TTFT_RATIO and floor_first_ratio is not None
            and floor_first_ratio <= FLOOR_MAX_RATIO)


def _faster(timing: tuple[float | None, float | None]) -> bool:
    warm, control = timing
    return warm is not None and warm < WORKING_TTFT_RATIO and (control is None or control < WORKING_TTFT_RATIO)


def _as_slow(timing: tuple[float | None, float | None]) -> bool:
    """Repeats as slow as a send the cache cannot serve, within noise. The control is the fair
    comparison when there is one (a fresh prompt of equal length, sent warm); the first send may
    carry a cold start."""
    warm, control = timing
    reference = control if control is not None else warm
    return reference is not None and reference >= INERT_TTFT_RATIO


def _timing(repeats: list[CacheSend], control: CacheSend | None) -> tuple[float | None, float | None]:
    warm = statistics.median(s.ttft_s for s in repeats[1:] if s.ttft_s is not None)
    first = repeats[0].ttft_s
    warm_ratio = warm / first if first else None
    control_ratio = warm / control.ttft_s if control is not None and control.ttft_s else None
    return warm_ratio, control_ratio


def _fractions(warm: list[CacheSend], first: CacheSend) -> list[float] | None:
    """Cached share of the prompt per warm repeat; None unless every warm repeat has a counter."""
    fractions = [_fraction(s, first) for s in warm]
    if not fractions or any(f is None for f in fractions):
        return None
    return [f for f in fractions if f is not None]


def _fraction(send: CacheSend, first: CacheSend) -> float | None:
    length = send.prompt_tokens or first.prompt_tokens
    if send.cached_tokens is None or not length:
        return None
    return min(send.cached_tokens / length, 1.0)


# --- contamination of load tests --------------------------------------------------------------
# Cached prompt tokens up to TEMPLATE_HEAD_FRACTION of the prompt (or the tokens below) are a BOS
# token or a chat template's fixed head, which every request has and which cannot fake a concurrency
# win (llama.cpp reports 1-2 cached tokens on every request for the BOS it keeps in the slot); more
# means the prefix cache served part of a measured prompt.
CONTAMINATION_ALLOWANCE_TOKENS = 4


def contaminated(cached_tokens: int | None, prompt_tokens: int | None) -> bool:
    """Did the prefix cache serve more of a measured prompt than any two distinct prompts share?"""
    if cached_tokens is None or cached_tokens <= 0:
        return False
    allowance = float(CONTAMINATION_ALLOWANCE_TOKENS)
    if prompt_tokens:
        allowance = max(allowance, TEMPLATE_HEAD_FRACTION * prompt_tokens)
    return cached_tokens > allowance


def cached_prompt_beyond_template(r: RequestRecord) -> int | None:
    """Cached prompt tokens that can only have come from the prompt's own text.

    A chat endpoint wraps every prompt in the same template, whose head any two requests share
    and a prefix cache may serve; the server counts the templated prompt while the prompt was
    measured bare, so the difference bounds the template and cached tokens within it are no
    contamination (llama.cpp's chat route: 42 templated tokens for a 16-token prompt, 10 cached).
    """
    s = r.server
    if s is None or s.cached_prompt_tokens is None:
        return None
    template = 0
    if r.prompt_tokens is not None and s.prompt_tokens is not None:
        template = max(0, s.prompt_tokens - r.prompt_tokens)
    return s.cached_prompt_tokens - template


def record_contaminated(r: RequestRecord) -> bool:
    """Did the prefix cache serve part of this measured request's own prompt text?"""
    if r.server is None:
        return False
    return contaminated(cached_prompt_beyond_template(r), r.prompt_tokens or r.server.prompt_tokens)
