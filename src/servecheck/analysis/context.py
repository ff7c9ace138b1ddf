"""Decode rate against context depth: the sweep's order, drift-corrected ratios to the shallowest depth,
the verdict on a context effect, and the roofline at depth (weights + KV cache of the sequence).
Pure: numbers in, values out.

Units: bytes are integers (KV per token may be fractional for quantized caches, rounded at the end);
times are seconds; bandwidth is GB/s with GB = 10^9 bytes; ratios and utilization are fractions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from servecheck.analysis.findings import Finding
from servecheck.analysis.roofline import GB, Span
from servecheck.analysis.design import mirrored
from servecheck.analysis.rules import OUTPUT_LENGTH_TOLERANCE, drifted
from servecheck.analysis.stats import median
from servecheck.model.bodies.context import Effect
from servecheck.model.reason import Reason

# Output lengths more than OUTPUT_LENGTH_TOLERANCE (5%) from what was asked make a point invalid.
# Tokenizing the prompt alone and inside a request may differ by a special token at the boundary
# (BOS, a template head); a server that counts fewer than this below what was sent cut the prompt.
TRUNCATION_SLACK_TOKENS = 1
# The shallowest depth is measured first and last; a change between the two beyond DRIFT_LIMIT
# (analysis.rules) is drift worth saying, in either direction (a warming server, another job on the
# machine, a thermal limit).
# Within 5% of the shallowest depth the decode rate is "flat": the run-to-run spread of one stream on
# a quiet machine is a few percent.
FLAT_TOLERANCE = 0.05
# Measured below 90% of what constant utilization predicts: the fall is steeper than the bytes explain.
# 10% leaves room for the drift correction and a few percent of noise before naming compute as the cause.
STEEPER_MARGIN = 0.10


# ---------------------------------------------------------------- KV cache bookkeeping


@dataclass(frozen=True, slots=True)
class KVLayer:
    """One layer that holds a KV cache. MLA latent caches are one 'head' of (latent + rope) elements."""

    kv_heads: int
    key_length: int
    value_length: int
    window: int | None = None  # sliding-window (or chunked) layers hold at most this many positions


@dataclass(frozen=True, slots=True)
class ModelBytes:
    """What one decoded token reads besides the KV cache, and the cache's layout, from the audit.

    Recurrent (linear-attention) layers hold no KV cache: their fixed-size state is in `state_bytes`,
    read and written every token whatever the depth."""

    weights_bytes: int  # per token, as `servecheck audit` counts them
    state_bytes: int  # recurrent state, already x2 (read and written)
    kv_layers: tuple[KVLayer, ...]
    kv_element_bytes: float  # bytes per cached element of the cache type (f16 2, q8_0 34/32)
    kv_type: str = "f16"


def kv_layer_bytes_per_position(layer: KVLayer, element_bytes: float) -> float:
    """K and V of one position in one layer: KV heads x (key + value length) x bytes per element."""
    return layer.kv_heads * (layer.key_length + layer.value_length) * element_bytes


def kv_bytes_per_context_token(model: ModelBytes) -> float:
    """KV bytes each token of context adds to every decoded token's reads, before any window fills:
    2 x layers x KV heads x head size x bytes per element when K and V share one head size."""
    return sum(kv_layer_bytes_per_position(layer, model.kv_element_bytes) for layer in model.kv_layers)


def kv_read_bytes(model: ModelBytes, context: float) -> int:
    """KV bytes one decoded token reads at `context` positions: every position in reach of each layer
    (a sliding window caps it) plus the one new entry written, as `servecheck audit --context` counts."""
    if context < 0:
        raise ValueError("context must be zero or more tokens")
    total = 0.0
    for layer in model.kv_layers:
        positions = min(context, layer.window) if layer.window else context
        total += (positions + 1) * kv_layer_bytes_per_position(layer, model.kv_element_bytes)
    return round(total)


def bytes_per_token(model: ModelBytes, context: float) -> int:
    """Weights + recurrent state + KV cache at this context: what one decoded token reads."""
    return model.weights_bytes + model.state_bytes + kv_read_bytes(model, context)


def mean_context(prompt_tokens: int, tokens: int) -> float:
    """The mean context over a stream's decode: it starts at the prompt and grows by one per token."""
    return prompt_tokens + tokens / 2


# ---------------------------------------------------------------- the design


def plan_order(depths: Sequence[int], reps: int) -> list[int]:
    """Ascending depths, then descending on the next rep (a steady drift weighs on every depth alike over
    two reps), and the shallowest measured again last when the plan does not already end with it, so its
    first and last measurements bracket the run and show any drift."""
    asc = sorted(depths)
    plan: list[int] = []
    for rep in range(reps):
        plan += mirrored(asc, rep)
    if plan[-1] != asc[0]:
        plan.append(asc[0])
    return plan


def check_depths(depths: Sequence[int]) -> Reason | None:
    """Why these depths cannot make a sweep, or None."""
    if len(depths) < 2:
        return Reason("context.too_few_depths", depths=tuple(depths))
    if any(d < 0 for d in depths):
        return Reason("context.negative_depth", depths=tuple(depths))
    if any(b <= a for a, b in zip(depths, depths[1:])):
        return Reason("context.depths_not_increasing", depths=tuple(depths))
    return None


# ---------------------------------------------------------------- one measurement


@dataclass(frozen=True, slots=True)
class Sample:
    """One stream at one depth. Times are seconds from the run start."""

    depth: int
    rep: int
    order: int  # position in the run's plan
    prompt_tokens: int | None  # as sent (measured with the server's tokenizer)
    reported_prompt_tokens: int | None  # as the server counted it
    tokens: int  # generated tokens
    tokens_requested: int
    ttft_s: float | None
    decode_s: float | None  # first to last token
    mid_s: float | None  # middle of the decode, for drift interpolation
    error: str | None = None  # a failed request, with its reason
    client_late_ms: float = 0.0  # how late the client itself read it beyond the rule's tolerance (0: on time)
    # how long a hop that buffers the stream may have held it beyond the same (analysis.transit)
    hop_held_ms: float = 0.0
    resent: int = 0  # earlier sends of this depth and rep, resent because the client read them late

    @property
    def decode_tok_s(self) -> float | None:
        if self.decode_s is None or self.decode_s <= 0 or self.tokens < 2:
            return None
        return (self.tokens - 1) / self.decode_s

    @property
    def context_tokens(self) -> int | None:
        return self.prompt_tokens if self.prompt_tokens is not None else self.reported_prompt_tokens

    @property
    def prefill_tok_s(self) -> float | None:
        ctx = self.context_tokens
        if ctx is None or self.ttft_s is None or self.ttft_s <= 0:
            return None
        return ctx / self.ttft_s


def sample_problem(s: Sample, *, excuse_late: bool = False) -> Reason | None:
    """Why a sample cannot stand for its depth: failed, truncated by the server, off the asked length, or
    read late by the client itself (analysis.client_timing) on every send of it. `rep` in a reason counts
    from 0, as the sample does."""
    if s.error is not None:
        return Reason("context.request_failed", depth=s.depth, rep=s.rep, error=s.error)
    sent, reported = s.prompt_tokens, s.reported_prompt_tokens
    if sent is not None and reported is not None and reported < sent - TRUNCATION_SLACK_TOKENS:
        return Reason("context.truncated", depth=s.depth, rep=s.rep, reported=reported, sent=sent)
    if abs(s.tokens - s.tokens_requested) > OUTPUT_LENGTH_TOLERANCE * s.tokens_requested:
        return Reason("context.off_length", depth=s.depth, rep=s.rep, tokens=s.tokens,
                           requested=s.tokens_requested, tolerance=OUTPUT_LENGTH_TOLERANCE)
    if s.decode_tok_s is None:
        return Reason("context.no_decode_interval", depth=s.depth, rep=s.rep)
    if s.client_late_ms and not excuse_late:
        return Reason("context.client_late", depth=s.depth, rep=s.rep, late_ms=s.client_late_ms, resent=s.resent)
    if s.hop_held_ms and not excuse_late:
        return Reason("context.hop_held", depth=s.depth, rep=s.rep, held_ms=s.hop_held_ms)
    return None


# ---------------------------------------------------------------- the analysis


@dataclass(frozen=True, slots=True)
class ReferenceDrift:
    """The shallowest depth's first and last decode rates, and the change between them."""

    first_tok_s: float
    last_tok_s: float
    first_s: float
    last_s: float

    @property
    def change(self) -> float:
        return self.last_tok_s / self.first_tok_s - 1


@dataclass(frozen=True, slots=True)
class DepthAnalysis:
    depth: int
    context_tokens: int | None
    tokens: int | None
    ttft_s: float | None
    prefill_tok_s: float | None
    decode_tok_s: float | None
    decode_range_tok_s: tuple[float, float] | None
    ratio: float | None  # decode over the shallowest depth's, corrected for drift; None when invalid
    ratio_raw: float | None  # decode over the shallowest depth's median, uncorrected
    valid: bool
    problems: tuple[Reason, ...]
    samples: tuple[Sample, ...]


@dataclass(frozen=True, slots=True)
class ContextAnalysis:
    points: tuple[DepthAnalysis, ...]
    drift: ReferenceDrift | None
    effect: Effect
    effect_reason: Reason
    invalid: tuple[Finding, ...] = ()
    warnings: tuple[Finding, ...] = field(default=())
    # samples read late (or held by a hop) were kept: the effect is the same whatever their true times
    late_kept: bool = False

    @property
    def valid(self) -> bool:
        return not self.invalid


def _baseline_s_per_token(base: list[Sample], t: float) -> float:
    """The shallowest depth's seconds per token at time t: linear between its measurements (a steady
    drift in step time), held flat outside them."""
    pts = sorted((s.mid_s, 1.0 / s.decode_tok_s) for s in base if s.mid_s is not None and s.decode_tok_s)
    if t <= pts[0][0]:
        return pts[0][1]
    for (t0, v0), (t1, v1) in zip(pts, pts[1:]):
        if t <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return pts[-1][1]


def _point(depth: int, samples: list[Sample], base: list[Sample], base_rate: float | None, *,
           excuse_late: bool = False) -> DepthAnalysis:
    problems = tuple(p for s in samples if (p := sample_problem(s, excuse_late=excuse_late)) is not None)
    good = [s for s in samples if sample_problem(s, excuse_late=excuse_late) is None]
    shown = good or [s for s in samples if s.error is None]
    rates = [r for s in shown if (r := s.decode_tok_s) is not None]
    ratios = [_corrected_ratio(s, base) for s in good] if base else []
    return DepthAnalysis(
        depth=depth,
        context_tokens=_median_int([s.context_tokens for s in shown]),
        tokens=_median_int([s.tokens for s in shown]),
        ttft_s=_median([s.ttft_s for s in shown]),
        prefill_tok_s=_median([s.prefill_tok_s for s in shown]),
        decode_tok_s=median(rates) if rates else None,
        decode_range_tok_s=(min(rates), max(rates)) if rates else None,
        ratio=median(ratios) if ratios and good else None,
        ratio_raw=None if not rates or not base_rate else median(rates) / base_rate,
        valid=not problems and bool(good),
        problems=problems,
        samples=tuple(samples),
    )


def _corrected_ratio(s: Sample, base: list[Sample]) -> float:
    assert s.decode_tok_s is not None and s.mid_s is not None
    return s.decode_tok_s * _baseline_s_per_token(base, s.mid_s)


def _median(values: Sequence[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return median(found) if found else None


def _median_int(values: Sequence[int | None]) -> int | None:
    m = _median([float(v) for v in values if v is not None])
    return None if m is None else round(m)


def analyse_context(samples: Sequence[Sample], depths: Sequence[int]) -> ContextAnalysis:
    """Per depth: medians over its reps and the drift-corrected ratio to the shallowest depth; the
    drift between the shallowest's first and last measurement; whether decode falls with depth. Samples
    the client read late (or a hop held) are kept where the effect is the same whatever their true times
    (`effect_stands`), else each is a problem of its point."""
    if any(_untimed_s(s) for s in samples) and effect_stands(samples, depths):
        a = _analyse(samples, depths, excuse_late=True)
        worst = max(_untimed_s(s) for s in samples) * 1e3
        streams = sum(1 for s in samples if _untimed_s(s))
        kept = Finding(Reason("context.late_kept", streams=streams, late_ms=worst),
                       Reason("context.late_kept_hint"))
        return replace(a, warnings=(*a.warnings, kept), late_kept=True)
    return _analyse(samples, depths)


def _untimed_s(s: Sample) -> float:
    return (s.client_late_ms + s.hop_held_ms) / 1e3


def _shifted(s: Sample, sign: int) -> Sample:
    """The sample at the far end of what its late reads could have been: its decode span moved by its
    whole untimed margin, `sign` x (a late first token shortens it, a late last token lengthens it)."""
    d = sign * _untimed_s(s)
    if not d or s.decode_s is None:
        return s
    return replace(s, decode_s=max(s.decode_s + d, 1e-9))


def effect_stands(samples: Sequence[Sample], depths: Sequence[int]) -> bool:
    """Whether the effect is one word for any true time of the late samples: the shallowest depth's moved
    one way and the others' the other, both ways round, and all alike."""
    shallowest = min(depths)
    seen = {_analyse([_shifted(s, a if s.depth == shallowest else b) for s in samples], depths, excuse_late=True).effect
            for a, b in ((0, 0), (1, -1), (-1, 1), (1, 1), (-1, -1))}
    return len(seen) == 1 and "inconclusive" not in seen


def _analyse(samples: Sequence[Sample], depths: Sequence[int], *, excuse_late: bool = False) -> ContextAnalysis:
    shallowest = min(depths)
    base = [s for s in samples if s.depth == shallowest and sample_problem(s, excuse_late=excuse_late) is None
            and s.mid_s is not None]
    base_rates = [s.decode_tok_s for s in base if s.decode_tok_s is not None]
    base_rate = median(base_rates) if base_rates else None
    points = tuple(_point(d, [s for s in samples if s.depth == d], base, base_rate, excuse_late=excuse_late)
                   for d in depths if any(s.depth == d for s in samples))
    drift = _drift(base)
    invalid = tuple(Finding(p, Reason("context.left_out"))
                    for pt in points for p in pt.problems)
    warnings = _drift_warnings(drift)
    effect, reason = judge_effect(points, drift)
    return ContextAnalysis(points, drift, effect, reason, invalid, warnings)


def _drift(base: list[Sample]) -> ReferenceDrift | None:
    ordered = sorted(base, key=lambda s: s.order)
    if len(ordered) < 2:
        return None
    first, last = ordered[0], ordered[-1]
    assert first.decode_tok_s and last.decode_tok_s and first.mid_s is not None and last.mid_s is not None
    return ReferenceDrift(first.decode_tok_s, last.decode_tok_s, first.mid_s, last.mid_s)


def _drift_warnings(drift: ReferenceDrift | None) -> tuple[Finding, ...]:
    if drift is None or not drifted(drift.change):
        return ()
    return (Finding(
        Reason("context.drift", first_tok_s=drift.first_tok_s, last_tok_s=drift.last_tok_s, change=drift.change),
        Reason("context.drift_hint"),
    ),)


def judge_effect(points: Sequence[DepthAnalysis], drift: ReferenceDrift | None) -> tuple[Effect, Reason]:
    """falls / rises: the deepest valid depth's corrected ratio is more than 5% off 1 and off by more than
    the whole drift seen between the shallowest's first and last measurement (so no error in the drift
    correction can make it); flat: within 5% with the drift within 5% too; else inconclusive."""
    valid = [p for p in points if p.valid and p.ratio is not None]
    if len(valid) < 2 or drift is None:
        samples = [x for p in points for x in p.samples]
        late, held = any(x.client_late_ms for x in samples), any(x.hop_held_ms for x in samples)
        return "inconclusive", Reason("context.too_few_valid", client_late=late, hop_held=held)
    deepest = max(valid, key=lambda p: p.depth)
    r = deepest.ratio
    assert r is not None
    gap, swing = abs(1 - r), abs(drift.change)
    if gap > FLAT_TOLERANCE and gap > swing:
        return ("falls" if r < 1 else "rises"), (
            Reason("context.beyond_drift", depth=deepest.depth, ratio=r, drift=drift.change))
    if gap <= FLAT_TOLERANCE and not drifted(drift.change):
        return "flat", Reason("context.within_tolerance", depth=deepest.depth, ratio=r, drift=drift.change)
    return "inconclusive", Reason("context.within_drift", depth=deepest.depth, ratio=r, drift=drift.change)


# ---------------------------------------------------------------- roofline at depth


@dataclass(frozen=True, slots=True)
class RooflineRow:
    depth: int
    mean_context_tokens: float
    kv_bytes_per_token: int
    bytes_per_token: int
    decode_tok_s: float
    achieved_gb_s: float
    utilization: Span | None  # against the measured bandwidth range, when one is known
    predicted_tok_s: float  # at the shallowest depth's utilization, from the bytes alone
    measured_over_predicted: float  # drift-corrected
    steeper: bool  # the fall is steeper than the bytes explain


def roofline_at_depth(points: Sequence[DepthAnalysis], model: ModelBytes, tokens: int,
                      bandwidth_gb_s: Span | None) -> tuple[RooflineRow, ...]:
    """Per valid depth: bytes per token at its mean context, achieved bandwidth, utilization, and the rate
    a constant-utilization model predicts (the shallowest's rate x its bytes / these bytes)."""
    valid = [p for p in points
             if p.valid and p.decode_tok_s is not None and p.ratio is not None and p.context_tokens is not None]
    if not valid:
        return ()
    base = min(valid, key=lambda p: p.depth)
    assert base.decode_tok_s is not None and base.context_tokens is not None
    base_bytes = bytes_per_token(model, mean_context(base.context_tokens, tokens))
    return tuple(_row(p, model, tokens, bandwidth_gb_s, base.decode_tok_s, base_bytes) for p in valid)


def _row(p: DepthAnalysis, model: ModelBytes, tokens: int, bw: Span | None, base_rate: float,
         base_bytes: int) -> RooflineRow:
    assert p.decode_tok_s is not None and p.ratio is not None and p.context_tokens is not None
    ctx = mean_context(p.context_tokens, tokens)
    nbytes = bytes_per_token(model, ctx)
    achieved = p.decode_tok_s * nbytes / GB
    bytes_ratio = base_bytes / nbytes
    over = p.ratio / bytes_ratio
    return RooflineRow(
        depth=p.depth,
        mean_context_tokens=ctx,
        kv_bytes_per_token=kv_read_bytes(model, ctx),
        bytes_per_token=nbytes,
        decode_tok_s=p.decode_tok_s,
        achieved_gb_s=achieved,
        utilization=None if bw is None else Span(achieved / bw.hi, achieved / bw.lo),
        predicted_tok_s=base_rate * bytes_ratio,
        measured_over_predicted=over,
        steeper=over < 1 - STEEPER_MARGIN,
    )


def steeper_note(rows: Sequence[RooflineRow]) -> Reason | None:
    """One sentence when some depth falls steeper than its bytes explain, naming the worst."""
    steep = [r for r in rows if r.steeper]
    if not steep:
        return None
    worst = min(steep, key=lambda r: r.measured_over_predicted)
    return Reason("context.steeper", depth=worst.depth, measured_over_predicted=worst.measured_over_predicted)
